package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/capbench/capbench/capture/record"
)

// ErrReadOnly is returned by the write side of a ReadOnlyStore.
var ErrReadOnly = errors.New("store opened read-only")

// ErrNoSuchRollout reports a rollout id with no file in the directory.
var ErrNoSuchRollout = errors.New("no such rollout in the capture directory")

// ReadOnlyStore reads a file-store directory (Go's or NeMo Gym's) without
// changing anything in it: no directory is created, no lock file, no state
// file, no freeze, no repair of a torn tail. Inspection tools use it so that
// looking at a live capture directory never disturbs the harness writing it
// (see docs/store.md, "Reading without changing anything").
//
// A read takes the rollout's flock shared when its lock file exists, so it
// never sees a half-done freeze or drop; writers create the lock file before
// their first write, so when it is absent there is nothing to wait for and
// an unterminated last line (a write still in flight) is skipped.
type ReadOnlyStore struct {
	dir string
}

// OpenReadOnly opens an existing store directory for reading. A missing
// path or one that is not a directory is an error.
func OpenReadOnly(dir string) (*ReadOnlyStore, error) {
	if dir == "" {
		return nil, errors.New("store: directory must not be empty")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("store: capture directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("store: %s is not a directory", dir)
	}
	return &ReadOnlyStore{dir: dir}, nil
}

// Dir is the store directory.
func (s *ReadOnlyStore) Dir() string { return s.dir }

func (s *ReadOnlyStore) file(id, suffix string) string { return filepath.Join(s.dir, id+suffix) }

// Rollouts lists the rollout ids that have records, a state, intents or an
// incomplete marker in the directory, sorted.
func (s *ReadOnlyStore) Rollouts(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("store: list directory: %w", err)
	}
	seen := map[string]bool{}
	var ids []string
	for _, de := range entries {
		for _, suf := range []string{suffixJSONL, suffixState, suffixIntents, suffixIncomplete} {
			id, ok := strings.CutSuffix(de.Name(), suf)
			if ok && ValidateRolloutID(id) == nil && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// View is what a read-only look at one rollout found.
type View struct {
	// State is the state file as stored (the empty state when absent).
	State State
	// Snapshot holds the committed entries and whether the capture is
	// incomplete, as a freeze would report them; its SnapshotID is the
	// stored one ("" when the rollout was never frozen).
	Snapshot *Snapshot
}

// Look reads one rollout under a shared lock. An id without any file is
// ErrNoSuchRollout; a retired rollout returns its state and a nil snapshot.
func (s *ReadOnlyStore) Look(ctx context.Context, rolloutID string) (*View, error) {
	if err := ValidateRolloutID(rolloutID); err != nil {
		return nil, err
	}
	if err := s.exists(rolloutID); err != nil {
		return nil, err
	}
	unlock, err := s.sharedLock(ctx, rolloutID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st := newState()
	if data, err := readRegular(s.file(rolloutID, suffixState)); err == nil {
		if st, err = ParseState(data); err != nil {
			return nil, fmt.Errorf("store: state of %s: %w", rolloutID, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store: read state of %s: %w", rolloutID, err)
	}
	v := &View{State: st}
	if st.Retired {
		return v, nil
	}
	entries, recovered, err := s.readEntries(rolloutID, st)
	if err != nil {
		return nil, err
	}
	open, err := s.openIntents(rolloutID, entries)
	if err != nil {
		return nil, err
	}
	version := st.Version
	if !st.Legacy {
		version += recovered
	}
	v.Snapshot = &Snapshot{
		RolloutID:  rolloutID,
		Entries:    entries,
		Incomplete: st.Incomplete || open > 0,
		SnapshotID: st.SnapshotID,
		Version:    version,
	}
	return v, nil
}

func (s *ReadOnlyStore) exists(id string) error {
	for _, suf := range []string{suffixJSONL, suffixState, suffixIntents, suffixIncomplete} {
		if _, err := os.Stat(s.file(id, suf)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: %q in %s", ErrNoSuchRollout, id, s.dir)
}

// sharedLock takes the rollout's flock shared when its lock file exists,
// opening it read-only so nothing is created.
func (s *ReadOnlyStore) sharedLock(ctx context.Context, id string) (func(), error) {
	f, err := openRegular(s.file(id, suffixLock), os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: open lock of %s: %w", id, err)
	}
	if err := flockWait(ctx, f, unix.LOCK_SH); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		_ = f.Close()
	}, nil
}

// readEntries parses the JSONL as a freeze reads it (entries may share token
// memory, so treat them as read-only), skipping an unterminated torn last
// line (never acknowledged), and reports a call id stored twice with different
// payloads as Gym's store does. recovered counts lines past the state's
// indexed size (what a freeze would add to the version).
//
// Lines are only hashed when a call id repeats: the first pass reads without
// digests and, at the first repeat, the file is read again with them.
func (s *ReadOnlyStore) readEntries(id string, st State) ([]*record.Entry, int, error) {
	entries, recovered, repeated, err := s.scanEntries(id, st, false)
	if err == nil && repeated {
		entries, recovered, _, err = s.scanEntries(id, st, true)
	}
	return entries, recovered, err
}

// scanEntries is one pass of readEntries. Without digests it stops at the
// first repeated call id and reports it. A large file is read as two halves
// at once, cut after the newline nearest its middle (as a freeze reads it):
// the lines are the same lines, and the first half's error, the earlier
// line's, is the one reported.
func (s *ReadOnlyStore) scanEntries(id string, st State, withDigests bool) ([]*record.Entry, int, bool, error) {
	f, err := openRegular(s.file(id, suffixJSONL), os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return []*record.Entry{}, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("store: read %s: %w", id, err)
	}
	defer f.Close()
	cut, err := halfwayLine(f)
	if err != nil {
		return nil, 0, false, fmt.Errorf("store: read %s: %w", id, err)
	}
	if cut == 0 {
		h := scanHalf(id, f, 0, st, withDigests)
		return h.entries, h.recovered, h.repeated, h.err
	}
	var second scanned
	done := make(chan struct{})
	go func() {
		defer close(done)
		second = scanHalf(id, io.NewSectionReader(f, cut, math.MaxInt64-cut), cut, st, withDigests)
	}()
	first := scanHalf(id, io.NewSectionReader(f, 0, cut), 0, st, withDigests)
	<-done
	return joinHalves(id, first, second, withDigests)
}

// halfwayLine returns the offset just after the first newline at or past
// the middle of a file large enough to read in two halves, or 0.
func halfwayLine(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if size < parallelParseBytes || runtime.GOMAXPROCS(0) < 2 {
		return 0, nil
	}
	lines := newLineReader(io.NewSectionReader(f, size/2, size-size/2))
	lines.chunk = 64 << 10
	_, _, unterminated, err := lines.next()
	if errors.Is(err, io.EOF) || unterminated {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	cut := size/2 + lines.off
	if cut >= size {
		return 0, nil
	}
	return cut, nil
}

// scanned is what scanning one stretch of lines found.
type scanned struct {
	entries   []*record.Entry
	digests   map[string]string // call id -> entry digest ("" without digests)
	recovered int
	repeated  bool
	err       error
}

// scanHalf parses the lines r yields, whose first byte is at offset base.
func scanHalf(id string, r io.Reader, base int64, st State, withDigests bool) scanned {
	var parser record.LineParser
	out := scanned{entries: []*record.Entry{}, digests: map[string]string{}}
	lines := newLineReader(r)
	for {
		line, start, unterminated, err := lines.next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			return scanned{err: fmt.Errorf("store: read %s: %w", id, err)}
		}
		start += base
		payload := bytes.TrimSpace(line)
		if len(payload) == 0 {
			continue
		}
		e, err := parser.Parse(payload)
		if err != nil {
			if unterminated && !json.Valid(payload) {
				return out
			}
			return scanned{err: fmt.Errorf("%w: %s: line at byte %d: %w", ErrCorrupt, id, start, err)}
		}
		digest := ""
		if withDigests {
			digest = record.EntryDigest(payload)
		}
		if prev, ok := out.digests[e.ModelCallID]; ok {
			if !withDigests {
				return scanned{repeated: true}
			}
			if prev != digest {
				return scanned{err: &DurableConflictError{RolloutID: id, CallID: e.ModelCallID}}
			}
		}
		out.entries = append(out.entries, e)
		out.digests[e.ModelCallID] = digest
		if start >= st.IndexedSize {
			out.recovered++
		}
	}
}

// joinHalves is the result of one pass over both halves: a call id in both
// is a repeat (or, with digests, a conflict when its payloads differ).
func joinHalves(id string, first, second scanned, withDigests bool) ([]*record.Entry, int, bool, error) {
	for _, h := range []scanned{first, second} {
		if h.err != nil || h.repeated {
			return nil, 0, h.repeated, h.err
		}
	}
	for _, e := range second.entries {
		prev, ok := first.digests[e.ModelCallID]
		if !ok {
			continue
		}
		if !withDigests {
			return nil, 0, true, nil
		}
		if prev != second.digests[e.ModelCallID] {
			return nil, 0, false, &DurableConflictError{RolloutID: id, CallID: e.ModelCallID}
		}
	}
	return append(first.entries, second.entries...), first.recovered + second.recovered, false, nil
}

// openIntents counts intents with neither an entry nor a cancel line.
func (s *ReadOnlyStore) openIntents(id string, entries []*record.Entry) (int, error) {
	data, err := readRegular(s.file(id, suffixIntents))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: read intents of %s: %w", id, err)
	}
	return len(DanglingIntents(strings.Split(string(data), "\n"), entries)), nil
}

// Freeze returns what a freeze would return, without freezing: the
// consumer's build code runs unchanged on a read-only store. A retired
// rollout is ErrRetired.
func (s *ReadOnlyStore) Freeze(ctx context.Context, rolloutID string) (*Snapshot, error) {
	v, err := s.Look(ctx, rolloutID)
	if err != nil {
		return nil, err
	}
	if v.Snapshot == nil {
		return nil, fmt.Errorf("store: rollout %s: %w", rolloutID, ErrRetired)
	}
	return v.Snapshot, nil
}

// Drop never retires anything.
func (s *ReadOnlyStore) Drop(context.Context, string, string, int) (bool, error) {
	return false, ErrReadOnly
}

// Close releases nothing; a ReadOnlyStore holds no resources between calls.
func (s *ReadOnlyStore) Close() error { return nil }

var _ Source = (*ReadOnlyStore)(nil)
