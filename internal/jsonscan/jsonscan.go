// Package jsonscan is a small validating JSON scanner for hot request
// paths: it finds the extent of values and walks objects and arrays without
// building them, and it accepts exactly the documents encoding/json accepts
// (RFC 8259 syntax; invalid UTF-8 inside strings is allowed, as
// encoding/json allows it). Callers decode the few fields they need and
// fall back to encoding/json on anything unusual, so error messages stay
// encoding/json's.
package jsonscan

import "unicode/utf8"

// MaxDepth is the deepest nesting Value accepts; deeper documents are
// reported as not scanned (encoding/json's own limit is 10000).
const MaxDepth = 512

// SkipWS returns the index of the first non-whitespace byte at or after i.
func SkipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// String scans the string starting at b[i] == '"' and returns the index
// just past its closing quote and whether it holds escapes.
func String(b []byte, i int) (end int, escaped, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false, false
	}
	for j := i + 1; j < len(b); j++ {
		if j = StringRun(b, j, false); j >= len(b) {
			break
		}
		c := b[j]
		switch {
		case c == '"':
			return j + 1, escaped, true
		case c < 0x20:
			return 0, false, false
		case c == '\\':
			escaped = true
			j++
			if j >= len(b) {
				return 0, false, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) || !isHex(b[j+1]) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) {
					return 0, false, false
				}
				j += 4
			default:
				return 0, false, false
			}
		}
	}
	return 0, false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Number scans the number starting at b[i] and returns the index just past
// it and whether it is an integer (no fraction, no exponent).
func Number(b []byte, i int) (end int, integer, ok bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && '1' <= b[j] && b[j] <= '9':
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
	default:
		return 0, false, false
	}
	integer = true
	if j < len(b) && b[j] == '.' {
		integer = false
		j++
		k := j
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		if j == k {
			return 0, false, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		integer = false
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		k := j
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		if j == k {
			return 0, false, false
		}
	}
	return j, integer, true
}

// Value scans the value starting at b[i] (no leading whitespace) and
// returns the index just past it.
func Value(b []byte, i int) (end int, ok bool) { return value(b, i, 0) }

// ValueDepth is Value for a value nested depth levels down, so the
// MaxDepth bound counts from the document's top.
func ValueDepth(b []byte, i, depth int) (end int, ok bool) { return value(b, i, depth) }

func value(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _, ok := String(b, i)
		return end, ok
	case c == '{':
		if depth >= MaxDepth {
			return 0, false
		}
		return skipObject(b, i, depth+1)
	case c == '[':
		if depth >= MaxDepth {
			return 0, false
		}
		return skipArray(b, i, depth+1)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	default:
		end, _, ok := Number(b, i)
		return end, ok
	}
}

func literal(b []byte, i int, word string) (int, bool) {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return 0, false
	}
	return i + len(word), true
}

// skipObject scans the object at b[i] == '{' as ObjectAt does, without a
// reader to call: skipping is most of what a scan does, and Value through
// ObjectAt with a reader per member took 10-20% longer (BenchmarkValue).
func skipObject(b []byte, i, depth int) (int, bool) {
	j, empty, ok := open(b, i, '{', '}')
	if !ok || empty {
		return j, ok
	}
	for {
		_, _, v, ok := memberKey(b, j)
		if !ok {
			return 0, false
		}
		vEnd, ok := value(b, v, depth)
		if !ok {
			return 0, false
		}
		var done bool
		if j, done, ok = next(b, vEnd, '}'); !ok || done {
			return j, ok
		}
	}
}

// skipArray is skipObject for an array.
func skipArray(b []byte, i, depth int) (int, bool) {
	j, empty, ok := open(b, i, '[', ']')
	if !ok || empty {
		return j, ok
	}
	for {
		vEnd, ok := value(b, j, depth)
		if !ok {
			return 0, false
		}
		var done bool
		if j, done, ok = next(b, vEnd, ']'); !ok || done {
			return j, ok
		}
	}
}

// ArrayFrom finishes the scan of an array whose elements up to end are
// known good: the bytes before end were checked already, by an earlier
// scan of the same bytes (a rollout's next request repeats its previous
// one's list). end is just past an element; depth is the array's own, as
// Value would nest it (1 for a top-level member's value). It returns the
// index just past the closing bracket; ok is false when end is not
// followed by a comma or the bracket (the known element goes on here).
func ArrayFrom(b []byte, end, depth int) (int, bool) {
	for {
		j, done, ok := next(b, end, ']')
		if !ok || done {
			return j, ok
		}
		if end, ok = value(b, j, depth); !ok {
			return 0, false
		}
	}
}

// Object walks the object starting at b[i] == '{', calling fn with each raw
// key (the bytes between its quotes), its raw value and whether the key
// holds escapes; fn returning false stops the walk as not ok. depth is the
// nesting depth of the object (0 for a top-level one).
func Object(b []byte, i int, fn func(key, val []byte, keyEscaped bool) bool, depth int) (end int, ok bool) {
	return ObjectAt(b, i, func(key []byte, esc bool, v int) (int, bool) {
		vEnd, ok := value(b, v, depth)
		return vEnd, ok && fn(key, b[v:vEnd], esc)
	})
}

// ObjectAt walks the object starting at b[i] == '{' as Object does, but fn
// reads each value itself: it is given where the value starts and returns
// the index just past it (ValueDepth skips a value it does not want), so a
// caller that decodes the values scans each byte once.
func ObjectAt(b []byte, i int, fn func(key []byte, keyEscaped bool, v int) (vEnd int, ok bool)) (end int, ok bool) {
	j, empty, ok := open(b, i, '{', '}')
	if !ok || empty {
		return j, ok
	}
	for {
		key, esc, v, ok := memberKey(b, j)
		if !ok {
			return 0, false
		}
		vEnd, ok := fn(key, esc, v)
		if !ok {
			return 0, false
		}
		var done bool
		if j, done, ok = next(b, vEnd, '}'); !ok || done {
			return j, ok
		}
	}
}

// Array walks the array starting at b[i] == '[', calling fn with each raw
// element; fn returning false stops the walk as not ok.
func Array(b []byte, i int, fn func(elem []byte) bool, depth int) (end int, ok bool) {
	return ArrayAt(b, i, func(v int) (int, bool) {
		vEnd, ok := value(b, v, depth)
		return vEnd, ok && fn(b[v:vEnd])
	})
}

// ArrayAt walks the array starting at b[i] == '[' as Array does, but fn
// reads each element itself, as ObjectAt's does.
func ArrayAt(b []byte, i int, fn func(v int) (vEnd int, ok bool)) (end int, ok bool) {
	j, empty, ok := open(b, i, '[', ']')
	if !ok || empty {
		return j, ok
	}
	for {
		vEnd, ok := fn(j)
		if !ok {
			return 0, false
		}
		var done bool
		if j, done, ok = next(b, vEnd, ']'); !ok || done {
			return j, ok
		}
	}
}

// open checks that b[i] opens a container with the bracket o and returns
// where its first member starts; when it is empty, j is just past the
// closing bracket c.
func open(b []byte, i int, o, c byte) (j int, empty, ok bool) {
	if i >= len(b) || b[i] != o {
		return 0, false, false
	}
	j = SkipWS(b, i+1)
	if j < len(b) && b[j] == c {
		return j + 1, true, true
	}
	return j, false, true
}

// memberKey reads an object member's key and colon at b[j] and returns the
// key's raw bytes, whether it holds escapes and where the value starts.
func memberKey(b []byte, j int) (key []byte, escaped bool, v int, ok bool) {
	kEnd, esc, ok := String(b, j)
	if !ok {
		return nil, false, 0, false
	}
	colon := SkipWS(b, kEnd)
	if colon >= len(b) || b[colon] != ':' {
		return nil, false, 0, false
	}
	return b[j+1 : kEnd-1], esc, SkipWS(b, colon+1), true
}

// next reads what follows a member that ends at end: a comma and the next
// member's start, or the closing bracket c (done, j just past it).
func next(b []byte, end int, c byte) (j int, done, ok bool) {
	j = SkipWS(b, end)
	if j >= len(b) {
		return 0, false, false
	}
	switch b[j] {
	case ',':
		return SkipWS(b, j+1), false, true
	case c:
		return j + 1, true, true
	}
	return 0, false, false
}

// Document scans a whole document: one value with only whitespace around
// it, the shape encoding/json.Unmarshal accepts.
func Document(b []byte) bool {
	i := SkipWS(b, 0)
	end, ok := Value(b, i)
	return ok && SkipWS(b, end) == len(b)
}

// PlainString returns the contents of a raw JSON string value that holds
// no escapes and only valid UTF-8: exactly what encoding/json would decode
// it to. ok is false for anything else (the caller decodes those).
func PlainString(raw []byte) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	for _, c := range in {
		if c == '\\' || c == '"' || c < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(in) {
		return "", false
	}
	return string(in), true
}

// PlainKey reports whether a raw object key can only match a struct field
// by exact spelling in encoding/json: lower-case ASCII, digits and
// punctuation, no escapes. Others may match a field case-insensitively.
func PlainKey(key []byte, escaped bool) bool {
	if escaped {
		return false
	}
	for _, c := range key {
		if c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}
