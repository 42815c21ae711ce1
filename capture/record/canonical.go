package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"
)

// ErrNotCanonical reports a value the canonical encoder cannot represent: an
// integer outside 64 bits, invalid UTF-8, malformed JSON or a Go type that is
// not a decoded JSON value.
var ErrNotCanonical = errors.New("value has no canonical JSON form")

// Canonical returns the canonical JSON encoding (docs/store.md#canonical-json:
// orjson with sorted keys) of a decoded JSON value: map[string]any, []any, []Item,
// json.Number, float64, int kinds, string, bool, nil and json.RawMessage.
// Other Go values are encoded through their encoding/json form first.
// Non-finite floats are written as null, as orjson does.
func Canonical(v any) ([]byte, error) {
	return appendCanonical(make([]byte, 0, 64), v)
}

func appendCanonical(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if x {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		return appendString(dst, x)
	case json.Number:
		return appendNumber(dst, string(x))
	case float64:
		return appendFloat(dst, x), nil
	case float32:
		return appendFloat(dst, float64(x)), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case uint64:
		return strconv.AppendUint(dst, x, 10), nil
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case json.RawMessage:
		return appendRaw(dst, x)
	case map[string]any:
		return appendObject(dst, x)
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendCanonical(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case []Item:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendObject(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case []int:
		return appendInts(dst, x), nil
	case []float64:
		dst = append(dst, '[')
		for i, f := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendFloat(dst, f)
		}
		return append(dst, ']'), nil
	case []string:
		dst = append(dst, '[')
		for i, s := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendString(dst, s); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]json.RawMessage:
		return appendSortedObject(dst, x, appendRaw)
	default:
		// Any other Go value (a typed struct, a []map[string]any ...) goes
		// through its encoding/json form, then canonicalised like raw JSON.
		raw, err := json.Marshal(v)
		if err != nil {
			return dst, fmt.Errorf("%w: Go type %T: %w", ErrNotCanonical, v, err)
		}
		return appendRaw(dst, raw)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Go string comparison is byte order, which for valid UTF-8 equals code
	// point order: the order orjson's OPT_SORT_KEYS produces.
	slices.Sort(keys)
	return keys
}

func appendObject(dst []byte, m map[string]any) ([]byte, error) {
	return appendSortedObject(dst, m, appendCanonical)
}

// appendSortedObject writes m with its keys in canonical order, each value
// through appendValue.
func appendSortedObject[V any](dst []byte, m map[string]V, appendValue func([]byte, V) ([]byte, error)) ([]byte, error) {
	dst = append(dst, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = appendString(dst, k); err != nil {
			return dst, err
		}
		dst = append(dst, ':')
		if dst, err = appendValue(dst, m[k]); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

func appendInts(dst []byte, ids []int) []byte {
	dst = slices.Grow(dst, 2+7*len(ids)) // a six-digit id and its comma
	dst = append(dst, '[')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		if uint(id) >= 1e9 { // negative or wide: strconv's general path
			dst = strconv.AppendInt(dst, int64(id), 10)
			continue
		}
		// Token ids are small non-negative numbers: their digits are
		// written in place, two at a time.
		dst = appendSmallInt(dst, uint32(id))
	}
	return append(dst, ']')
}

// maxSmallDigits is the width appendSmallInt handles: ids below 1e9.
const maxSmallDigits = 9

const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"

// appendSmallInt appends v (< 1e9) in decimal.
func appendSmallInt(dst []byte, v uint32) []byte {
	n := 1
	for p := uint32(10); p <= v && n < maxSmallDigits; p *= 10 {
		n++
	}
	if cap(dst)-len(dst) < n {
		dst = slices.Grow(dst, n)
	}
	end := len(dst) + n
	dst = dst[:end]
	out := dst[end-n : end]
	j := n
	for v >= 100 {
		q := v / 100
		r := (v - q*100) * 2
		j -= 2
		out[j], out[j+1] = digitPairs[r], digitPairs[r+1]
		v = q
	}
	if v >= 10 {
		out[0], out[1] = digitPairs[v*2], digitPairs[v*2+1]
	} else {
		out[0] = byte('0' + v)
	}
	return dst
}

// appendRaw re-encodes raw JSON text canonically. Arrays of plain integers
// (the common shape of routed_experts) take a fast path that avoids building
// a generic tree.
func appendRaw(dst []byte, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return append(dst, "null"...), nil
	}
	if out, ok := appendIntTree(dst, raw); ok {
		return out, nil
	}
	v, err := decodeAny(raw)
	if err != nil {
		return dst, fmt.Errorf("%w: %w", ErrNotCanonical, err)
	}
	return appendCanonical(dst, v)
}

// decodeAny decodes one JSON text keeping numbers as json.Number.
func decodeAny(raw []byte) (any, error) {
	var v any
	if err := unmarshalUseNumber(raw, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// appendNumber writes a JSON number the way Python would after json.loads:
// a literal without fraction or exponent is an int (64-bit limit), anything
// else a float.
func appendNumber(dst []byte, s string) ([]byte, error) {
	isFloat := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.', 'e', 'E':
			isFloat = true
		}
	}
	if !isFloat {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return strconv.AppendInt(dst, n, 10), nil
		}
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			return strconv.AppendUint(dst, n, 10), nil
		}
		if _, ok := new(big.Int).SetString(s, 10); ok {
			return dst, fmt.Errorf("%w: integer %s exceeds 64 bits", ErrNotCanonical, s)
		}
		return dst, fmt.Errorf("%w: malformed number %q", ErrNotCanonical, s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		var numErr *strconv.NumError
		if errors.As(err, &numErr) && errors.Is(numErr.Err, strconv.ErrRange) {
			// Python turns an out-of-range literal into ±inf (or 0.0) and
			// orjson then writes null; ParseFloat already returned that value.
			return appendFloat(dst, f), nil
		}
		return dst, fmt.Errorf("%w: malformed number %q", ErrNotCanonical, s)
	}
	return appendFloat(dst, f), nil
}

// appendFloat formats f as orjson 3.8 does: shortest round-trip digits, plain
// decimal for 1e-5 <= |f| < 1e16 (".0" when integral), otherwise exponent form
// without "+" or leading zeros. NaN and ±Inf become null.
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	if f == 0 {
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	var buf [32]byte
	// 'e' with precision -1 gives the shortest round-trip digits as
	// d[.ddd]e±XX.
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	neg := false
	if e[0] == '-' {
		neg = true
		e = e[1:]
	}
	ePos := 0
	for ePos < len(e) && e[ePos] != 'e' {
		ePos++
	}
	mant := e[:ePos]
	exp, _ := strconv.Atoi(string(e[ePos+1:]))
	var digits [24]byte
	nd := 0
	for _, c := range mant {
		if c != '.' {
			digits[nd] = c
			nd++
		}
	}
	ds := digits[:nd]
	if neg {
		dst = append(dst, '-')
	}
	abs := math.Abs(f)
	if abs >= 1e-5 && abs < 1e16 {
		// Decimal point sits after digit index exp (0-based: exp+1 digits
		// before the point).
		if exp >= 0 {
			intDigits := exp + 1
			if intDigits >= nd {
				dst = append(dst, ds...)
				for i := nd; i < intDigits; i++ {
					dst = append(dst, '0')
				}
				return append(dst, ".0"...)
			}
			dst = append(dst, ds[:intDigits]...)
			dst = append(dst, '.')
			return append(dst, ds[intDigits:]...)
		}
		dst = append(dst, "0."...)
		for i := 0; i < -exp-1; i++ {
			dst = append(dst, '0')
		}
		return append(dst, ds...)
	}
	dst = append(dst, ds[0])
	if nd > 1 {
		dst = append(dst, '.')
		dst = append(dst, ds[1:]...)
	}
	dst = append(dst, 'e')
	return strconv.AppendInt(dst, int64(exp), 10)
}

const hexDigits = "0123456789abcdef"

// appendString writes s as orjson does: raw UTF-8; '"' and '\\' escaped;
// control characters below 0x20 as \b \f \n \r \t or \u00xx; everything else
// (including '/', 0x7F, U+2028, U+2029) raw. Invalid UTF-8 is an error since
// no Python str could hold it.
func appendString(dst []byte, s string) ([]byte, error) {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return dst, fmt.Errorf("%w: invalid UTF-8 in string", ErrNotCanonical)
			}
			i += size
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), nil
}
