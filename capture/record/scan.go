package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// errSyntax marks malformed JSON found by the dedicated scanner.
var errSyntax = errors.New("malformed JSON")

// scanner walks one JSON text without building a generic tree. It validates
// what it skips, so anything it accepts is valid JSON.
type scanner struct {
	b []byte
	i int

	// known are token arrays of the previous line that a prompt array may
	// start with, and base their ids back to back (see ints); chained marks
	// a LineParser's scan. prompt and gen record this line's arrays, and
	// promptBuf the array the prompt's ids were built in.
	known       []tokenArray
	base        []int
	chained     bool
	prompt, gen tokenArray
	promptBuf   []int
}

func (s *scanner) fail(what string) error {
	return fmt.Errorf("%w: %s at offset %d", errSyntax, what, s.i)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return s.fail(fmt.Sprintf("expected %q", c))
	}
	s.i++
	return nil
}

// literal consumes one of null/true/false if it is next.
func (s *scanner) literal(word string) bool {
	if s.peek() == word[0] && bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		s.i += len(word)
		return true
	}
	return false
}

// skipString consumes a string and reports whether it had escapes.
func (s *scanner) skipString() (escaped bool, err error) {
	if s.peek() != '"' {
		return false, s.fail("expected string")
	}
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, nil
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				return escaped, s.fail("truncated escape")
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return escaped, s.fail("truncated \\u escape")
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !isHex(h) {
						return escaped, s.fail("bad \\u escape")
					}
				}
				s.i += 6
			default:
				return escaped, s.fail("bad escape")
			}
		case c < 0x20:
			return escaped, s.fail("control character in string")
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				return escaped, s.fail("invalid UTF-8")
			}
			s.i += size
		default:
			s.i++
		}
	}
	return escaped, s.fail("unterminated string")
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// str consumes a string and returns its value.
func (s *scanner) str() (string, error) {
	s.ws()
	start := s.i
	escaped, err := s.skipString()
	if err != nil {
		return "", err
	}
	if !escaped {
		return string(s.b[start+1 : s.i-1]), nil
	}
	var out string
	if err := json.Unmarshal(s.b[start:s.i], &out); err != nil {
		return "", fmt.Errorf("%w: %w", errSyntax, err)
	}
	return out, nil
}

// number consumes a JSON number and returns its text.
func (s *scanner) number() ([]byte, error) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return nil, s.fail("expected number")
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
	default:
		return nil, s.fail("expected number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		d := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			return nil, s.fail("expected digit after '.'")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		d := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			return nil, s.fail("expected exponent digits")
		}
	}
	return s.b[start:s.i], nil
}

const maxDepth = 10000

// skip consumes one value of any kind and returns its raw bytes.
func (s *scanner) skip() ([]byte, error) {
	s.ws()
	start := s.i
	if err := s.skipDepth(0); err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

func (s *scanner) skipDepth(depth int) error {
	if depth > maxDepth {
		return s.fail("nesting too deep")
	}
	switch c := s.peek(); {
	case c == '"':
		_, err := s.skipString()
		return err
	case c == '{':
		s.i++
		if s.peek() == '}' {
			s.i++
			return nil
		}
		for {
			if _, err := s.skipString(); err != nil {
				return err
			}
			if err := s.expect(':'); err != nil {
				return err
			}
			if err := s.skipDepth(depth + 1); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
				s.ws()
			case '}':
				s.i++
				return nil
			default:
				return s.fail("expected ',' or '}'")
			}
		}
	case c == '[':
		s.i++
		if s.peek() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.skipDepth(depth + 1); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return s.fail("expected ',' or ']'")
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		_, err := s.number()
		return err
	case s.literal("null"), s.literal("true"), s.literal("false"):
		return nil
	default:
		return s.fail("unexpected character")
	}
}

// tokenArray is one token array as a line carried it: the text between its
// brackets and the ids read from that text.
type tokenArray struct {
	text []byte
	ids  []int
}

// ints consumes an array of token ids. The fast path reads plain decimal
// integers in place; any other element goes through the lenient coercion.
//
// known lists arrays read earlier (the previous line's prompt and
// generation). When the array starts with the text of known[0], then of
// known[1] and so on, each piece followed by ',' or the closing ']', the ids
// of those pieces are taken instead of parsed: a piece is a complete list of
// valid elements, and reading the same bytes up to the same delimiter yields
// the same ids and leaves the scanner where parsing them would have, so the
// result and every error are exactly those of a full parse. A chained
// rollout's prompt repeats its parent's prompt and generation, so this turns
// the quadratic part of a file into memory comparisons.
//
// base, when not nil, holds the ids of all of known back to back and may be
// extended in place (nothing refers to its memory past its length): when
// every piece matched, the array's further ids are appended to it, so a
// chain of prompts shares one growing array instead of copying it per line.
// Otherwise the matched ids are copied into a new array with spare extra
// capacity.
//
// It returns the ids (with whatever capacity they were built in) and the
// text between the brackets.
func (s *scanner) ints(field string, known []tokenArray, base []int, spare int) ([]int, []byte, error) {
	if err := s.expect('['); err != nil {
		return nil, nil, err
	}
	open := s.i
	b := s.b
	reused, pieces := 0, 0
	closed := false
	for _, k := range known {
		end := s.i + len(k.text)
		if len(k.ids) == 0 || end >= len(b) || (b[end] != ',' && b[end] != ']') || !bytes.Equal(b[s.i:end], k.text) {
			break
		}
		reused += len(k.ids)
		pieces++
		s.i = end + 1
		if b[end] == ']' {
			closed = true
			break
		}
	}
	var out []int
	if base != nil && pieces > 0 && pieces == len(known) && len(base) == reused {
		out = base
	} else {
		if closed {
			out = make([]int, 0, reused+spare)
		} else {
			out = make([]int, 0, reused+s.estimateElems()+spare)
		}
		for _, k := range known[:pieces] {
			out = append(out, k.ids...)
		}
	}
	if closed {
		return out, b[open : s.i-1], nil
	}
	if pieces == 0 && s.peek() == ']' {
		s.i++
		return out, b[open : s.i-1], nil
	}
	for {
		// Fast path: optional '-', digits, directly followed by ',' or ']'.
		v, j, good := shortUint(b, s.i)
		if !good {
			v, j, good = longInt(b, s.i)
		}
		if good && j < len(b) && (b[j] == ',' || b[j] == ']') {
			out = append(out, v)
			if b[j] == ']' {
				s.i = j + 1
				return out, b[open:j], nil
			}
			// Compact arrays (what every writer of this format emits) go
			// straight to the next element without the general checks.
			s.i = j + 1
			if s.i < len(b) && b[s.i] != ' ' && b[s.i] != ']' {
				continue
			}
			s.i = j
		} else {
			raw, err := s.skip()
			if err != nil {
				return nil, nil, err
			}
			v, err := coerceIntRaw(raw)
			if err != nil {
				return nil, nil, fmt.Errorf("%s[%d]: %w", field, len(out), err)
			}
			out = append(out, v)
		}
		switch s.peek() {
		case ',':
			s.i++
			s.ws()
		case ']':
			s.i++
			return out, b[open : s.i-1], nil
		default:
			return nil, nil, s.fail("expected ',' or ']'")
		}
	}
}

// estimateElems guesses an array's length from the bytes ahead so the slice
// is allocated once; it never affects correctness.
func (s *scanner) estimateElems() int {
	end := bytes.IndexByte(s.b[s.i:], ']')
	if end < 0 {
		return 0
	}
	return bytes.Count(s.b[s.i:s.i+end], []byte{','}) + 1
}

// floats consumes an array of log-probs. null (what Python writes for NaN)
// is refused: such a record is unreadable.
func (s *scanner) floats(field string) ([]float64, error) {
	if err := s.expect('['); err != nil {
		return nil, err
	}
	out := make([]float64, 0, s.estimateElems())
	if s.peek() == ']' {
		s.i++
		return out, nil
	}
	for {
		var v float64
		if c := s.peek(); c == '-' || (c >= '0' && c <= '9') {
			num, err := s.number()
			if err != nil {
				return nil, err
			}
			v, err = strconv.ParseFloat(unsafe.String(&num[0], len(num)), 64)
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", field, len(out), err)
			}
		} else {
			raw, err := s.skip()
			if err != nil {
				return nil, err
			}
			v, err = coerceFloatRaw(raw)
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", field, len(out), err)
			}
		}
		out = append(out, v)
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return out, nil
		default:
			return nil, s.fail("expected ',' or ']'")
		}
	}
}

// coerceIntRaw applies Python's lenient integer reading to one raw JSON
// value: an integer, an integral float, or a string holding an integer.
func coerceIntRaw(raw []byte) (int, error) {
	switch {
	case len(raw) == 0:
		return 0, errors.New("empty value")
	case raw[0] == '"':
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return 0, fmt.Errorf("%w", err)
		}
		return coerceIntString(str)
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		return coerceIntNumber(string(raw))
	default:
		return 0, fmt.Errorf("%s is not an integer", truncate(raw))
	}
}

func coerceIntString(str string) (int, error) {
	t := strings.TrimSpace(str)
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("string %q is not an integer", str)
	}
	return int(n), nil
}

func coerceIntNumber(num string) (int, error) {
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		return int(n), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsInf(f, 0) || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, fmt.Errorf("%s is not an integer", num)
	}
	return int(f), nil
}

func coerceFloatRaw(raw []byte) (float64, error) {
	if len(raw) > 0 && raw[0] == '"' {
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return 0, fmt.Errorf("%w", err)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(str), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("string %q is not a finite number", str)
		}
		return f, nil
	}
	if bytes.Equal(raw, []byte("null")) {
		return 0, errors.New("null log-prob (a non-finite value was written)")
	}
	return 0, fmt.Errorf("%s is not a number", truncate(raw))
}

func truncate(raw []byte) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}

// unmarshalUseNumber decodes raw into v keeping numbers as json.Number and
// refusing trailing data.
func unmarshalUseNumber(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after JSON value")
	}
	// Decode stops after the first value; anything but spaces left over
	// means the text was not one JSON value.
	rest := raw[dec.InputOffset():]
	if len(bytes.TrimSpace(rest)) != 0 {
		return errors.New("trailing data after JSON value")
	}
	return nil
}

// appendIntTree copies a value made only of (nested) arrays of plain
// integers in canonical form, reporting false for anything else so the caller
// falls back to the generic path.
func appendIntTree(dst []byte, raw []byte) ([]byte, bool) {
	const (
		afterOpen  = iota // a value or ']'
		afterValue        // ',' or ']'
		afterComma        // a value
	)
	if len(raw) == 0 || raw[0] != '[' {
		return dst, false
	}
	start := len(dst)
	depth := 0
	state := afterComma
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		case c == '[':
			if state == afterValue {
				return dst[:start], false
			}
			depth++
			dst = append(dst, c)
			state = afterOpen
		case c == ']':
			if state == afterComma {
				return dst[:start], false
			}
			depth--
			dst = append(dst, c)
			state = afterValue
			if depth == 0 {
				for _, t := range raw[i+1:] {
					if t != ' ' && t != '\t' && t != '\n' && t != '\r' {
						return dst[:start], false
					}
				}
				return dst, true
			}
		case c == ',':
			if state != afterValue {
				return dst[:start], false
			}
			dst = append(dst, c)
			state = afterComma
		case c == '-' || (c >= '0' && c <= '9'):
			if state == afterValue {
				return dst[:start], false
			}
			j := i
			if raw[j] == '-' {
				j++
			}
			k := j
			for k < len(raw) && raw[k] >= '0' && raw[k] <= '9' {
				k++
			}
			if k == j || k-j > 18 || (raw[j] == '0' && k-j > 1) {
				return dst[:start], false
			}
			if raw[i] == '-' && k-j == 1 && raw[j] == '0' {
				dst = append(dst, '0') // Python reads -0 as the int 0
			} else {
				dst = append(dst, raw[i:k]...)
			}
			i = k - 1
			state = afterValue
		default:
			return dst[:start], false
		}
	}
	return dst[:start], false
}
