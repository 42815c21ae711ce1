package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// BenchmarkGroupSync puts records from R rollouts at once (one goroutine
// each, a BeginCall before every put, as the capture proxy makes a call)
// with the default group sync and with per-file fdatasync, alternating in
// the same run. One op is one round of R×16 calls per mode; it reports each
// mode's calls/s and the median per-round ratio group/per-file.
func BenchmarkGroupSync(b *testing.B) {
	for _, rollouts := range []int{1, 16, 64} {
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
			b.ReportMetric(medianOf(group), "group-calls/s")
			b.ReportMetric(medianOf(perFile), "per-file-calls/s")
			b.ReportMetric(medianOf(ratio), "group/per-file")
		})
	}
}

// putCalls makes rollouts×perRollout calls (BeginCall, then Put) and
// returns calls per second.
func putCalls(b *testing.B, dir string, opts []store.FileOption, rollouts, perRollout int) float64 {
	b.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	s, err := store.NewFileStore(dir, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	entries := make([][]*record.Entry, rollouts)
	for r := range rollouts {
		for i := range perRollout {
			entries[r] = append(entries[r], benchEntry(fmt.Sprintf("g-%d", r), i))
		}
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	start := time.Now()
	for r := range rollouts {
		wg.Go(func() {
			for _, e := range entries[r] {
				if err := s.BeginCall(ctx, e.RolloutID, e.ModelCallID); err != nil {
					b.Error(err)
					return
				}
				if err := s.Put(ctx, e); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(rollouts*perRollout) / time.Since(start).Seconds()
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
