package store

import (
	"io"
	"os"
)

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

// LineRead is one line a lineReader returned, copied when it was returned,
// with whether the line before it was still intact at that point.
type LineRead struct {
	Line         string
	Start        int64
	Unterminated bool
	PrevIntact   bool
}

// ReadLinesChunked runs a lineReader asking for chunk bytes at a time over
// r, checking after every call that the line returned before is unchanged.
func ReadLinesChunked(r io.Reader, chunk int) ([]LineRead, error) {
	lr := newLineReader(r)
	lr.chunk = chunk
	var out []LineRead
	var prev []byte
	var prevCopy string
	for {
		line, start, unterminated, err := lr.next()
		intact := prev == nil || string(prev) == prevCopy
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, LineRead{Line: string(line), Start: start, Unterminated: unterminated, PrevIntact: intact})
		prev, prevCopy = line, string(line)
	}
}

// GroupSync is a group sync whose syncs are functions of the spec's.
type GroupSync struct{ g *groupSync }

// NewGroupSync returns a group sync that runs syncAll for a group of
// writers and syncOne for a writer alone, grouping writers from groupFrom
// syncing at once.
func NewGroupSync(syncAll, syncOne func(*os.File) error, groupFrom int) *GroupSync {
	g := newGroupSync(nil)
	g.syncAll, g.syncOne, g.groupFrom = syncAll, syncOne, groupFrom
	return &GroupSync{g}
}

// Wait is what an append does after its write.
func (g *GroupSync) Wait(f *os.File) error {
	_, err := g.g.wait(f)
	return err
}

// WaitWhole is Wait that also says whether the sync was of the whole file
// system.
func (g *GroupSync) WaitWhole(f *os.File) (bool, error) { return g.g.wait(f) }

// WithCreateByName makes the store create every missing file by name, never
// by linking an unnamed inode: the peer of the file-creation benchmark and
// specs.
func WithCreateByName() FileOption { return func(s *FileStore) { s.creator.byName = true } }

// WithDirSync makes the store's directory sync after linked creations
// call fn first (a spec counts them, or makes one fail).
func WithDirSync(fn func() error) FileOption {
	return func(s *FileStore) {
		own := s.creator.syncDir
		s.creator.syncDir = func() error {
			if err := fn(); err != nil {
				return err
			}
			return own()
		}
	}
}

// HoldCreation counts one file creation as running in the store until the
// returned func is called, so the store's own creations meanwhile link
// unnamed inodes, as they do while other rollouts are being created.
func HoldCreation(s *FileStore) (release func()) {
	s.creator.inFlight.Add(1)
	return func() { s.creator.inFlight.Add(-1) }
}

// LinkNew is the store's linked creation of path alone: ok is false when it
// made nothing.
func LinkNew(s *FileStore, path string) (f *os.File, ok bool) {
	return s.creator.link(path, os.O_WRONLY|os.O_APPEND)
}

// EntriesDurable is what a sync that has just finished does for the files
// linked before it (linked of them): whole says it synced the whole file
// system.
func EntriesDurable(s *FileStore, linked uint64, whole bool) error {
	return s.entriesDurable(linked, whole)
}

// LinkedFiles is how many files the store has created by linking an
// unnamed inode, and the count its directory has been synced up to.
func (s *FileStore) LinkedFiles() (linked, dirSynced uint64) {
	return s.creator.linked.Load(), s.creator.synced.Load()
}

// Waiting is how many writers the next sync will cover so far.
func (g *GroupSync) Waiting() int {
	g.g.mu.Lock()
	defer g.g.mu.Unlock()
	return g.g.next.writers
}

// KernelAtLeast exposes the kernel release comparison to specs.
func KernelAtLeast(release string, major, minor int) bool {
	return kernelAtLeast(release, major, minor)
}

// WithSyncFuncs makes the store's group sync run syncAll for a group of
// writers and syncOne for a writer alone, so a spec can see which files are
// synced and make a sync fail.
func WithSyncFuncs(syncAll, syncOne func(*os.File) error) FileOption {
	return func(s *FileStore) {
		if s.group == nil {
			s.group = newGroupSync(&s.syncs)
		}
		s.group.syncAll, s.group.syncOne = syncAll, syncOne
	}
}
