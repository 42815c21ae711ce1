package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
// first repeated call id and reports it.
func (s *ReadOnlyStore) scanEntries(id string, st State, withDigests bool) (entries []*record.Entry, recovered int, repeated bool, err error) {
	f, err := openRegular(s.file(id, suffixJSONL), os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return []*record.Entry{}, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("store: read %s: %w", id, err)
	}
	defer f.Close()
	var parser record.LineParser
	var precheck record.DigestPrecheck
	defer precheck.Wait()
	entries = []*record.Entry{}
	digests := map[string]string{}
	lines := newLineReader(f)
	for {
		line, start, unterminated, err := lines.next()
		if errors.Is(err, io.EOF) {
			return entries, recovered, false, nil
		}
		if err != nil {
			return nil, 0, false, fmt.Errorf("store: read %s: %w", id, err)
		}
		payload := bytes.TrimSpace(line)
		if len(payload) == 0 {
			continue
		}
		e, err := parser.Parse(payload)
		if err != nil {
			if unterminated && !json.Valid(payload) {
				return entries, recovered, false, nil
			}
			return nil, 0, false, fmt.Errorf("%w: %s: line at byte %d: %w", ErrCorrupt, id, start, err)
		}
		digest := ""
		if withDigests {
			digest = record.EntryDigest(payload)
		}
		if prev, ok := digests[e.ModelCallID]; ok {
			if !withDigests {
				return nil, 0, true, nil
			}
			if prev != digest {
				return nil, 0, false, &DurableConflictError{RolloutID: id, CallID: e.ModelCallID}
			}
		}
		entries = append(entries, e)
		precheck.Add(e)
		digests[e.ModelCallID] = digest
		if start >= st.IndexedSize {
			recovered++
		}
	}
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
