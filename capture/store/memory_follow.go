package store

import (
	"context"
	"fmt"

	"github.com/capbench/capbench/capture/record"
)

// The memory store's cursors count lines, not bytes, and name the
// generation of the rollout's lines as their "file": a Drop or Delete starts
// a new generation, as a replaced file has a new inode.

// ReadTail returns the entries after from; see FileStore.ReadTail.
func (m *MemoryStore) ReadTail(ctx context.Context, rolloutID string, from Cursor, known KnownLine) (Tail, error) {
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return Tail{}, err
	}
	defer m.unlock(rolloutID, r)
	file := fileID{ino: r.gen}
	out := Tail{Entries: []*record.Entry{}}
	start := from.offset
	if from.file != file || start > int64(len(r.lines)) {
		out.Reset = from != Cursor{}
		start = 0
	}
	for i := start; i < int64(len(r.lines)); i++ {
		e, err := knownOrParse(known, record.ParseLine, r.lines[i])
		if err != nil {
			return Tail{}, fmt.Errorf("%w: %s: line %d: %w", ErrCorrupt, rolloutID, i+1, err)
		}
		out.Entries = append(out.Entries, e)
		out.Refs = append(out.Refs, LineRef{offset: i, length: 1, file: file})
	}
	out.Next = Cursor{offset: int64(len(r.lines)), file: file}
	return out, nil
}

// ReadLine reads the one entry at ref; see FileStore.ReadLine.
func (m *MemoryStore) ReadLine(ctx context.Context, rolloutID string, ref LineRef) (*record.Entry, error) {
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return nil, err
	}
	defer m.unlock(rolloutID, r)
	if err := m.checkLine(rolloutID, r, ref); err != nil {
		return nil, err
	}
	e, err := record.ParseLine(r.lines[ref.offset])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: line %d: %w", ErrCorrupt, rolloutID, ref.offset+1, err)
	}
	return e, nil
}

// CheckLine reports whether ref still names a line; see FileStore.CheckLine.
func (m *MemoryStore) CheckLine(ctx context.Context, rolloutID string, ref LineRef) error {
	r, err := m.get(ctx, rolloutID)
	if err != nil {
		return err
	}
	defer m.unlock(rolloutID, r)
	return m.checkLine(rolloutID, r, ref)
}

func (m *MemoryStore) checkLine(rolloutID string, r *memRollout, ref LineRef) error {
	if (fileID{ino: r.gen}) != ref.file || ref.offset >= int64(len(r.lines)) {
		return fmt.Errorf("store: %s: %w", rolloutID, ErrStaleRef)
	}
	return nil
}

// newGeneration gives r's lines a generation no cursor has seen.
func (m *MemoryStore) newGeneration(r *memRollout) {
	m.mu.Lock()
	m.gens++
	r.gen = m.gens
	m.mu.Unlock()
}

var _ TailReader = (*MemoryStore)(nil)
