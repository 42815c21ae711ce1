package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Arrival is how a stage starts requests.
type Arrival string

// The arrival processes. Closed keeps Concurrency requests in flight; the
// open ones start requests at Rate per second whatever the server does
// (Poisson: exponential gaps; gamma: gamma gaps with shape Burstiness, as
// vLLM's --burstiness; constant: even gaps).
const (
	Closed   Arrival = "closed"
	Constant Arrival = "constant"
	Poisson  Arrival = "poisson"
	Gamma    Arrival = "gamma"
	// Trace sends job n at LoadConfig.Offsets[n] (a replay).
	Trace Arrival = "trace"
)

// Shape is one stage's load.
type Shape struct {
	Arrival Arrival `json:"arrival"`
	// Concurrency: closed loop, the number of workers; open loop, a cap on
	// requests in flight (0 = none; a capped start waits, and the wait shows
	// as schedule delay).
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	// Burstiness is the gamma shape (1 = Poisson, <1 burstier, >1 smoother).
	Burstiness float64 `json:"burstiness,omitempty"`
}

// Validate names the first bad field by its flag.
func (s Shape) Validate() error {
	switch s.Arrival {
	case Closed:
		if s.Concurrency < 1 {
			return fmt.Errorf("--concurrency must be at least 1 for a closed loop, got %d", s.Concurrency)
		}
	case Constant, Poisson, Gamma:
		if !(s.Rate > 0) || math.IsInf(s.Rate, 0) {
			return fmt.Errorf("--rate must be a positive number of requests per second for %s arrivals, got %v", s.Arrival, s.Rate)
		}
		if s.Arrival == Gamma && !(s.Burstiness > 0) {
			return fmt.Errorf("--burstiness must be positive for gamma arrivals, got %v", s.Burstiness)
		}
		if s.Concurrency < 0 {
			return fmt.Errorf("--concurrency (the in-flight cap) must not be negative, got %d", s.Concurrency)
		}
	case Trace:
	default:
		return fmt.Errorf("--arrival %q: want closed, constant, poisson or gamma", s.Arrival)
	}
	return nil
}

// Label is a short name for tables ("c=8", "poisson 20/s").
func (s Shape) Label() string {
	switch s.Arrival {
	case Closed:
		return "c=" + strconv.Itoa(s.Concurrency)
	case Trace:
		return "replay"
	}
	l := fmt.Sprintf("%s %s/s", s.Arrival, strconv.FormatFloat(s.Rate, 'g', 4, 64))
	if s.Arrival == Gamma {
		l += fmt.Sprintf(" b=%g", s.Burstiness)
	}
	return l
}

// gaps draws inter-arrival times for an open-loop shape, seeded so two runs
// of one configuration send on the same schedule.
type gaps struct {
	shape Shape
	rng   *rand.Rand
}

func newGaps(s Shape, seed uint64) *gaps {
	return &gaps{shape: s, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *gaps) next() time.Duration {
	mean := 1 / g.shape.Rate
	var sec float64
	switch g.shape.Arrival {
	case Constant:
		sec = mean
	case Poisson:
		sec = g.rng.ExpFloat64() * mean
	case Trace:
		return 0
	case Gamma:
		k := g.shape.Burstiness
		sec = gammaDraw(g.rng, k) * mean / k
	}
	return time.Duration(sec * float64(time.Second))
}

// gammaDraw samples Gamma(k, 1) (Marsaglia and Tsang; k<1 boosted).
func gammaDraw(r *rand.Rand, k float64) float64 {
	if k < 1 {
		return gammaDraw(r, k+1) * math.Pow(r.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

// ParseSweep reads "concurrency=1,2,4" or "rate=5,10,20" into stage shapes
// derived from base.
func ParseSweep(spec string, base Shape) ([]Shape, error) {
	k, vs, ok := strings.Cut(spec, "=")
	if !ok || vs == "" {
		return nil, fmt.Errorf("--sweep %q: want concurrency=1,2,4 or rate=5,10,20", spec)
	}
	var out []Shape
	for _, v := range strings.Split(vs, ",") {
		v = strings.TrimSpace(v)
		s := base
		switch strings.TrimSpace(k) {
		case "concurrency":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("--sweep %q: concurrency %q is not a positive integer", spec, v)
			}
			s.Arrival, s.Concurrency = Closed, n
		case "rate":
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || !(r > 0) {
				return nil, fmt.Errorf("--sweep %q: rate %q is not a positive number", spec, v)
			}
			if s.Arrival == Closed || s.Arrival == "" {
				s.Arrival = Poisson
			}
			s.Rate = r
		default:
			return nil, fmt.Errorf("--sweep %q: unknown key %q (want concurrency or rate)", spec, k)
		}
		if err := s.Validate(); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
