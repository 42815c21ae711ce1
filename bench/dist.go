package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Dist is a token-length distribution: "256" (fixed), "uniform:100-400" or
// "normal:512,128" (mean, standard deviation; clamped at 1).
type Dist struct {
	Kind string  `json:"kind"`
	A    float64 `json:"a"`
	B    float64 `json:"b,omitempty"`
}

// ParseDist reads a distribution flag value; flag names the flag in errors.
func ParseDist(flag, s string) (Dist, error) {
	s = strings.TrimSpace(s)
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return Dist{}, fmt.Errorf("%s %q: want a positive token count, uniform:MIN-MAX or normal:MEAN,STD", flag, s)
		}
		return Dist{Kind: "fixed", A: float64(n)}, nil
	}
	sep := map[string]string{"uniform": "-", "normal": ","}[kind]
	if sep == "" {
		return Dist{}, fmt.Errorf("%s %q: unknown distribution %q (want uniform or normal)", flag, s, kind)
	}
	as, bs, ok := strings.Cut(rest, sep)
	a, errA := strconv.ParseFloat(strings.TrimSpace(as), 64)
	b, errB := strconv.ParseFloat(strings.TrimSpace(bs), 64)
	if !ok || errA != nil || errB != nil || a < 0 || b < 0 || (kind == "uniform" && (a < 1 || b < a)) || (kind == "normal" && a < 1) {
		return Dist{}, fmt.Errorf("%s %q: want uniform:MIN-MAX (1 <= MIN <= MAX) or normal:MEAN,STD (MEAN >= 1)", flag, s)
	}
	return Dist{Kind: kind, A: a, B: b}, nil
}

// String renders d in the flag syntax.
func (d Dist) String() string {
	switch d.Kind {
	case "uniform":
		return fmt.Sprintf("uniform:%g-%g", d.A, d.B)
	case "normal":
		return fmt.Sprintf("normal:%g,%g", d.A, d.B)
	}
	return strconv.Itoa(int(d.A))
}

// Draw samples one length (at least 1).
func (d Dist) Draw(r *rand.Rand) int {
	var v float64
	switch d.Kind {
	case "uniform":
		v = d.A + r.Float64()*(d.B-d.A+1)
	case "normal":
		v = d.A + r.NormFloat64()*d.B
	default:
		v = d.A
	}
	return max(1, int(math.Floor(v)))
}
