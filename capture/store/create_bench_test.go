package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/internal/procstat"
	"github.com/capbench/capbench/internal/stats"
)

// BenchmarkNewRollouts starts rollouts from W writers at once, each writer
// beginning a new rollout every P calls (a BeginCall and a Put per call, as
// the capture proxy makes a call), with the store's default file creation
// (an unnamed inode linked into place while another creation runs) and with
// every file created by name as Gym's store does, in alternating rounds of
// the same run, in one directory. Before each mode's turn the rollouts the
// directory holds are frozen, dropped and swept, as a consumer retires
// consumed rollouts, and a second passes, so creation runs after deletes as
// in a training loop
// (docs/store.md#creating-files-while-others-are-created).
// One op is one round of both modes; it reports each mode's calls/s and
// process CPU per call, and the median of the rounds' ratios.
func BenchmarkNewRollouts(b *testing.B) {
	for _, c := range []struct{ writers, perRollout, rolloutsEach int }{
		{1, 1, 64}, {64, 1, 8}, {64, 50, 2},
	} {
		b.Run(fmt.Sprintf("writers=%d/calls=%d", c.writers, c.perRollout), func(b *testing.B) {
			root := b.TempDir()
			modes := []struct {
				name string
				opts []store.FileOption
			}{{"linked", nil}, {"by-name", []store.FileOption{store.WithCreateByName()}}}
			rate := map[string][]float64{}
			cpu := map[string][]float64{}
			var ratio []float64
			dir := filepath.Join(root, "capture")
			var held []string // the rollouts dir holds
			for round := range b.N {
				got := map[string]float64{}
				for i := range modes {
					// Alternate which mode goes first, so neither always runs
					// on a warmer machine; both write one directory (where a
					// file system puts a directory's inodes moves creation
					// more than anything here).
					m := modes[(i+round)%2]
					b.StopTimer()
					retire(b, dir, held)
					time.Sleep(1100 * time.Millisecond) // ext4 skips inodes freed in an earlier second
					b.StartTimer()
					var r, perCall float64
					held, r, perCall = newRollouts(b, dir, m.opts, fmt.Sprintf("r%d", round), c.writers, c.perRollout, c.rolloutsEach)
					got[m.name] = r
					rate[m.name] = append(rate[m.name], r)
					cpu[m.name] = append(cpu[m.name], perCall)
				}
				ratio = append(ratio, got["linked"]/got["by-name"])
			}
			b.ReportMetric(stats.Median(rate["linked"]), "calls/s")
			b.ReportMetric(stats.Median(rate["by-name"]), "by-name-calls/s")
			b.ReportMetric(stats.Median(ratio), "linked/by-name")
			b.ReportMetric(stats.Median(cpu["linked"]), "cpu-µs/call")
			b.ReportMetric(stats.Median(cpu["by-name"]), "by-name-cpu-µs/call")
		})
	}
}

// newRollouts makes writers × rolloutsEach new rollouts of perRollout calls
// each in dir and returns their ids, the calls per second and the process's
// CPU µs per call.
func newRollouts(b *testing.B, dir string, opts []store.FileOption, prefix string, writers, perRollout, rolloutsEach int) (ids []string, rate, cpuPerCall float64) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	s, err := store.NewFileStore(dir, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	groups := make([][]*record.Entry, writers)
	for w := range writers {
		for k := range rolloutsEach {
			id := fmt.Sprintf("%s-%d-%d", prefix, w, k)
			ids = append(ids, id)
			for i := range perRollout {
				groups[w] = append(groups[w], benchEntry(id, i))
			}
		}
	}
	cpu0 := procstat.CPU()
	took := putConcurrently(context.Background(), b, s, groups, true)
	calls := float64(writers * rolloutsEach * perRollout)
	return ids, calls / took.Seconds(), float64((procstat.CPU() - cpu0).Microseconds()) / calls
}

// retire freezes, drops and sweeps the rollouts ids in dir, as a consumer
// does once it has read them.
func retire(b *testing.B, dir string, ids []string) {
	b.Helper()
	if len(ids) == 0 {
		return
	}
	ctx := context.Background()
	s, err := store.NewFileStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, id := range ids {
		snap, err := s.Freeze(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := s.Drop(ctx, id, snap.SnapshotID, snap.Version); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	if got, err := s.SweepRetired(ctx, 0); err != nil || got != len(ids) {
		b.Fatal(got, err)
	}
}
