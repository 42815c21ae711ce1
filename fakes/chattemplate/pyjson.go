package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/capbench/capbench/internal/pyfmt"
)

// toJSON renders v the way the Hugging Face chat-template filter `tojson`
// does (Python json.dumps with ensure_ascii=False and ", " / ": "
// separators). Go maps have no order, so their keys come out sorted; a
// json.RawMessage anywhere inside v keeps its own key order.
func toJSON(v any) (string, error) {
	var b strings.Builder
	if err := writePyValue(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

// writePyValue writes a decoded JSON value directly; other Go types go
// through encoding/json first.
func writePyValue(b *strings.Builder, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case string:
		writePyString(b, x)
	case float64:
		// A JSON number decoded into float64 has lost whether it was written
		// as an integer; integral values print as Python ints, which is what
		// JSON schemas and arguments almost always hold.
		if x == math.Trunc(x) && math.Abs(x) < 1e21 {
			b.WriteString(strconv.FormatFloat(x, 'f', -1, 64))
		} else {
			b.WriteString(pyfmt.JSONFloat(x))
		}
	case json.Number:
		s, err := pyNumber(string(x))
		if err != nil {
			return err
		}
		b.WriteString(s)
	case json.RawMessage:
		return writePyRaw(b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := writePyValue(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writePyString(b, k)
			b.WriteString(": ")
			if err := writePyValue(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode value as JSON: %w", err)
		}
		return writePyRaw(b, raw)
	}
	return nil
}

// errNotObject marks JSON text that is valid but is not an object.
var errNotObject = errors.New("JSON value is not an object")

// pythonDumpsObject re-serializes raw JSON text that must hold one object,
// preserving key order, as Python's json.loads followed by json.dumps would.
func pythonDumpsObject(raw []byte) (string, error) {
	var b strings.Builder
	b.Grow(len(raw) + len(raw)/8)
	if err := writePyRaw(&b, raw); err != nil {
		return "", err
	}
	out := b.String()
	if out[0] != '{' {
		return "", errNotObject
	}
	return out, nil
}

// writePyRaw validates one JSON text and writes it in json.dumps style,
// keeping key order.
func writePyRaw(b *strings.Builder, raw []byte) error {
	sc := rawScanner{src: raw, out: b}
	sc.skipSpace()
	if err := sc.value(0); err != nil {
		return err
	}
	sc.skipSpace()
	if sc.pos != len(sc.src) {
		return fmt.Errorf("invalid JSON: extra data at offset %d", sc.pos)
	}
	return nil
}

// maxJSONDepth bounds nesting so hostile input cannot exhaust the stack.
const maxJSONDepth = 10000

// rawScanner is a single-pass JSON validator and Python-style re-writer.
type rawScanner struct {
	src []byte
	pos int
	out *strings.Builder
}

func (s *rawScanner) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *rawScanner) skipSpace() {
	for s.pos < len(s.src) {
		switch s.src[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *rawScanner) value(depth int) error {
	if depth > maxJSONDepth {
		return s.errorf("nesting deeper than %d", maxJSONDepth)
	}
	if s.pos >= len(s.src) {
		return s.errorf("unexpected end of input")
	}
	switch c := s.src[s.pos]; {
	case c == '{':
		return s.container(depth, '}', true)
	case c == '[':
		return s.container(depth, ']', false)
	case c == '"':
		str, err := s.str()
		if err != nil {
			return err
		}
		writePyString(s.out, str)
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if bytes.HasPrefix(s.src[s.pos:], []byte(lit)) {
				s.pos += len(lit)
				s.out.WriteString(lit)
				return nil
			}
		}
		return s.errorf("unexpected character %q", c)
	}
}

func (s *rawScanner) container(depth int, closer byte, object bool) error {
	s.out.WriteByte(s.src[s.pos])
	s.pos++
	s.skipSpace()
	if s.pos < len(s.src) && s.src[s.pos] == closer {
		s.pos++
		s.out.WriteByte(closer)
		return nil
	}
	for {
		if object {
			if s.pos >= len(s.src) || s.src[s.pos] != '"' {
				return s.errorf("expected object key")
			}
			key, err := s.str()
			if err != nil {
				return err
			}
			writePyString(s.out, key)
			s.skipSpace()
			if s.pos >= len(s.src) || s.src[s.pos] != ':' {
				return s.errorf("expected ':'")
			}
			s.pos++
			s.skipSpace()
			s.out.WriteString(": ")
		}
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.skipSpace()
		if s.pos >= len(s.src) {
			return s.errorf("unexpected end of input")
		}
		switch s.src[s.pos] {
		case ',':
			s.pos++
			s.skipSpace()
			s.out.WriteString(", ")
		case closer:
			s.pos++
			s.out.WriteByte(closer)
			return nil
		default:
			return s.errorf("expected ',' or %q", closer)
		}
	}
}

// str decodes a JSON string at s.pos (which holds the opening quote).
func (s *rawScanner) str() (string, error) {
	s.pos++
	start := s.pos
	// Fast path: no escapes.
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		if c == '"' {
			str := string(s.src[start:s.pos])
			s.pos++
			return str, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", s.errorf("control character in string")
		}
		s.pos++
	}
	var b strings.Builder
	b.Write(s.src[start:s.pos])
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		switch {
		case c == '"':
			s.pos++
			return b.String(), nil
		case c < 0x20:
			return "", s.errorf("control character in string")
		case c != '\\':
			b.WriteByte(c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.src) {
			break
		}
		e := s.src[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", s.errorf("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A valid pair joins; a lone surrogate becomes U+FFFD, as Go's
				// decoder does (Python would keep it and fail later).
				save := s.pos
				if s.pos+1 < len(s.src) && s.src[s.pos] == '\\' && s.src[s.pos+1] == 'u' {
					s.pos += 2
					if r2, ok := s.hex4(); ok {
						if j := utf16.DecodeRune(r, r2); j != utf8.RuneError {
							b.WriteRune(j)
							continue
						}
					}
				}
				s.pos = save
				r = utf8.RuneError
			}
			b.WriteRune(r)
		default:
			return "", s.errorf("bad escape %q", e)
		}
	}
	return "", s.errorf("unterminated string")
}

func (s *rawScanner) hex4() (rune, bool) {
	if s.pos+4 > len(s.src) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.src[s.pos:s.pos+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.pos += 4
	return rune(v), true
}

// number validates a JSON number and writes it as Python would print it.
func (s *rawScanner) number() error {
	start := s.pos
	digits := func() int {
		n := 0
		for s.pos < len(s.src) && s.src[s.pos] >= '0' && s.src[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	if s.src[s.pos] == '-' {
		s.pos++
	}
	intStart := s.pos
	if n := digits(); n == 0 || (n > 1 && s.src[intStart] == '0') {
		return s.errorf("bad number")
	}
	if s.pos < len(s.src) && s.src[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			return s.errorf("bad number")
		}
	}
	if s.pos < len(s.src) && (s.src[s.pos] == 'e' || s.src[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.src) && (s.src[s.pos] == '+' || s.src[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return s.errorf("bad number")
		}
	}
	out, err := pyNumber(string(s.src[start:s.pos]))
	if err != nil {
		return err
	}
	s.out.WriteString(out)
	return nil
}

// writePyString writes s as json.dumps(..., ensure_ascii=False) would.
func writePyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			if c < utf8.RuneSelf {
				b.WriteByte(c)
				i++
				continue
			}
			_, size := utf8.DecodeRuneInString(s[i:])
			b.WriteString(s[i : i+size])
			i += size
			continue
		}
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			fmt.Fprintf(b, `\u%04x`, c)
		}
		i++
	}
	b.WriteByte('"')
}

// pyNumber formats a JSON number as Python would after json.loads: integers
// keep their digits, other numbers become a float printed with repr().
func pyNumber(s string) (string, error) {
	if !strings.ContainsAny(s, ".eE") {
		if strings.TrimLeft(s, "-0") == "" {
			return "0", nil
		}
		return s, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return "", fmt.Errorf("invalid JSON number %q: %w", s, err)
	}
	return pyfmt.JSONFloat(f), nil
}
