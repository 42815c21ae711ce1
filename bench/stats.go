package bench

import (
	"math/rand/v2"
	"slices"

	"github.com/capbench/capbench/internal/stats"
)

// Interval is a point estimate with a confidence interval.
type Interval struct {
	Value float64 `json:"value"`
	Low   float64 `json:"low"`
	High  float64 `json:"high"`
	N     int     `json:"n"`
}

// bootstrapRounds trades precision of the interval ends for time.
const bootstrapRounds = 1000

// maxBootstrap bounds the values resampled: larger sets are thinned to
// evenly spaced order statistics (same quantiles, bounded cost).
const maxBootstrap = 2000

func thin(xs []float64) []float64 {
	if len(xs) <= maxBootstrap {
		return xs
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	out := make([]float64, maxBootstrap)
	for i := range out {
		out[i] = s[i*len(s)/maxBootstrap]
	}
	return out
}

// BootstrapMedianCI is the median of xs with a 95% percentile-bootstrap
// interval (seeded, so a report is reproducible).
func BootstrapMedianCI(xs []float64, seed uint64) Interval {
	out := Interval{Value: stats.Median(xs), N: len(xs)}
	xs = thin(xs)
	if len(xs) < 2 {
		out.Low, out.High = out.Value, out.Value
		return out
	}
	r := rand.New(rand.NewPCG(seed, 17))
	meds := make([]float64, bootstrapRounds)
	buf := make([]float64, len(xs))
	for i := range meds {
		for j := range buf {
			buf[j] = xs[r.IntN(len(xs))]
		}
		meds[i] = stats.Median(buf)
	}
	slices.Sort(meds)
	out.Low, out.High = meds[bootstrapRounds*25/1000], meds[bootstrapRounds*975/1000-1]
	return out
}

// BootstrapRatioCI is median(b)/median(a) with a 95% interval from
// resampling both sides independently (unpaired samples).
func BootstrapRatioCI(a, b []float64, seed uint64) Interval {
	ma, mb := stats.Median(a), stats.Median(b)
	out := Interval{N: min(len(a), len(b))}
	if ma == 0 || len(a) == 0 || len(b) == 0 {
		return out
	}
	out.Value = mb / ma
	a, b = thin(a), thin(b)
	if len(a) < 2 || len(b) < 2 {
		out.Low, out.High = out.Value, out.Value
		return out
	}
	r := rand.New(rand.NewPCG(seed, 29))
	ratios := make([]float64, 0, bootstrapRounds)
	ba, bb := make([]float64, len(a)), make([]float64, len(b))
	for range bootstrapRounds {
		for j := range ba {
			ba[j] = a[r.IntN(len(a))]
		}
		for j := range bb {
			bb[j] = b[r.IntN(len(b))]
		}
		if m := stats.Median(ba); m > 0 {
			ratios = append(ratios, stats.Median(bb)/m)
		}
	}
	slices.Sort(ratios)
	if len(ratios) == 0 {
		return out
	}
	out.Low, out.High = ratios[len(ratios)*25/1000], ratios[max(len(ratios)*975/1000-1, 0)]
	return out
}
