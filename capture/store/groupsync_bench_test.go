package store_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/internal/stats"
)

// BenchmarkGroupSync puts records from R rollouts at once (one goroutine
// each, a BeginCall before every put, as the capture proxy makes a call)
// with the default group sync and with per-file fdatasync, alternating in
// the same run. One op is one round of R×16 calls per mode; it reports each
// mode's calls/s and the median per-round ratio group/per-file.
func BenchmarkGroupSync(b *testing.B) {
	for _, rollouts := range []int{1, 2, 4, 8, 16, 64} {
		b.Run(fmt.Sprintf("rollouts=%d", rollouts), func(b *testing.B) {
			root := b.TempDir()
			const perRollout = 16
			var group, perFile, ratio []float64
			for round := range b.N {
				modes := [][]store.FileOption{nil, {store.WithPerFileSync()}}
				if round%2 == 1 {
					modes[0], modes[1] = modes[1], modes[0]
				}
				rates := make([]float64, 2)
				for i, opts := range modes {
					dir := filepath.Join(root, strconv.Itoa(round)+"-"+strconv.Itoa(i))
					rates[i] = putCalls(b, dir, opts, rollouts, perRollout)
				}
				if round%2 == 1 {
					rates[0], rates[1] = rates[1], rates[0]
				}
				group, perFile = append(group, rates[0]), append(perFile, rates[1])
				ratio = append(ratio, rates[0]/rates[1])
			}
			b.ReportMetric(stats.Median(group), "group-calls/s")
			b.ReportMetric(stats.Median(perFile), "per-file-calls/s")
			b.ReportMetric(stats.Median(ratio), "group/per-file")
		})
	}
}

// putCalls makes rollouts×perRollout calls (BeginCall, then Put) from one
// writer per rollout and returns calls per second.
func putCalls(b *testing.B, dir string, opts []store.FileOption, rollouts, perRollout int) float64 {
	b.Helper()
	_, rate, _ := newRollouts(b, dir, opts, "g", rollouts, perRollout, 1)
	return rate
}
