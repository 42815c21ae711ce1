// Package stats holds the small summary statistics the benchmarks, the
// bench reports and the peer runners share, so each is computed one way.
package stats

import "slices"

// Median of xs (0 for none): the middle value, or the mean of the two middle
// values for an even count. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
