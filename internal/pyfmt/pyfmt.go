// Package pyfmt writes numbers and strings the way Python prints them, for
// the texts that must match byte for byte what vLLM or NeMo Gym produce
// (error messages, persisted error values, json.dumps output). Both the fake
// vLLM and the capture side use it, so it imports nothing of either.
package pyfmt

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// AppendFloat appends Python's repr(f): the shortest round-trip digits,
// positional with a ".0" when integral for decimal exponents -4 to 15,
// exponent form ("1e-05", "1.5e+16") outside; "nan", "inf" and "-inf".
func AppendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "nan"...)
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	}
	if abs := math.Abs(f); abs != 0 && (abs < 1e-4 || abs >= 1e15) && exponentForm(f) {
		return strconv.AppendFloat(b, f, 'e', -1, 64)
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'f', -1, 64)
	if !strings.ContainsRune(string(b[start:]), '.') {
		b = append(b, '.', '0')
	}
	return b
}

// exponentForm reports whether the shortest digits of f have a decimal
// exponent outside [-4, 16), where Python's repr switches to exponent form.
// Only called near those bounds, where the float comparison alone could be
// off by the rounding of the shortest digits.
func exponentForm(f float64) bool {
	e := strconv.FormatFloat(f, 'e', -1, 64)
	_, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	return exp < -4 || exp >= 16
}

// Float is Python's repr(f).
func Float(f float64) string { return string(AppendFloat(nil, f)) }

// JSONFloat is how Python's json.dumps writes f: repr for finite values,
// NaN, Infinity and -Infinity otherwise.
func JSONFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return Float(f)
}

// Str is Python's repr(s): single quotes unless s holds a single quote and no
// double quote; backslash, the quote, \n, \r and \t escaped; other control
// characters and DEL as \xNN.
func Str(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(quote):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(quote)
	return b.String()
}

// Thousands formats n with comma separators, as Python's f"{n:,}" does.
func Thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
