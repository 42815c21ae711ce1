package env

import (
	"context"
	"errors"
	"sync"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
)

// ErrInjectedPutFailure is the error a FailPut fault returns.
var ErrInjectedPutFailure = errors.New("injected capture write failure")

// faultStore wraps the proxy's store and fails or drops the n-th Put of each
// rollout. The wrapper hides the file store's optional interfaces, so a
// proxy over it takes its plain paths (BeginCall, whole-rollout reads):
// fault specs check what a failure does, not what a call costs.
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
