package bench

import (
	"sort"

	"github.com/capbench/capbench/internal/stats"
)

// KneePoint is one stage's position on the sweep axis and its throughput.
type KneePoint struct {
	X                float64 `json:"x"`
	OutputThroughput float64 `json:"output_throughput"`
	E2ELP50MS        float64 `json:"e2el_p50_ms"`
	Rounds           int     `json:"rounds"`
}

// Knee is where a sweep's output throughput stops growing: the smallest
// point reaching KneeFraction of the best throughput of the sweep. A point
// run in several rounds counts with its median throughput.
type Knee struct {
	Axis   string      `json:"axis"` // "concurrency" or "rate"
	Path   Path        `json:"path"`
	Points []KneePoint `json:"points"`
	X      float64     `json:"x"`
	Max    float64     `json:"max_output_throughput"`
	// Fraction is the share of the maximum that counts as saturated.
	Fraction float64 `json:"fraction"`
	// Predicted is, for a fake with a memory model, how many requests of
	// TokensPerRequest (the measured mean of prompt + output) the KV cache
	// holds at once: vLLM's num_blocks / ceil(tokens / block_size).
	Predicted        float64 `json:"predicted,omitempty"`
	TokensPerRequest int     `json:"tokens_per_request,omitempty"`
}

// KneeFraction is the saturation threshold of FindKnee.
const KneeFraction = 0.95

// FindKnee locates the knee of a sweep from its summaries for one path; nil
// when fewer than two stages were measured.
func FindKnee(sums []Summary, stages []StageInfo, p Path) *Knee {
	k := &Knee{Path: p, Fraction: KneeFraction, Axis: "concurrency"}
	tput, lat := map[float64][]float64{}, map[float64][]float64{}
	var xs []float64
	for _, s := range sums {
		if s.Path != p || s.Stage >= len(stages) {
			continue
		}
		sh := stages[s.Stage].Shape
		x := float64(sh.Concurrency)
		if sh.Arrival != Closed {
			x, k.Axis = sh.Rate, "rate"
		}
		if _, seen := tput[x]; !seen {
			xs = append(xs, x)
		}
		tput[x] = append(tput[x], s.OutputThroughput)
		lat[x] = append(lat[x], s.E2EL.P50)
	}
	for _, x := range xs {
		pt := KneePoint{X: x, OutputThroughput: stats.Median(tput[x]), E2ELP50MS: stats.Median(lat[x]), Rounds: len(tput[x])}
		k.Points = append(k.Points, pt)
		k.Max = max(k.Max, pt.OutputThroughput)
	}
	if len(k.Points) < 2 {
		return nil
	}
	sort.SliceStable(k.Points, func(i, j int) bool { return k.Points[i].X < k.Points[j].X })
	for _, pt := range k.Points {
		if pt.OutputThroughput >= KneeFraction*k.Max {
			k.X = pt.X
			break
		}
	}
	return k
}
