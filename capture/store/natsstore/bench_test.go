package natsstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/capbench/capbench/capture/conformance"
	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/capture/store/natsstore"
	"github.com/capbench/capbench/internal/natstest"
)

// benchRecord is the kit's record with prompt and generated token counts.
func benchRecord(b *testing.B, rolloutID, callID string, prompt, gen int) *record.Entry {
	e, err := conformance.Entry(rolloutID, callID, 0)
	if err != nil {
		b.Fatal(err)
	}
	e.PromptTokenIDs = make([]int, prompt)
	for i := range e.PromptTokenIDs {
		e.PromptTokenIDs[i] = 100000 + i%50000
	}
	e.GenerationTokenIDs = make([]int, gen)
	e.GenerationLogProbs = make([]float64, gen)
	for i := range e.GenerationTokenIDs {
		e.GenerationTokenIDs[i] = 100000 + (i*7)%50000
		e.GenerationLogProbs[i] = -1.0 / float64(i+3)
	}
	e.CumLen, e.Digest = nil, nil
	if err := lineage.Stamp(e, []any{map[string]any{"role": "user", "content": "What is the weather in Paris?"}},
		lineage.Decision{Resolution: record.ResolutionRoot}); err != nil {
		b.Fatal(err)
	}
	return e
}

// benchBackend opens one store client as a proxy process holds it.
type benchBackend struct {
	name string
	open func(b *testing.B) store.Sink
}

func natsBackend(name string, opts ...natstest.Option) benchBackend {
	return benchBackend{name, func(b *testing.B) store.Sink {
		srv, err := natstest.Start(b.TempDir(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Stop)
		s, err := natsstore.Open(context.Background(), natsstore.Options{URL: srv.URL()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}}
}

var benchBackends = []benchBackend{
	{"file", func(b *testing.B) store.Sink {
		s, err := store.NewFileStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}},
	natsBackend("nats"),
	natsBackend("nats-sync-always", natstest.SyncAlways()),
}

// BenchmarkPut measures puts/s of the file store and the NATS store (an
// in-process server on loopback, with JetStream's default sync and with
// sync_interval: always) side by side in one run: writers goroutines each
// fill rollouts of calls=N records through one shared client, as the calls
// of concurrent sessions reach one proxy. The NATS store rewrites the
// rollout's index on every put, so its cost grows with calls per rollout.
//
//	go test ./capture/store/natsstore -run '^$' -bench BenchmarkPut -benchtime 2s
func BenchmarkPut(b *testing.B) {
	sizes := []struct {
		name        string
		prompt, gen int
	}{
		{"small", 200, 48},          // about 3.4 KB
		{"32k-tokens", 30000, 2768}, // a 32k-token call, about 0.29 MB
	}
	for _, size := range sizes {
		for _, shape := range []struct{ writers, calls int }{{1, 50}, {16, 50}, {16, 500}} {
			if size.name != "small" && shape.calls > 50 {
				continue
			}
			for _, be := range benchBackends {
				b.Run(fmt.Sprintf("record=%s/writers=%d/calls=%d/store=%s", size.name, shape.writers, shape.calls, be.name), func(b *testing.B) {
					benchPut(b, be, shape.writers, shape.calls, size.prompt, size.gen)
				})
			}
		}
	}
}

func benchPut(b *testing.B, be benchBackend, writers, calls, prompt, gen int) {
	s := be.open(b)
	ctx := context.Background()
	proto := benchRecord(b, "bench", "call", prompt, gen)
	line, err := proto.MarshalCanonical()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(line)))
	work := make([][]*record.Entry, writers)
	for i := range b.N {
		w := i % writers
		e := proto.Clone()
		e.RolloutID = fmt.Sprintf("bench-%s-%d-w%d-r%d", be.name, b.N, w, len(work[w])/calls)
		e.ModelCallID = fmt.Sprintf("call-%07d", i)
		work[w] = append(work[w], e)
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, e := range work[w] {
				if err := s.Put(ctx, e); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
}
