package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
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
// (one goroutine per rollout).
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
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
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
func BenchmarkRollout200x32k(b *testing.B) {
	const calls, maxPrompt, genLen = 200, 32768, 128
	for _, mode := range benchModes {
		b.Run(mode.name, func(b *testing.B) {
			entries := make([]*record.Entry, calls)
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
				entries[i] = e
			}
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
