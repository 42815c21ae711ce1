package store_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/internal/procstat"
	"github.com/capbench/capbench/internal/syncfloor"
)

var benchModes = []struct {
	name string
	opts []store.FileOption
}{
	{"lazy-state", nil},
	{"state-every-put", []store.FileOption{store.WithStateWriteEveryPut()}},
}

// benchEntry is a small realistic record (about 2 KB on disk).
func benchEntry(rollout string, call int) *record.Entry {
	gen := make([]int, 48)
	for i := range gen {
		gen[i] = 1000 + (call*31+i)%150000
	}
	e := newEntry(rollout, fmt.Sprintf("call-%06d", call), gen...)
	e.PromptTokenIDs = make([]int, 200)
	for i := range e.PromptTokenIDs {
		e.PromptTokenIDs[i] = 100 + i
	}
	e.CumLen = nil
	e.Digest = nil
	return e
}

func newBenchStore(b *testing.B, opts []store.FileOption) *store.FileStore {
	s, err := store.NewFileStore(b.TempDir(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkPut puts b.N records spread over R rollouts written concurrently
// (one goroutine per rollout). NeMo Gym's store beside it: BenchmarkPutVsGym.
func BenchmarkPut(b *testing.B) {
	for _, mode := range benchModes {
		for _, rollouts := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/rollouts=%d", mode.name, rollouts), func(b *testing.B) {
				s := newBenchStore(b, mode.opts)
				ctx := context.Background()
				entries := make([][]*record.Entry, rollouts)
				for r := range rollouts {
					for i := r; i < b.N; i += rollouts {
						entries[r] = append(entries[r], benchEntry(fmt.Sprintf("roll-%d", r), i))
					}
				}
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for r := range rollouts {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for _, e := range entries[r] {
							if err := s.Put(ctx, e); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				rate := float64(b.N) / time.Since(start).Seconds()
				b.StopTimer()
				// The peer in the same run: one bare append + fdatasync per
				// put on as many files, as a per-file sync does.
				perFile, err := syncfloor.Measure(b.TempDir(), rollouts, max(b.N, rollouts), 1)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(rate, "puts/s")
				b.ReportMetric(perFile, "fdatasync-puts/s")
				b.ReportMetric(rate/perFile, "x-fdatasync")
			})
		}
	}
}

// BenchmarkFreeze freezes R rollouts of 8 records each concurrently; the
// puts that fill them are not timed.
func BenchmarkFreeze(b *testing.B) {
	for _, rollouts := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("rollouts=%d", rollouts), func(b *testing.B) {
			s := newBenchStore(b, nil)
			ctx := context.Background()
			var frozen time.Duration
			for n := range b.N {
				b.StopTimer()
				for r := range rollouts {
					for i := range 8 {
						if err := s.Put(ctx, benchEntry(fmt.Sprintf("it%d-roll%d", n, r), i)); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StartTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for r := range rollouts {
					wg.Add(1)
					go func() {
						defer wg.Done()
						snap, err := s.Freeze(ctx, fmt.Sprintf("it%d-roll%d", n, r))
						if err != nil || len(snap.Entries) != 8 {
							b.Errorf("freeze: %v", err)
						}
					}()
				}
				wg.Wait()
				frozen += time.Since(start)
			}
			b.ReportMetric(float64(b.N*rollouts)/frozen.Seconds(), "freezes/s")
		})
	}
}

// BenchmarkRollout200x32k puts one rollout of 200 calls whose prompts grow
// to 32k tokens (about 22 MB of JSONL), then freezes it.
// NeMo Gym's store beside it: BenchmarkPutVsGym/rollout=200x32k.
func BenchmarkRollout200x32k(b *testing.B) {
	const calls = 200
	for _, mode := range benchModes {
		b.Run(mode.name, func(b *testing.B) {
			entries := longRolloutEntries("long", calls)
			ctx := context.Background()
			var putTime, freezeTime time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				s := newBenchStore(b, mode.opts)
				b.StartTimer()
				start := time.Now()
				for _, e := range entries {
					if err := s.Put(ctx, e); err != nil {
						b.Fatal(err)
					}
				}
				putTime += time.Since(start)
				start = time.Now()
				snap, err := s.Freeze(ctx, "long")
				if err != nil || len(snap.Entries) != calls {
					b.Fatalf("freeze: %v", err)
				}
				freezeTime += time.Since(start)
			}
			b.ReportMetric(float64(b.N*calls)/putTime.Seconds(), "puts/s")
			b.ReportMetric(freezeTime.Seconds()/float64(b.N), "freeze-s")
		})
	}
}

// longRolloutEntries is one rollout of `calls` records whose prompts grow
// evenly to 32k tokens, 128 generated tokens each.
func longRolloutEntries(id string, calls int) []*record.Entry {
	const maxPrompt, genLen = 32768, 128
	entries := make([]*record.Entry, calls)
	for i := range calls {
		gen := make([]int, genLen)
		for j := range gen {
			gen[j] = 1000 + (i*genLen+j)%150000
		}
		e := newEntry(id, fmt.Sprintf("call-%03d", i), gen...)
		e.PromptTokenIDs = make([]int, maxPrompt*(i+1)/calls)
		for j := range e.PromptTokenIDs {
			e.PromptTokenIDs[j] = 100 + (j*7)%150000
		}
		e.CumLen, e.Digest = nil, nil
		entries[i] = e
	}
	return entries
}

// BenchmarkCall is one captured call as the proxy makes it: begin_call, then
// put (two durable appends), with R rollouts written at once and K calls per
// rollout before the writer moves to a new rollout (so K=1 creates the
// rollout's files on every call). The peer, measured in the same run: two
// bare append+fdatasync per call to R already-open files, the per-file sync
// NeMo Gym's store does (the default group sync can beat it).
func BenchmarkCall(b *testing.B) {
	for _, rollouts := range []int{1, 16, 64} {
		for _, perRollout := range []int{1, 50} {
			b.Run(fmt.Sprintf("rollouts=%d/calls=%d", rollouts, perRollout), func(b *testing.B) {
				s := newBenchStore(b, nil)
				ctx := context.Background()
				n := max(b.N, rollouts)
				perFile, err := syncfloor.Measure(b.TempDir(), rollouts, n, 2)
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				start := time.Now()
				var next atomic.Int64
				var wg sync.WaitGroup
				for r := range rollouts {
					wg.Go(func() {
						for j := 0; ; j++ {
							i := int(next.Add(1) - 1)
							if i >= n {
								return
							}
							id := fmt.Sprintf("roll-%d-%d", r, j/perRollout)
							e := benchEntry(id, i)
							if err := s.BeginCall(ctx, id, e.ModelCallID); err != nil {
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
				rate := float64(n) / time.Since(start).Seconds()
				b.ReportMetric(rate, "calls/s")
				b.ReportMetric(perFile, "fdatasync-calls/s")
				b.ReportMetric(rate/perFile, "x-fdatasync")
			})
		}
	}
}

// BenchmarkResolveRead200x32k is the read a request-time parent resolution
// makes at the last call of one rollout of 200 calls with prompts growing to
// 32k tokens (about 22 MB written): the whole rollout (ReadEntries, what the
// proxy read per call before) against a follower that read the first 199
// calls earlier and now reads the one new line plus the parent's line.
func BenchmarkResolveRead200x32k(b *testing.B) {
	const calls, maxPrompt, genLen = 200, 32768, 128
	s := newBenchStore(b, nil)
	ctx := context.Background()
	var last *record.Entry
	for i := range calls {
		gen := make([]int, genLen)
		for j := range gen {
			gen[j] = 1000 + (i*genLen+j)%150000
		}
		e := newEntry("long", fmt.Sprintf("call-%03d", i), gen...)
		e.PromptTokenIDs = make([]int, maxPrompt*(i+1)/calls)
		for j := range e.PromptTokenIDs {
			e.PromptTokenIDs[j] = 100 + (j*7)%150000
		}
		e.CumLen, e.Digest = nil, nil
		if i == calls-1 {
			last = e
			break
		}
		if err := s.Put(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("whole-rollout", func(b *testing.B) {
		for b.Loop() {
			es, err := s.ReadEntries(ctx, "long")
			if err != nil || len(es) != calls-1 {
				b.Fatal(err)
			}
		}
	})
	b.Run("follower", func(b *testing.B) {
		f := store.NewFollower(s, "long")
		if _, _, err := f.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
		prev := fmt.Sprintf("call-%03d", calls-2)
		i := 0
		for b.Loop() {
			b.StopTimer()
			e := last.Clone()
			e.ModelCallID = fmt.Sprintf("extra-%06d", i)
			i++
			if err := s.Put(ctx, e); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			added, _, err := f.Refresh(ctx)
			if err != nil || len(added) != 1 {
				b.Fatal(err)
			}
			if _, err := f.Cumulative(ctx, prev); err != nil {
				b.Fatal(err)
			}
			prev = e.ModelCallID
		}
	})
}

// BenchmarkRetireSweep is the consumer side's clean-up over N rollouts of one
// record each: retiring every frozen rollout (drop), sweeping the tombstones,
// and a sweep of a directory of N live rollouts with nothing to sweep (what a
// periodic sweep costs a busy directory). CAPBENCH_BENCH_ROLLOUTS sets N
// (default 2000). One op is the whole sequence.
func BenchmarkRetireSweep(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("CAPBENCH_BENCH_ROLLOUTS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	var drop, sweep, idle time.Duration
	for b.Loop() {
		b.StopTimer()
		s := newBenchStore(b, nil)
		live := newBenchStore(b, nil)
		snaps := make([]*store.Snapshot, n)
		for i := range n {
			for _, st := range []*store.FileStore{s, live} {
				if err := st.Put(ctx, benchEntry(fmt.Sprintf("r%05d", i), i)); err != nil {
					b.Fatal(err)
				}
			}
			snap, err := s.Freeze(ctx, fmt.Sprintf("r%05d", i))
			if err != nil {
				b.Fatal(err)
			}
			snaps[i] = snap
		}
		_ = live.Close()
		b.StartTimer()
		start := time.Now()
		for i, snap := range snaps {
			if ok, err := s.Drop(ctx, fmt.Sprintf("r%05d", i), snap.SnapshotID, snap.Version); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
		drop += time.Since(start)
		start = time.Now()
		if got, err := s.SweepRetired(ctx, 0); err != nil || got != n {
			b.Fatal(got, err)
		}
		sweep += time.Since(start)
		start = time.Now()
		if got, err := live.SweepRetired(ctx, 0); err != nil || got != 0 {
			b.Fatal(got, err)
		}
		idle += time.Since(start)
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N*n) }
	b.ReportMetric(per(drop), "drop-µs/rollout")
	b.ReportMetric(per(sweep), "sweep-µs/rollout")
	b.ReportMetric(per(idle), "idle-sweep-µs/rollout")
}

// BenchmarkManyRollouts writes N rollouts of one call each (begin_call +
// put), as a long-running proxy does, and reports the heap the store still
// holds per rollout ever written (after a GC) and how long Close takes.
// CAPBENCH_BENCH_ROLLOUTS sets N (default 5000).
func BenchmarkManyRollouts(b *testing.B) {
	n := 5000
	if v, err := strconv.Atoi(os.Getenv("CAPBENCH_BENCH_ROLLOUTS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	var heap float64
	var closeTime time.Duration
	for b.Loop() {
		b.StopTimer()
		s := newBenchStore(b, nil)
		before := procstat.LiveHeap()
		b.StartTimer()
		for i := range n {
			id := fmt.Sprintf("many-%06d", i)
			e := benchEntry(id, i)
			if err := s.BeginCall(ctx, id, e.ModelCallID); err != nil {
				b.Fatal(err)
			}
			if err := s.Put(ctx, e); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		heap += (float64(procstat.LiveHeap()) - float64(before)) / float64(n)
		start := time.Now()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		closeTime += time.Since(start)
		runtime.KeepAlive(s)
		b.StartTimer()
	}
	b.ReportMetric(heap/float64(b.N), "heap-B/rollout")
	b.ReportMetric(closeTime.Seconds()/float64(b.N), "close-s")
}
