package bench

import (
	"errors"
	"fmt"
	"sort"

	"github.com/capbench/capbench/internal/stats"
)

// Direction says which way a metric is better.
type Direction string

// Directions.
const (
	LowerIsBetter  Direction = "lower"
	HigherIsBetter Direction = "higher"
)

// Change is one metric of one (stage, path) group compared across runs:
// Ratio is new/base of the medians of the per-request values, with a 95%
// bootstrap interval from the samples.
type Change struct {
	Stage      int       `json:"stage"`
	Path       Path      `json:"path"`
	Metric     string    `json:"metric"`
	Direction  Direction `json:"direction"`
	Base       float64   `json:"base"`
	New        float64   `json:"new"`
	Ratio      Interval  `json:"ratio"`
	Regression bool      `json:"regression"`
	// Improvement is a change beyond noise the good way.
	Improvement bool `json:"improvement"`
}

// Comparison is BASE vs NEW.
type Comparison struct {
	Threshold   float64  `json:"threshold"`
	Changes     []Change `json:"changes"`
	Regressions int      `json:"regressions"`
}

// ErrNotComparable means the two runs measured different things.
var ErrNotComparable = errors.New("runs are not comparable")

// perRequest extracts one per-request metric (in ms, or tok/s for rates).
type perRequest struct {
	name string
	dir  Direction
	get  func(s *Sample) []float64
}

var compared = []perRequest{
	{"ttft_ms", LowerIsBetter, func(s *Sample) []float64 {
		if s.FirstTokenNS == 0 {
			return nil
		}
		return []float64{float64(s.TTFTNS()) / 1e6}
	}},
	{"tpot_ms", LowerIsBetter, func(s *Sample) []float64 {
		if t, ok := s.TPOTNS(); ok {
			return []float64{float64(t) / 1e6}
		}
		return nil
	}},
	{"itl_ms", LowerIsBetter, func(s *Sample) []float64 {
		out := make([]float64, len(s.ChunkGapsUS))
		for i, g := range s.ChunkGapsUS {
			out[i] = float64(g) / 1e3
		}
		return out
	}},
	{"e2el_ms", LowerIsBetter, func(s *Sample) []float64 { return []float64{float64(s.E2ELNS()) / 1e6} }},
	{"request_output_tok_s", HigherIsBetter, func(s *Sample) []float64 {
		if s.E2ELNS() <= 0 || s.OutputTokens == 0 {
			return nil
		}
		return []float64{float64(s.OutputTokens) / (float64(s.E2ELNS()) / 1e9)}
	}},
}

// Compare compares every metric of every (stage, path) group the two runs
// share. A change is a regression when it is worse than threshold (0.1 =
// 10%) and its whole interval lies on the worse side of no change.
func Compare(base, next *Result, threshold float64) (*Comparison, error) {
	if why := base.Config.Comparable(next.Config); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrNotComparable, why)
	}
	if threshold < 0 {
		return nil, fmt.Errorf("--threshold must not be negative, got %v", threshold)
	}
	type key struct {
		stage int
		path  Path
	}
	group := func(r *Result) map[key][]*Sample {
		g := map[key][]*Sample{}
		for i := range r.Samples {
			s := &r.Samples[i]
			if s.Phase == PhaseMeasure && s.OK() {
				k := key{s.Stage, s.Path}
				g[k] = append(g[k], s)
			}
		}
		return g
	}
	gb, gn := group(base), group(next)
	var keys []key
	for k := range gb {
		if _, ok := gn[k]; ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no measured samples in common (was a samples file left out?)", ErrNotComparable)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].stage != keys[j].stage {
			return keys[i].stage < keys[j].stage
		}
		return keys[i].path < keys[j].path
	})
	cmp := &Comparison{Threshold: threshold}
	for _, k := range keys {
		for mi, m := range compared {
			var a, b []float64
			for _, s := range gb[k] {
				a = append(a, m.get(s)...)
			}
			for _, s := range gn[k] {
				b = append(b, m.get(s)...)
			}
			if len(a) == 0 || len(b) == 0 {
				continue
			}
			ci := BootstrapRatioCI(a, b, uint64(k.stage*31+mi))
			switch ma, mb := stats.Median(a), stats.Median(b); {
			case ma == 0 && mb == 0: // e.g. the ITL of a buffering proxy: no change
				ci = Interval{Value: 1, Low: 1, High: 1, N: min(len(a), len(b))}
			case ma == 0: // no ratio to a zero base
				continue
			}
			c := Change{Stage: k.stage, Path: k.path, Metric: m.name, Direction: m.dir, Base: stats.Median(a), New: stats.Median(b), Ratio: ci}
			if m.dir == LowerIsBetter {
				c.Regression = ci.Value > 1+threshold && ci.Low > 1
				c.Improvement = ci.Value < 1-threshold && ci.High < 1
			} else {
				c.Regression = ci.Value < 1-threshold && ci.High < 1
				c.Improvement = ci.Value > 1+threshold && ci.Low > 1
			}
			if c.Regression {
				cmp.Regressions++
			}
			cmp.Changes = append(cmp.Changes, c)
		}
	}
	return cmp, nil
}
