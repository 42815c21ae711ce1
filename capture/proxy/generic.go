package proxy

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/capbench/capbench/internal/jsonscan"
)

// A direct parser for the generic JSON form (map[string]any, []any,
// json.Number, string, bool, nil) that encoding/json produces with
// UseNumber. Request bodies and the small fields of engine replies are
// decoded many times per call; a json.Decoder per value costs a buffer and
// reflection each time. The parser accepts only input it can read with
// exactly encoding/json's result and reports ok=false for anything else
// (escaped or invalid UTF-8 strings excepted: those are handed to
// encoding/json one string at a time), so callers fall back to
// encoding/json, which then produces the value or the error it always did.

// maxGenericDepth mirrors encoding/json's nesting limit; deeper input falls
// back so that the error stays encoding/json's.
const maxGenericDepth = 10000

// parseGeneric parses b, one JSON value with optional surrounding
// whitespace.
func parseGeneric(b []byte) (any, bool) {
	v, end, ok := genericValue(b, skipWS(b, 0), 0)
	if !ok || skipWS(b, end) != len(b) {
		return nil, false
	}
	return v, true
}

// parseGenericMembers parses b as one JSON object, returning it and its
// members' raw bytes (rawObject) from the same pass. A member named lazy
// (none when "") is only checked, and left as a *lazyValue; when that
// member's list begins with head, bytes an earlier scan checked
// (conversationMemo.head), only what follows them is.
func parseGenericMembers(b []byte, lazy string, head []byte) (map[string]any, []rawMember, bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, nil, false
	}
	top := &topLevel{lazy: lazy, head: head}
	v, end, ok := genericObject(b, i, 1, top)
	if !ok || skipWS(b, end) != len(b) {
		return nil, nil, false
	}
	return v.(map[string]any), top.members, true
}

// topLevel is what genericObject also does for the outermost object: keep
// each member's bytes, and leave one member undecoded.
type topLevel struct {
	members []rawMember
	lazy    string
	head    []byte
}

// member reads the value of the top-level member k at b[i].
func (t *topLevel) member(b []byte, i, depth int, k string) (any, int, bool) {
	if t.lazy != "" && k == t.lazy {
		if v, end, ok := lazyMember(b, i, t.head); ok {
			return v, end, true
		}
	}
	return genericValue(b, i, depth)
}

func genericValue(b []byte, i, depth int) (any, int, bool) {
	if i >= len(b) {
		return nil, 0, false
	}
	switch c := b[i]; c {
	case '{':
		return genericObject(b, i, depth+1, nil)
	case '[':
		return genericArray(b, i, depth+1)
	case '"':
		return genericString(b, i)
	case 't':
		if hasLiteral(b, i, "true") {
			return true, i + 4, true
		}
	case 'f':
		if hasLiteral(b, i, "false") {
			return false, i + 5, true
		}
	case 'n':
		if hasLiteral(b, i, "null") {
			return nil, i + 4, true
		}
	default:
		if end, ok := numberEnd(b, i); ok {
			return json.Number(b[i:end]), end, true
		}
	}
	return nil, 0, false
}

func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// genericObject reads the object at b[i] == '{'; with top not nil it is
// the outermost object (topLevel).
func genericObject(b []byte, i, depth int, top *topLevel) (any, int, bool) {
	if depth > maxGenericDepth {
		return nil, 0, false
	}
	m := map[string]any{}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return m, i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, 0, false
		}
		k, end, ok := genericKey(b, i)
		if !ok {
			return nil, 0, false
		}
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, 0, false
		}
		start := skipWS(b, i+1)
		var v any
		if top != nil {
			v, end, ok = top.member(b, start, depth, k)
		} else {
			v, end, ok = genericValue(b, start, depth)
		}
		if !ok {
			return nil, 0, false
		}
		m[k] = v
		if top != nil {
			top.members = append(top.members, rawMember{k, b[start:end]})
		}
		i = skipWS(b, end)
		if i >= len(b) {
			return nil, 0, false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return m, i + 1, true
		default:
			return nil, 0, false
		}
	}
}

func genericArray(b []byte, i, depth int) (any, int, bool) {
	if depth > maxGenericDepth {
		return nil, 0, false
	}
	list := []any{}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return list, i + 1, true
	}
	for {
		v, end, ok := genericValue(b, i, depth)
		if !ok {
			return nil, 0, false
		}
		list = append(list, v)
		i = skipWS(b, end)
		if i >= len(b) {
			return nil, 0, false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return list, i + 1, true
		default:
			return nil, 0, false
		}
	}
}

// genericKey reads an object key: genericString without boxing it, and
// without copying the common keys.
func genericKey(b []byte, i int) (string, int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return internKey(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			v, end, ok := genericString(b, i)
			if !ok {
				return "", 0, false
			}
			return v.(string), end, true
		}
	}
	return "", 0, false
}

// genericString reads the string at b[i] == '"'. Plain strings are copied
// directly; escaped or non-ASCII ones that are not valid UTF-8 go through
// encoding/json so that unescaping and U+FFFD replacement stay its own.
func genericString(b []byte, i int) (any, int, bool) {
	plain, ascii := true, true
	for j := i + 1; j < len(b); j++ {
		if j = jsonscan.StringRun(b, j, ascii); j >= len(b) {
			break
		}
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if plain && (ascii || utf8.Valid(s)) {
				return string(s), j + 1, true
			}
			var out string
			if json.Unmarshal(b[i:j+1], &out) != nil {
				return nil, 0, false
			}
			return out, j + 1, true
		case c == '\\':
			plain = false
			j++
		case c < 0x20:
			return nil, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, 0, false
}

// numberEnd returns the end of the JSON number at b[i], which must be
// followed by a delimiter or the end of input.
func numberEnd(b []byte, i int) (int, bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		j = digitsEnd(b, j)
	default:
		return 0, false
	}
	if j < len(b) && b[j] == '.' {
		k := digitsEnd(b, j+1)
		if k == j+1 {
			return 0, false
		}
		j = k
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		k := digitsEnd(b, j)
		if k == j {
			return 0, false
		}
		j = k
	}
	if j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\n', '\r', '\t':
		default:
			return 0, false
		}
	}
	return j, true
}

func digitsEnd(b []byte, j int) int {
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	return j
}
