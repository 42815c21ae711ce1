package vllm

import (
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/capbench/capbench/internal/pyfmt"
)

// Hand-written JSON appenders for the hot path: responses are built into a
// pooled byte slice in vLLM's field order, without reflection.

const hexDigits = "0123456789abcdef"

// appendJSONString writes s as a JSON string the way Python's json.dumps
// with ensure_ascii=False does: non-ASCII stays raw, control characters are
// escaped. Invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"':
				b = append(b, '\\', '"')
			case '\\':
				b = append(b, '\\', '\\')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendPyFloat formats like Python's repr(float): always a '.' or exponent.
func appendPyFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(b, "-9999.0"...)
	}
	return pyfmt.AppendFloat(b, f)
}

func appendInts(b []byte, ids []int) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, ']')
}

func appendBytesArray(b []byte, s string) []byte {
	b = append(b, '[')
	for i := 0; i < len(s); i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(s[i]), 10)
	}
	return append(b, ']')
}

func appendNullableString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendJSONString(b, *s)
}
