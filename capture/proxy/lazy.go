package proxy

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/capbench/capbench/internal/jsonscan"
)

// lazyValue is a request member whose syntax has been checked but whose
// value is decoded only when first read. A long conversation's messages
// are most of a chat request, and on the capture path only the parent
// resolution reads them, beside the engine call; the engine gets the
// client's own bytes of them either way (rawObject).
type lazyValue struct {
	raw  []byte
	once sync.Once
	v    any
}

// lazyMember checks the JSON value at b[i] and returns it undecoded, with
// the index just past it; ok is false when it is not valid JSON (or nests
// deeper than the scanner goes), and the caller decodes eagerly instead.
//
// A list that begins with head, the bytes of a list checked before up to
// the end of an element, is checked from there on: an agent's request
// repeats its previous one's conversation, and scanning it again was most
// of what reading a long request cost before the engine call.
func lazyMember(b []byte, i int, head []byte) (*lazyValue, int, bool) {
	end, ok := 0, false
	if len(head) > 0 && head[0] == '[' && bytes.HasPrefix(b[i:], head) {
		end, ok = jsonscan.ArrayFrom(b, i+len(head), 1)
	}
	if !ok {
		end, ok = jsonscan.Value(b, i)
	}
	if !ok {
		return nil, 0, false
	}
	return &lazyValue{raw: b[i:end]}, end, true
}

// value decodes the member once (as decodeObject would have: exact
// numbers); it cannot fail on what lazyMember accepted.
func (l *lazyValue) value() any {
	l.once.Do(func() {
		v, err := decodeAny(l.raw)
		if err == nil {
			l.v = v
		}
	})
	return l.v
}

// isList reports whether v is a JSON list, decoded or not.
func isList(v any) bool {
	switch x := v.(type) {
	case []any:
		return true
	case *lazyValue:
		return len(x.raw) > 0 && x.raw[0] == '['
	}
	return false
}

// MarshalJSON writes the client's bytes, compacted as encoding/json does
// for a json.RawMessage.
func (l *lazyValue) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, l.raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decoded returns body with every lazy member decoded (a shallow copy, or
// body itself when it has none).
func decoded(body map[string]any) map[string]any {
	var out map[string]any
	for k, v := range body {
		if l, ok := v.(*lazyValue); ok {
			if out == nil {
				out = cloneMap(body)
			}
			out[k] = l.value()
		}
	}
	if out == nil {
		return body
	}
	return out
}
