package proxy

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"

	"github.com/capbench/capbench/capture/proxy/anthropic"
)

// Key order is part of the prompt: a chat template renders tool schemas and
// object-valued tool arguments with tojson, which keeps insertion order. The
// proxy reads client bodies as Go maps (which have none), so every value that
// goes back upstream unchanged is re-sent as the client's own bytes
// (docs/argument-order.md).

// rawObject is a client request object: the decoded fields to read and
// rewrite, and the raw bytes of each top-level member to re-send.
type rawObject struct {
	fields  map[string]any
	members []rawMember // in the order written
}

type rawMember struct {
	key string
	raw []byte
}

// newRawObject splits raw (already decoded into fields) into its members;
// nil when the splitter cannot read it, in which case encode falls back to
// marshalGeneric.
func newRawObject(raw []byte, fields map[string]any) *rawObject {
	var members []rawMember
	err := eachField(raw, func(key string, val []byte) error {
		members = append(members, rawMember{key, val})
		return nil
	})
	if err != nil {
		return nil
	}
	return rawObjectOf(fields, members)
}

// rawObjectOf is newRawObject for members already split out.
func rawObjectOf(fields map[string]any, members []rawMember) *rawObject {
	// A snapshot: the caller rewrites its map in place.
	return &rawObject{fields: maps.Clone(fields), members: members}
}

// encode writes out, an object built from ro's fields with some members
// added, replaced or removed: members left as they were decoded are copied
// byte for byte in the client's order, the others are encoded after them.
// A nil ro encodes out with marshalGeneric.
func (ro *rawObject) encode(out map[string]any) ([]byte, error) {
	return ro.encodeSized(out, 512)
}

// encodeSized is encode into a buffer of size bytes to start with: an
// engine request is about as long as the client's body, and growing a
// buffer to it by doubling allocates it about twice over.
func (ro *rawObject) encodeSized(out map[string]any, size int) ([]byte, error) {
	dst := make([]byte, 0, size)
	if ro == nil {
		return appendGeneric(dst, out, 0)
	}
	dst = append(dst, '{')
	written := make(map[string]bool, len(out))
	n := 0
	member := func(key string) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst, _ = appendJSONString(dst, key)
		dst = append(dst, ':')
	}
	for _, m := range ro.members {
		v, ok := out[m.key]
		if !ok || written[m.key] || !sameValue(v, ro.fields[m.key]) {
			continue
		}
		// A duplicated key keeps its last value, as every JSON reader here
		// decodes it; the earlier copies are not sent.
		if last := ro.lastRaw(m.key); last != nil {
			member(m.key)
			dst = append(dst, last...)
			written[m.key] = true
		}
	}
	rest := make([]string, 0, len(out)-len(written))
	for k := range out {
		if !written[k] {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	var err error
	for _, k := range rest {
		member(k)
		if dst, err = appendGeneric(dst, out[k], 0); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

func (ro *rawObject) lastRaw(key string) []byte {
	for i := len(ro.members) - 1; i >= 0; i-- {
		if ro.members[i].key == key {
			return ro.members[i].raw
		}
	}
	return nil
}

// sameValue reports whether v is the very value decoded (not an equal copy):
// maps and slices by identity, scalars by value. Nested values are never
// edited in place on the way upstream, so identity means unchanged.
func sameValue(v, decoded any) bool {
	switch x := v.(type) {
	case map[string]any:
		y, ok := decoded.(map[string]any)
		return ok && x != nil && y != nil && reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	case []any:
		y, ok := decoded.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	case *lazyValue:
		y, ok := decoded.(*lazyValue)
		return ok && x == y
	case nil, string, bool, json.Number:
		switch decoded.(type) {
		case nil, string, bool, json.Number:
			return v == decoded
		}
	}
	return false
}

// messagesRaw collects the client's bytes of every tool_use input and tool
// input_schema of a Messages body, in one pass; nil when the body's shape
// is not one the splitter reads (the translation then falls back).
func messagesRaw(raw []byte) *anthropic.Raw {
	out := &anthropic.Raw{ToolInputs: map[[2]int]json.RawMessage{}, ToolSchemas: map[int]json.RawMessage{}}
	err := eachField(raw, func(key string, val []byte) error {
		switch key {
		case "tools":
			// A repeated member replaces the earlier one, as decoding does.
			var err error
			out.ToolSchemas, err = toolSchemas(val)
			return err
		case "messages":
			out.ToolInputs = map[[2]int]json.RawMessage{}
			return toolInputs(val, 0, out.ToolInputs)
		}
		return nil
	})
	if err != nil {
		return nil
	}
	return out
}

// messagesRawAfter is messagesRaw for the messages from index from on:
// tail is the messages list's bytes from the comma (or bracket) after
// message from-1, and members the body's top-level members as sent.
func messagesRawAfter(members []rawMember, tail []byte, from int) *anthropic.Raw {
	out := &anthropic.Raw{ToolInputs: map[[2]int]json.RawMessage{}, ToolSchemas: map[int]json.RawMessage{}}
	for _, m := range members {
		if m.key == "tools" {
			var err error
			if out.ToolSchemas, err = toolSchemas(m.raw); err != nil {
				return nil
			}
		}
	}
	if len(tail) > 0 && tail[0] == ',' {
		list := make([]byte, 0, len(tail))
		list = append(append(list, '['), tail[1:]...)
		if toolInputs(list, from, out.ToolInputs) != nil {
			return nil
		}
	}
	return out
}

// toolSchemas is the input_schema bytes of each tool of a tools list, by
// the tool's index.
func toolSchemas(val []byte) (map[int]json.RawMessage, error) {
	out := map[int]json.RawMessage{}
	k := 0
	err := ignoreShape(eachElem(val, func(tool []byte) error {
		_ = eachField(tool, func(f string, v []byte) error {
			if f == "input_schema" {
				out[k] = v
			}
			return nil
		})
		k++
		return nil
	}))
	return out, err
}

// toolInputs puts into out the input bytes of each content block of the
// messages list val, by message index (counted from first) and block
// index.
func toolInputs(val []byte, first int, out map[[2]int]json.RawMessage) error {
	i := first
	return ignoreShape(eachElem(val, func(msg []byte) error {
		_ = eachField(msg, func(f string, content []byte) error {
			if f != "content" || len(content) == 0 || content[0] != '[' {
				return nil
			}
			j := 0
			return eachElem(content, func(block []byte) error {
				_ = eachField(block, func(bf string, v []byte) error {
					if bf == "input" {
						out[[2]int{i, j}] = v
					}
					return nil
				})
				j++
				return nil
			})
		})
		i++
		return nil
	}))
}

// ignoreShape turns a shape error inside one member into "nothing found":
// a member the splitter cannot read (a string where a list was expected)
// leaves its values to the fallback.
func ignoreShape(err error) error {
	if err == errShape {
		return nil
	}
	return err
}

// responsesRaw collects the client's bytes of each tools[k].parameters of a
// Responses body, and of each non-string input[i].output.
func responsesRaw(raw []byte) (params map[int]json.RawMessage, outputs map[int]json.RawMessage) {
	params, outputs = map[int]json.RawMessage{}, map[int]json.RawMessage{}
	_ = eachField(raw, func(key string, val []byte) error {
		var want string
		var into map[int]json.RawMessage
		switch key {
		case "tools":
			params = map[int]json.RawMessage{}
			want, into = "parameters", params
		case "input":
			outputs = map[int]json.RawMessage{}
			want, into = "output", outputs
		default:
			return nil
		}
		k := 0
		_ = eachElem(val, func(el []byte) error {
			_ = eachField(el, func(f string, v []byte) error {
				if f == want {
					into[k] = v
				}
				return nil
			})
			k++
			return nil
		})
		return nil
	})
	return params, outputs
}
