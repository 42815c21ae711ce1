package lineage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/capbench/capbench/internal/pyfmt"
)

var errPyJSON = errors.New("not a JSON text Python's json.loads accepts")

// parsePythonJSON decodes s as Python's json.loads does for the shapes that
// matter here: standard JSON plus the NaN, Infinity and -Infinity literals,
// integers kept exact as json.Number, surrounding whitespace allowed.
func parsePythonJSON(s string) (any, error) {
	p := &pyParser{b: []byte(s)}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, fmt.Errorf("%w: trailing data at %d", errPyJSON, p.i)
	}
	return v, nil
}

type pyParser struct {
	b []byte
	i int
}

func (p *pyParser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *pyParser) lit(w string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(w)) {
		p.i += len(w)
		return true
	}
	return false
}

func (p *pyParser) value(depth int) (any, error) {
	if depth > 10000 {
		return nil, fmt.Errorf("%w: nesting too deep", errPyJSON)
	}
	p.ws()
	if p.i >= len(p.b) {
		return nil, fmt.Errorf("%w: unexpected end", errPyJSON)
	}
	switch c := p.b[p.i]; {
	case c == '{':
		p.i++
		m := map[string]any{}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return m, nil
		}
		for {
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return nil, fmt.Errorf("%w: expected key at %d", errPyJSON, p.i)
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, fmt.Errorf("%w: expected ':' at %d", errPyJSON, p.i)
			}
			p.i++
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m[k] = v
			p.ws()
			if p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == '}' {
				p.i++
				return m, nil
			}
			return nil, fmt.Errorf("%w: expected ',' or '}' at %d", errPyJSON, p.i)
		}
	case c == '[':
		p.i++
		arr := []any{}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return arr, nil
		}
		for {
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
			p.ws()
			if p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == ']' {
				p.i++
				return arr, nil
			}
			return nil, fmt.Errorf("%w: expected ',' or ']' at %d", errPyJSON, p.i)
		}
	case c == '"':
		return p.str()
	case p.lit("null"):
		return nil, nil
	case p.lit("true"):
		return true, nil
	case p.lit("false"):
		return false, nil
	case p.lit("NaN"):
		return math.NaN(), nil
	case p.lit("Infinity"):
		return math.Inf(1), nil
	case p.lit("-Infinity"):
		return math.Inf(-1), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, fmt.Errorf("%w: unexpected %q at %d", errPyJSON, c, p.i)
	}
}

func (p *pyParser) number() (any, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		d := p.i
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
		}
		return p.i - d
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return nil, fmt.Errorf("%w: bad number at %d", errPyJSON, start)
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, fmt.Errorf("%w: bad number at %d", errPyJSON, start)
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, fmt.Errorf("%w: bad number at %d", errPyJSON, start)
		}
	}
	return json.Number(p.b[start:p.i]), nil
}

// str decodes a string literal. Python's strict mode refuses raw control
// characters, as Go does; escapes decode to the same text except that a lone
// surrogate becomes U+FFFD (Go strings cannot hold it).
func (p *pyParser) str() (string, error) {
	start := p.i
	p.i++
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '\\':
			p.i += 2
		case c == '"':
			p.i++
			var s string
			if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
				return "", fmt.Errorf("%w: %w", errPyJSON, err)
			}
			return s, nil
		case c < 0x20:
			return "", fmt.Errorf("%w: control character in string at %d", errPyJSON, p.i)
		default:
			p.i++
		}
	}
	return "", fmt.Errorf("%w: unterminated string", errPyJSON)
}

// PythonDumps encodes a decoded JSON value (maps, slices, json.Number,
// float64, strings, bools, nil) as Python's json.dumps(v, sort_keys=True)
// with the default separators (", " and ": ") and ensure_ascii escaping.
func PythonDumps(v any) (string, error) {
	var buf []byte
	buf, err := appendPython(buf, v)
	if err != nil {
		return "", err
	}
	return string(buf), nil
}

func appendPython(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if x {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		return appendPythonString(dst, x), nil
	case json.Number:
		s := string(x)
		if !bytes.ContainsAny([]byte(s), ".eE") {
			// A Python int prints its exact decimal value; normalise "-0".
			if s == "-0" {
				s = "0"
			}
			return append(dst, s...), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return dst, fmt.Errorf("bad number %q: %w", s, err)
		}
		return append(dst, pyfmt.JSONFloat(f)...), nil
	case float64:
		return append(dst, pyfmt.JSONFloat(x)...), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			var err error
			if dst, err = appendPython(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		// Python sorts str keys by code point; UTF-8 byte order agrees.
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = appendPythonString(dst, k)
			dst = append(dst, ": "...)
			var err error
			if dst, err = appendPython(dst, x[k]); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	default:
		// json.dumps(default=str) stringifies unknown types.
		return appendPythonString(dst, fmt.Sprint(x)), nil
	}
}

const lowerHex = "0123456789abcdef"

// appendPythonString writes s with ensure_ascii: ", \ and \n \r \t \b \f get
// short escapes; every other byte outside ' '..'~' becomes \uXXXX (lowercase
// hex, surrogate pairs above U+FFFF).
func appendPythonString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			if e, ok := shortEscape(c); ok {
				dst = append(dst, '\\', e)
			} else if c < 0x20 || c == 0x7f {
				dst = appendU4(dst, rune(c))
			} else {
				dst = append(dst, c)
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r > 0xFFFF {
			hi, lo := utf16.EncodeRune(r)
			dst = appendU4(dst, hi)
			dst = appendU4(dst, lo)
			continue
		}
		dst = appendU4(dst, r)
	}
	return append(dst, '"')
}

func appendU4(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', lowerHex[r>>12&0xF], lowerHex[r>>8&0xF], lowerHex[r>>4&0xF], lowerHex[r&0xF])
}

// PythonDumpsInOrder re-encodes one JSON text the way a Python server that
// does json.dumps(json.loads(raw), ensure_ascii=False) would: keys in the
// order written (dicts keep insertion order), ", " and ": " separators,
// integers exact, other numbers as Python floats, non-ASCII kept raw. It is
// how the proxy turns an echoed tool_use input into Chat arguments: vLLM's
// hermes parser wrote the generated arguments the same way, so the echoed
// call renders into the prompt as the tokens the model generated.
func PythonDumpsInOrder(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	out, err := appendPythonTokens(make([]byte, 0, len(raw)+len(raw)/8), dec, 0)
	if err != nil {
		return "", err
	}
	if _, err := dec.Token(); err == nil {
		return "", fmt.Errorf("%w: trailing data", errPyJSON)
	}
	return string(out), nil
}

// appendPythonTokens writes the next JSON value of dec.
func appendPythonTokens(dst []byte, dec *json.Decoder, depth int) ([]byte, error) {
	if depth > 10000 {
		return dst, fmt.Errorf("%w: nesting too deep", errPyJSON)
	}
	tok, err := dec.Token()
	if err != nil {
		return dst, fmt.Errorf("%w: %w", errPyJSON, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		obj := t == '{'
		if obj {
			dst = append(dst, '{')
		} else {
			dst = append(dst, '[')
		}
		for i := 0; dec.More(); i++ {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			if obj {
				k, err := dec.Token()
				if err != nil {
					return dst, fmt.Errorf("%w: %w", errPyJSON, err)
				}
				ks, _ := k.(string)
				dst = appendPythonStringRaw(dst, ks)
				dst = append(dst, ": "...)
			}
			if dst, err = appendPythonTokens(dst, dec, depth+1); err != nil {
				return dst, err
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return dst, fmt.Errorf("%w: %w", errPyJSON, err)
		}
		if obj {
			return append(dst, '}'), nil
		}
		return append(dst, ']'), nil
	case string:
		return appendPythonStringRaw(dst, t), nil
	default:
		return appendPython(dst, t)
	}
}

// appendPythonStringRaw writes s as json.dumps(s, ensure_ascii=False): ", \
// and the C0 controls are escaped, everything else is kept.
func appendPythonStringRaw(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if e, ok := shortEscape(c); ok {
			dst = append(dst, '\\', e)
		} else if c < 0x20 {
			dst = appendU4(dst, rune(c))
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// shortEscape is the letter of json.dumps's two-character escape of c, if
// it has one.
func shortEscape(c byte) (byte, bool) {
	switch c {
	case '"', '\\':
		return c, true
	case '\n':
		return 'n', true
	case '\r':
		return 'r', true
	case '\t':
		return 't', true
	case '\b':
		return 'b', true
	case '\f':
		return 'f', true
	}
	return 0, false
}
