package store

// TrackedRollouts exposes, to this package's specs only, how many rollouts
// the memory store holds an entry for, so a spec can prove that ids it no
// longer has anything for are forgotten.
func (m *MemoryStore) TrackedRollouts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rollouts)
}

// WithTailChunk makes reconciliation read the JSONL tail n bytes at a time,
// so specs can put chunk boundaries anywhere.
func WithTailChunk(n int) FileOption { return func(s *FileStore) { s.tailChunk = n } }

// Slots reports how many rollouts the file store holds in-process state for.
func (s *FileStore) Slots() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.slots)
}
