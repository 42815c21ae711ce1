package vllm

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
)

// scheduler admits requests the way vLLM's scheduler does at the level a
// client can observe: at most maxSeqs run at once and the KV blocks of all
// running requests fit the cache; the rest wait in FIFO order.
type scheduler struct {
	mu       sync.Mutex
	maxSeqs  int
	kvBlocks int // 0 = unlimited
	used     int
	running  int
	waiting  list.List // of *waiter
}

type waiter struct {
	blocks   int
	admitted chan struct{}
}

func newScheduler(maxSeqs, kvBlocks int) *scheduler {
	return &scheduler{maxSeqs: maxSeqs, kvBlocks: kvBlocks}
}

func (s *scheduler) fits(blocks int) bool {
	return s.running < s.maxSeqs && (s.kvBlocks == 0 || s.used+blocks <= s.kvBlocks)
}

// acquire blocks until the request may run, then fills r, whose do must be
// called once. r is the caller's (inside its outcome), so admitting a
// request allocates nothing.
func (s *scheduler) acquire(ctx context.Context, tokens int, r *release) error {
	blocks := (tokens + 15) / 16
	if s.kvBlocks > 0 && blocks > s.kvBlocks {
		blocks = s.kvBlocks
	}
	s.mu.Lock()
	if s.waiting.Len() == 0 && s.fits(blocks) {
		s.running++
		s.used += blocks
		s.mu.Unlock()
		r.s, r.blocks = s, blocks
		return nil
	}
	w := &waiter{blocks: blocks, admitted: make(chan struct{})}
	el := s.waiting.PushBack(w)
	s.mu.Unlock()
	select {
	case <-w.admitted:
		r.s, r.blocks = s, blocks
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		select {
		case <-w.admitted: // admitted while we were giving up: hand the slot back
			s.releaseLocked(blocks)
		default:
			s.waiting.Remove(el)
			s.admitLocked()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// release hands one request's slot back once, however often it is called.
type release struct {
	s      *scheduler
	blocks int
	done   atomic.Bool
}

func (r *release) do() {
	if r.s == nil || r.done.Swap(true) {
		return
	}
	r.s.mu.Lock()
	r.s.releaseLocked(r.blocks)
	r.s.mu.Unlock()
}

func (s *scheduler) releaseLocked(blocks int) {
	s.running--
	s.used -= blocks
	s.admitLocked()
}

// admitLocked starts waiting requests in order while they fit.
func (s *scheduler) admitLocked() {
	for e := s.waiting.Front(); e != nil; e = s.waiting.Front() {
		w := e.Value.(*waiter)
		if !s.fits(w.blocks) {
			return
		}
		s.waiting.Remove(e)
		s.running++
		s.used += w.blocks
		close(w.admitted)
	}
}

func (s *scheduler) counts() (running, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.waiting.Len()
}

// usage is the fraction of KV blocks in use (0 when unlimited).
func (s *scheduler) usage() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kvBlocks == 0 {
		return 0
	}
	return float64(s.used) / float64(s.kvBlocks)
}
