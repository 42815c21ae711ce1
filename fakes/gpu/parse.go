package gpu

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// ErrBadValue is wrapped by the Parse* functions on malformed input.
var ErrBadValue = errors.New("bad value")

var byteSizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)$`)

// byteUnits maps a unit to its multiplier. Following vLLM's human-readable
// convention, a bare lowercase letter is decimal and a bare uppercase letter
// binary ("24g" = 24e9, "24G" = 24 GiB); "GB" is decimal and "GiB" binary
// in any case.
func byteUnit(u string) (*big.Rat, bool) {
	dec := func(p int64) *big.Rat {
		return new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(p), nil))
	}
	bin := func(p uint) *big.Rat { return new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), p)) }
	switch u {
	case "", "b", "B":
		return big.NewRat(1, 1), true
	case "k":
		return dec(3), true
	case "m":
		return dec(6), true
	case "g":
		return dec(9), true
	case "t":
		return dec(12), true
	case "K":
		return bin(10), true
	case "M":
		return bin(20), true
	case "G":
		return bin(30), true
	case "T":
		return bin(40), true
	}
	switch strings.ToLower(u) {
	case "kb":
		return dec(3), true
	case "mb":
		return dec(6), true
	case "gb":
		return dec(9), true
	case "tb":
		return dec(12), true
	case "kib", "ki":
		return bin(10), true
	case "mib", "mi":
		return bin(20), true
	case "gib", "gi":
		return bin(30), true
	case "tib", "ti":
		return bin(40), true
	}
	return nil, false
}

// ParseBytes parses a memory size such as "48GiB", "80GB", "24G", "44.52GiB"
// or "1073741824". Fractions are allowed and the result is truncated to whole
// bytes; negative, empty, unknown-unit and overflowing inputs are errors.
func ParseBytes(s string) (int64, error) {
	in := strings.TrimSpace(s)
	m := byteSizeRE.FindStringSubmatch(in)
	if m == nil {
		return 0, fmt.Errorf("%w: memory size %q: want a non-negative number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, K, M, G, T)", ErrBadValue, s)
	}
	mult, ok := byteUnit(m[2])
	if !ok {
		return 0, fmt.Errorf("%w: memory size %q: unknown unit %q", ErrBadValue, s, m[2])
	}
	num, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("%w: memory size %q: bad number", ErrBadValue, s)
	}
	v := new(big.Rat).Mul(num, mult)
	q := new(big.Int).Quo(v.Num(), v.Denom())
	if !q.IsInt64() {
		return 0, fmt.Errorf("%w: memory size %q overflows", ErrBadValue, s)
	}
	return q.Int64(), nil
}

var humanIntRE = regexp.MustCompile(`^(\d+(?:\.\d+)?)([kKmMgGtT])$`)

// ParseHumanInt parses vLLM's human-readable integers: "1k" = 1000,
// "1K" = 1024, "25.6k" = 25600, plain integers as is. Decimals are refused
// with binary suffixes, with vLLM's message.
func ParseHumanInt(s string) (int, error) {
	v := strings.TrimSpace(s)
	if m := humanIntRE.FindStringSubmatch(v); m != nil {
		number, suffix := m[1], m[2]
		switch suffix {
		case "k", "m", "g", "t":
			mult := map[string]float64{"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[suffix]
			f, err := strconv.ParseFloat(number, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: %q: %w", ErrBadValue, s, err)
			}
			x := f * mult
			// float64(MaxInt64) rounds up to 2^63, which int() cannot hold,
			// so equality overflows too.
			if x >= math.MaxInt64 {
				return 0, fmt.Errorf("%w: %q overflows", ErrBadValue, s)
			}
			return int(x), nil
		default:
			n, err := strconv.Atoi(number)
			if err != nil {
				return 0, fmt.Errorf("%w: Decimals are not allowed with binary suffixes like %s. Did you mean to use %s%s instead?",
					ErrBadValue, suffix, number, strings.ToLower(suffix))
			}
			shift := map[string]uint{"K": 10, "M": 20, "G": 30, "T": 40}[suffix]
			if n > math.MaxInt64>>shift {
				return 0, fmt.Errorf("%w: %q overflows", ErrBadValue, s)
			}
			return n << shift, nil
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%w: invalid int value: '%s'", ErrBadValue, s)
	}
	return n, nil
}

// ParseMaxModelLen parses a --max-model-len value: a human-readable integer
// or -1 / "auto" (returned as -1: the largest length that fits).
func ParseMaxModelLen(s string) (int, error) {
	v := strings.TrimSpace(s)
	if strings.EqualFold(v, "auto") || v == "-1" {
		return -1, nil
	}
	n, err := ParseHumanInt(v)
	if err != nil {
		return 0, fmt.Errorf("argument --max-model-len: %w", err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("argument --max-model-len: %w: must be a positive integer, -1 or 'auto', got %d", ErrBadValue, n)
	}
	return n, nil
}
