package consumer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// jsonEncoder writes the bytes encoding/json writes with HTML escaping off,
// for the shapes a rebuilt response has (maps, slices, token and log-prob
// arrays, strings, numbers), and hands every other value to encoding/json.
//
// Why it exists: a rebuilt 200-call rollout repeats its running prompt in
// every carrier item (21 MB of digits for 32k-token prompts), and the
// projection makes every prompt a prefix of one shared array. Token arrays
// that share a backing array are formatted once: the text of a shorter
// prefix is a prefix of the longer one's text, so each later item is a copy.
//
// With a writer set, the buffer is written out whenever it passes
// flushBytes, so a large line never sits whole in memory.
type jsonEncoder struct {
	// pythonFloats writes floats as Python's json.dumps does (1.0,
	// -3.2e-05) instead of as encoding/json does.
	pythonFloats bool
	w            io.Writer
	buf          []byte
	err          error
	ints         map[*int]*intText
	fallb        bytes.Buffer
}

// intText is the comma-separated text of the longest prefix of one backing
// array formatted so far; ends[i] is the text's length after element i.
type intText struct {
	text []byte
	ends []int
}

const flushBytes = 256 << 10

func newJSONEncoder(w io.Writer) *jsonEncoder {
	return &jsonEncoder{w: w, ints: map[*int]*intText{}}
}

// flush writes the buffer out (when there is a writer).
func (e *jsonEncoder) flush() {
	if e.w == nil || e.err != nil || len(e.buf) == 0 {
		return
	}
	_, e.err = e.w.Write(e.buf)
	e.buf = e.buf[:0]
}

func (e *jsonEncoder) maybeFlush() {
	if len(e.buf) >= flushBytes {
		e.flush()
	}
}

func (e *jsonEncoder) raw(s string) { e.buf = append(e.buf, s...) }

// encodeArray appends xs as a JSON array (null when nil, as encoding/json
// writes a nil slice), each element by enc.
func encodeArray[T any](e *jsonEncoder, xs []T, enc func(T) error) error {
	if xs == nil {
		e.raw("null")
		return nil
	}
	e.buf = append(e.buf, '[')
	for i, x := range xs {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		if err := enc(x); err != nil {
			return err
		}
		e.maybeFlush()
	}
	e.buf = append(e.buf, ']')
	return nil
}

// value appends v's encoding.
func (e *jsonEncoder) value(v any) error {
	if e.err != nil {
		return e.err
	}
	switch x := v.(type) {
	case nil:
		e.raw("null")
	case bool:
		e.buf = strconv.AppendBool(e.buf, x)
	case string:
		return e.str(x)
	case int:
		e.buf = strconv.AppendInt(e.buf, int64(x), 10)
	case int64:
		e.buf = strconv.AppendInt(e.buf, x, 10)
	case float64:
		return e.float(x)
	case []int:
		if x == nil {
			e.raw("null")
			return nil
		}
		e.intArray(x)
	case []float64:
		return encodeArray(e, x, e.float)
	case []any:
		return encodeArray(e, x, e.value)
	case []map[string]any:
		return encodeArray(e, x, e.object)
	case map[string]any:
		return e.object(x)
	default:
		return e.fallback(v)
	}
	return e.err
}

// object writes a map with its keys sorted, as encoding/json does.
func (e *jsonEncoder) object(m map[string]any) error {
	if m == nil {
		e.raw("null")
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.buf = append(e.buf, '{')
	for i, k := range keys {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		if err := e.str(k); err != nil {
			return err
		}
		e.buf = append(e.buf, ':')
		if err := e.value(m[k]); err != nil {
			return err
		}
	}
	e.buf = append(e.buf, '}')
	return nil
}

// intArray writes ids, reusing the text of any earlier array that shares its
// backing array (an equal prefix in memory is an equal prefix in text).
func (e *jsonEncoder) intArray(ids []int) {
	e.buf = append(e.buf, '[')
	if len(ids) == 0 {
		e.buf = append(e.buf, ']')
		return
	}
	t := e.ints[&ids[0]]
	if t == nil {
		t = &intText{}
		e.ints[&ids[0]] = t
	}
	for i := len(t.ends); i < len(ids); i++ {
		if i > 0 {
			t.text = append(t.text, ',')
		}
		t.text = strconv.AppendInt(t.text, int64(ids[i]), 10)
		t.ends = append(t.ends, len(t.text))
	}
	text := t.text[:t.ends[len(ids)-1]]
	// Copy through the writer in pieces, so a long prefix never makes the
	// buffer as large as the line.
	for len(text) > 0 {
		n := min(len(text), flushBytes)
		e.buf = append(e.buf, text[:n]...)
		text = text[n:]
		e.maybeFlush()
	}
	e.buf = append(e.buf, ']')
}

// float formats as encoding/json does for float64, or as Python does.
func (e *jsonEncoder) float(f float64) error {
	if e.pythonFloats {
		var err error
		e.buf, err = appendPyFloat(e.buf, f)
		return err
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, 64))
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(e.buf)
	e.buf = strconv.AppendFloat(e.buf, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9, as encoding/json writes it.
		b := e.buf[start:]
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			e.buf = e.buf[:len(e.buf)-1]
		}
	}
	return nil
}

// str writes plain printable ASCII directly and leaves every string that
// needs escaping (or is not ASCII) to encoding/json.
func (e *jsonEncoder) str(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return e.fallback(s)
		}
	}
	e.buf = append(e.buf, '"')
	e.buf = append(e.buf, s...)
	e.buf = append(e.buf, '"')
	return nil
}

func (e *jsonEncoder) fallback(v any) error {
	e.fallb.Reset()
	enc := json.NewEncoder(&e.fallb)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	e.buf = append(e.buf, bytes.TrimRight(e.fallb.Bytes(), "\n")...)
	return nil
}
