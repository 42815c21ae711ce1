package env

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
)

// ErrInjectedPutFailure is the error a FailPut fault returns.
var ErrInjectedPutFailure = errors.New("injected capture write failure")

// faultStore wraps the proxy's store and fails or drops the n-th Put of each
// rollout.
type faultStore struct {
	proxy.Store
	faults StoreFaults
	mu     sync.Mutex
	puts   map[string]int
}

func withFaults(s proxy.Store, f StoreFaults) proxy.Store {
	if !f.any() {
		return s
	}
	return &faultStore{Store: s, faults: f, puts: map[string]int{}}
}

func (s *faultStore) Put(ctx context.Context, e *record.Entry) error {
	s.mu.Lock()
	s.puts[e.RolloutID]++
	n := s.puts[e.RolloutID]
	s.mu.Unlock()
	switch {
	case s.faults.FailPut == n:
		return ErrInjectedPutFailure
	case s.faults.DropPut == n:
		return nil
	}
	return s.Store.Put(ctx, e)
}

// timedStore reports the duration of every Put (the bench's store latency).
type timedStore struct {
	proxy.Store
	onPut func(time.Duration, error)
}

func withPutTiming(s proxy.Store, onPut func(time.Duration, error)) proxy.Store {
	if onPut == nil {
		return s
	}
	return &timedStore{Store: s, onPut: onPut}
}

func (s *timedStore) Put(ctx context.Context, e *record.Entry) error {
	start := time.Now()
	err := s.Store.Put(ctx, e)
	s.onPut(time.Since(start), err)
	return err
}
