package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/capbench/capbench/capture/record"
)

// MemoryStore keeps rollouts in process memory with the file store's
// semantics: the same validation, canonical lines and entry digests, version
// arithmetic, lifecycle errors and dangling-intent rule. Entries are kept as
// canonical lines and parsed on read, so what a reader gets back is what the
// file store would return.
type MemoryStore struct {
	mu       sync.Mutex
	rollouts map[string]*memRollout
	now      func() time.Time
	gens     uint64 // the last generation handed out (ReadTail cursors)
}

type memRollout struct {
	mu        sync.Mutex
	state     State
	hasState  bool // a state "file" exists
	lines     [][]byte
	intents   []string
	lost      []string
	stateTime time.Time
	gen       uint64 // the generation of lines (see ReadTail)
}

// NewMemoryStore returns an empty in-memory store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{rollouts: map[string]*memRollout{}, now: time.Now}
}

func (m *MemoryStore) get(ctx context.Context, id string) (*memRollout, error) {
	if err := ValidateRolloutID(id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for {
		m.mu.Lock()
		r := m.rollouts[id]
		if r == nil {
			m.gens++
			r = &memRollout{state: newState(), gen: m.gens}
			m.rollouts[id] = r
		}
		m.mu.Unlock()
		r.mu.Lock()
		m.mu.Lock()
		current := m.rollouts[id] == r
		m.mu.Unlock()
		if current {
			return r, nil
		}
		// Swept while we waited: start again on the live record.
		r.mu.Unlock()
	}
}

// unlock releases r and forgets it when it holds nothing (no state, records,
// intents or losses), as after a Delete or a read of an unknown id: the file
// store leaves no files then, and a long run must not keep one entry per id
// it was ever asked about.
func (m *MemoryStore) unlock(id string, r *memRollout) {
	if !r.hasState && len(r.lines) == 0 && len(r.intents) == 0 && len(r.lost) == 0 {
		m.mu.Lock()
		if m.rollouts[id] == r {
			delete(m.rollouts, id)
		}
		m.mu.Unlock()
	}
	r.mu.Unlock()
}

func (m *MemoryStore) touch(r *memRollout) {
	r.hasState = true
	r.stateTime = m.now()
}

// Put appends e idempotently; see FileStore.Put.
func (m *MemoryStore) Put(ctx context.Context, e *record.Entry) error {
	canonical, err := EncodeLine(e)
	if err != nil {
		return err
	}
	_, err = m.PutCanonical(ctx, e, canonical)
	return err
}

// PutCanonical is Put of an entry EncodeLine has encoded; see
// CanonicalSink.
func (m *MemoryStore) PutCanonical(ctx context.Context, e *record.Entry, canonical []byte) (string, error) {
	digest := record.EntryDigest(canonical)
	r, err := m.get(ctx, e.RolloutID)
	if err != nil {
		return "", err
	}
	defer m.unlock(e.RolloutID, r)
	if err := lifecycleErr(e.RolloutID, &r.state); err != nil {
		return "", err
	}
	if existing, ok := r.state.EntryDigests[e.ModelCallID]; ok {
		if existing == digest {
			return digest, nil
		}
		r.state.Incomplete = true
		r.state.Version++
		m.touch(r)
		return "", fmt.Errorf("store: rollout %s: model call id %q: %w", e.RolloutID, e.ModelCallID, ErrConflict)
	}
	r.lines = append(r.lines, canonical)
	r.state.EntryDigests[e.ModelCallID] = digest
	r.state.IndexedSize += int64(len(canonical) + 1)
	r.state.Version++
	m.touch(r)
	return digest, nil
}

// BeginCall records a call intent; see FileStore.BeginCall.
func (m *MemoryStore) BeginCall(ctx context.Context, rolloutID, callID string) error {
	if err := validateCallID(callID); err != nil {
		return err
	}
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return err
	}
	defer m.unlock(rolloutID, r)
	if err := lifecycleErr(rolloutID, &r.state); err != nil {
		return err
	}
	r.intents = append(r.intents, callID)
	return nil
}

// MarkIncomplete records a lost call; see FileStore.MarkIncomplete.
func (m *MemoryStore) MarkIncomplete(ctx context.Context, rolloutID, callID string) error {
	if err := validateCallID(callID); err != nil {
		return err
	}
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return err
	}
	defer m.unlock(rolloutID, r)
	if r.state.Retired {
		return fmt.Errorf("store: rollout %s: %w", rolloutID, ErrRetired)
	}
	r.state.Incomplete = true
	r.state.Version++
	r.lost = append(r.lost, callID)
	m.touch(r)
	return nil
}

func (r *memRollout) parse(id string) ([]*record.Entry, error) {
	out := make([]*record.Entry, 0, len(r.lines))
	for i, l := range r.lines {
		e, err := record.ParseLine(l)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: line %d: %w", ErrCorrupt, id, i+1, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Freeze freezes the rollout; see FileStore.Freeze.
func (m *MemoryStore) Freeze(ctx context.Context, rolloutID string) (*Snapshot, error) {
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return nil, err
	}
	defer m.unlock(rolloutID, r)
	if r.state.Retired {
		return nil, fmt.Errorf("store: rollout %s: %w", rolloutID, ErrRetired)
	}
	if !r.state.Frozen {
		r.state.Frozen = true
		r.state.SnapshotID = NewSnapshotID()
		r.state.Version++
		m.touch(r)
	}
	entries, err := r.parse(rolloutID)
	if err != nil {
		return nil, err
	}
	return &Snapshot{
		RolloutID:  rolloutID,
		Entries:    entries,
		Incomplete: r.state.Incomplete || len(DanglingIntents(r.intents, entries)) > 0,
		SnapshotID: r.state.SnapshotID,
		Version:    r.state.Version,
	}, nil
}

// Drop retires the rollout if snapshotID and version match; see FileStore.Drop.
func (m *MemoryStore) Drop(ctx context.Context, rolloutID, snapshotID string, version int) (bool, error) {
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return false, err
	}
	defer m.unlock(rolloutID, r)
	if r.state.Retired || !r.state.Frozen || r.state.SnapshotID != snapshotID || r.state.Version != version {
		return false, nil
	}
	r.lines, r.intents, r.lost = nil, nil, nil
	m.newGeneration(r)
	r.state.IndexedSize = 0
	r.state.EntryDigests = map[string]string{}
	r.state.Retired = true
	m.touch(r)
	return true, nil
}

// Delete forgets the rollout entirely; the id starts over from version 0.
func (m *MemoryStore) Delete(ctx context.Context, rolloutID string) error {
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return err
	}
	defer m.unlock(rolloutID, r)
	r.state, r.hasState = newState(), false
	r.lines, r.intents, r.lost = nil, nil, nil
	m.newGeneration(r)
	return nil
}

// SweepRetired forgets retired rollouts whose state last changed longer ago
// than olderThan.
func (m *MemoryStore) SweepRetired(ctx context.Context, olderThan time.Duration) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cutoff := m.now().Add(-olderThan)
	n := 0
	for id, r := range m.snapshot() {
		r.mu.Lock()
		if r.hasState && r.state.Retired && !r.stateTime.After(cutoff) {
			m.mu.Lock()
			if m.rollouts[id] == r {
				delete(m.rollouts, id)
				n++
			}
			m.mu.Unlock()
		}
		r.mu.Unlock()
	}
	return n, nil
}

// snapshot copies the rollout map so per-rollout locks can be taken without
// holding m.mu (the lock order is rollout, then map).
func (m *MemoryStore) snapshot() map[string]*memRollout {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*memRollout, len(m.rollouts))
	for id, r := range m.rollouts {
		out[id] = r
	}
	return out
}

// ReadEntries returns the committed entries in put order.
func (m *MemoryStore) ReadEntries(ctx context.Context, rolloutID string) ([]*record.Entry, error) {
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return nil, err
	}
	defer m.unlock(rolloutID, r)
	return r.parse(rolloutID)
}

// IsIncomplete reports the incomplete flag (not dangling intents).
func (m *MemoryStore) IsIncomplete(ctx context.Context, rolloutID string) (bool, error) {
	st, err := m.State(ctx, rolloutID)
	return st.Incomplete, err
}

// State returns a copy of the rollout's state object.
func (m *MemoryStore) State(ctx context.Context, rolloutID string) (State, error) {
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return State{}, err
	}
	defer m.unlock(rolloutID, r)
	return r.state.Clone(), nil
}

// Rollouts lists the ids that hold records, state or intents, sorted.
func (m *MemoryStore) Rollouts(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ids []string
	for id, r := range m.snapshot() {
		r.mu.Lock()
		if r.hasState || len(r.lines) > 0 || len(r.intents) > 0 || len(r.lost) > 0 {
			ids = append(ids, id)
		}
		r.mu.Unlock()
	}
	slices.Sort(ids)
	return ids, nil
}

// Close is a no-op; the data stays available to other users of the store.
func (m *MemoryStore) Close() error { return nil }

var (
	_ Sink   = (*MemoryStore)(nil)
	_ Source = (*MemoryStore)(nil)
	_ Reader = (*MemoryStore)(nil)
)
