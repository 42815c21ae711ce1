package store

import (
	"bytes"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capbench/capbench/capture/record"
)

// File name suffixes of one rollout (docs/store.md#files-per-rollout).
const (
	suffixJSONL      = ".tokens.jsonl"
	suffixState      = ".tokens.state.json"
	suffixIntents    = ".tokens.intents"
	suffixIncomplete = ".tokens.incomplete"
	suffixLock       = ".tokens.lock"
	stateTempPattern = ".tokens-state-*"
)

// FileStore is the directory-backed store whose files are interchangeable
// with NeMo Gym's TokenCaptureStore: same names, same canonical lines, same
// state object and version arithmetic, same flock(2) lock, so Go and Python
// processes can share one directory.
//
// Within a process every operation on a rollout also holds a per-rollout
// mutex (so goroutines do not churn lock descriptors), and the last state
// seen is cached keyed by the identity (inode, size, mtime, ctime) of the
// state and JSONL files: while no other process touches them, a put neither
// re-reads the state nor re-parses earlier lines.
type FileStore struct {
	dir           string
	stateEveryPut bool
	tailChunk     int // bytes reconciliation reads at once; 0 means tailChunkBytes
	log           *slog.Logger

	mu    sync.Mutex
	slots map[string]*slot
	// idle lists the slots no operation holds, most recently used first
	// (guarded by mu). At most maxIdle are kept, so memory and open
	// descriptors stay flat however many rollouts the store has written.
	idle      list.List
	maxIdle   int
	idleFlush time.Duration
	lastSweep time.Time // guarded by mu; last scan for slots idle past idleFlush

	writeFailures, diskFull atomic.Uint64

	group   *groupSync // nil under WithPerFileSync
	syncs   syncCounters
	creator creator

	readBuf []byte // guarded by mu; see takeReadBuffer
}

// FileOption configures a FileStore.
type FileOption func(*FileStore)

// WithStateWriteEveryPut makes every put rewrite the state file as Gym does,
// so the directory is byte-for-byte what Gym would leave after each step.
//
// Without it (the default) a put that needs no reconciliation leaves the
// state file as it was: the JSONL is fsynced before put returns, and the
// state is only an index that any reader rebuilds from the JSONL tail with
// the same version arithmetic (+1 per recovered line, docs/store.md#crash-recovery), so Gym
// and other Go processes see the same versions either way. Lifecycle
// transitions (conflict, mark, freeze, drop) always write the state durably,
// and Close writes any state still pending.
func WithStateWriteEveryPut() FileOption {
	return func(s *FileStore) { s.stateEveryPut = true }
}

// WithPerFileSync makes each append durable with its own file's
// fdatasync(2), as Gym's store does, instead of joining a group sync of the
// file system (docs/store.md#group-commit). A group sync also writes back
// whatever else is dirty on that file system, so on a disk shared with heavy
// writers this can be the faster choice. Kernels before Linux 5.8, whose
// syncfs does not report write-back errors, always sync per file.
func WithPerFileSync() FileOption {
	return func(s *FileStore) { s.group = nil }
}

// WithLogger sets where the store's warnings go (default slog.Default()).
func WithLogger(l *slog.Logger) FileOption {
	return func(s *FileStore) { s.log = l }
}

// WithMaxIdleRollouts bounds how many rollouts no operation is using the
// store keeps state and descriptors for (default 256). The least recently
// used beyond it are forgotten: a pending (lazy) state is not written, which
// loses nothing, because the JSONL is the record and any reader rebuilds the
// index from its tail (see docs/store.md).
func WithMaxIdleRollouts(n int) FileOption {
	return func(s *FileStore) { s.maxIdle = n }
}

// WithIdleFlush sets how long a rollout goes unused before its pending state
// is written and its slot forgotten (default 30 s).
func WithIdleFlush(d time.Duration) FileOption {
	return func(s *FileStore) { s.idleFlush = d }
}

const (
	defaultMaxIdle   = 256
	defaultIdleFlush = 30 * time.Second
)

// slot is the in-process side of one rollout: its mutex, cached state and
// open descriptors.
type slot struct {
	id    string
	mu    sync.RWMutex
	refs  int // guarded by FileStore.mu
	cache *stateCache
	files openFiles // used and changed only under mu held exclusively

	elem     *list.Element // in FileStore.idle while refs == 0; guarded by FileStore.mu
	lastUsed time.Time     // guarded by FileStore.mu
}

type stateCache struct {
	st    *State
	key   filesKey
	dirty bool // st is ahead of the state file (lazy put)
}

// statKey identifies one file's content as far as this store can tell
// without reading it. Appends change the size; state rewrites are renames and
// change the inode and ctime.
type statKey struct {
	exists       bool
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

type filesKey struct {
	state, jsonl statKey
}

// NewFileStore opens (creating if missing) a store directory.
func NewFileStore(dir string, opts ...FileOption) (*FileStore, error) {
	if dir == "" {
		return nil, errors.New("store: directory must not be empty")
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("store: create directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("store: directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("store: %s is not a directory", dir)
	}
	// access(2), not a probe file: creating and removing a file costs a
	// cold `capbench verdict` more than reading the rollout's first lines.
	// It also reports a read-only mount (EROFS).
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return nil, fmt.Errorf("store: directory %s is not writable: %w", dir, err)
	}
	s := &FileStore{dir: dir, slots: map[string]*slot{}, maxIdle: defaultMaxIdle, idleFlush: defaultIdleFlush}
	s.creator.syncDir = s.syncDir
	if syncfsReportsErrors() {
		s.group = newGroupSync(&s.syncs)
	}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.warnIfShared(fi)
	s.removeStaleTemps()
	return s, nil
}

// Dir is the store directory.
func (s *FileStore) Dir() string { return s.dir }

func (s *FileStore) path(id, suffix string) string {
	return filepath.Join(s.dir, id+suffix)
}

// held is one locked rollout: the in-process mutex and the flock.
type held struct {
	s         *FileStore
	id        string
	sl        *slot
	lk        *appender
	exclusive bool
}

func (s *FileStore) lock(ctx context.Context, id string, exclusive bool) (*held, error) {
	if err := ValidateRolloutID(id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	sl := s.slots[id]
	if sl == nil {
		sl = &slot{id: id}
		s.slots[id] = sl
	}
	if sl.elem != nil {
		s.idle.Remove(sl.elem)
		sl.elem = nil
	}
	sl.refs++
	s.mu.Unlock()
	// An exclusive holder locks through the slot's kept descriptor; shared
	// holders run at once, so each needs a descriptor (and a flock) of its
	// own.
	var cached *appender
	if exclusive {
		sl.mu.Lock()
		cached, sl.files.lock = sl.files.lock, nil
	} else {
		sl.mu.RLock()
	}
	lk, err := s.acquireFileLock(ctx, s.path(id, suffixLock), exclusive, cached)
	if err != nil {
		h := &held{s: s, id: id, sl: sl, exclusive: exclusive}
		h.unlock()
		return nil, err
	}
	return &held{s: s, id: id, sl: sl, lk: lk, exclusive: exclusive}, nil
}

// unlock releases the flock and the mutex, and forgets the slot when no one
// else uses it and its cache is worth nothing (settled or absent), so a long
// run does not keep every finished rollout's index in memory.
func (h *held) unlock() {
	if h.lk != nil {
		release(h.lk, h.exclusive)
		if h.exclusive {
			h.sl.files.lock = h.lk
		}
	}
	c := h.sl.cache
	evict := c == nil || (!c.dirty && (c.st.Frozen || c.st.Retired))
	s := h.s
	s.mu.Lock()
	h.sl.refs--
	var victims []*slot
	if h.sl.refs == 0 && s.slots[h.id] == h.sl {
		if evict && h.exclusive {
			delete(s.slots, h.id)
			victims = append(victims, h.sl)
		} else {
			h.sl.lastUsed = time.Now()
			h.sl.elem = s.idle.PushFront(h.sl)
			victims = s.trimIdle(victims)
		}
	}
	idleScan := s.idleFlush > 0 && time.Since(s.lastSweep) >= min(s.idleFlush, time.Second)
	if idleScan {
		s.lastSweep = time.Now()
	}
	s.mu.Unlock()
	if h.exclusive {
		h.sl.mu.Unlock()
	} else {
		h.sl.mu.RUnlock()
	}
	// Victims are unreachable (unmapped, no holder): nobody else can
	// touch their descriptors.
	for _, v := range victims {
		v.files.close()
	}
	if idleScan {
		s.flushIdle()
	}
}

// trimIdle forgets the least recently used idle slots beyond maxIdle.
// Caller holds s.mu.
func (s *FileStore) trimIdle(victims []*slot) []*slot {
	for s.idle.Len() > max(s.maxIdle, 0) {
		v := s.idle.Remove(s.idle.Back()).(*slot)
		v.elem = nil
		s.unmap(v)
		victims = append(victims, v)
	}
	return victims
}

// unmap removes an idle slot from the map. Caller holds s.mu.
func (s *FileStore) unmap(v *slot) {
	if s.slots[v.id] == v {
		delete(s.slots, v.id)
	}
}

// flushIdle writes the pending state of rollouts unused for idleFlush and
// forgets them, so a rollout that went quiet leaves a directory that needs
// no reconciliation, and Close has little left to do.
func (s *FileStore) flushIdle() {
	cutoff := time.Now().Add(-s.idleFlush)
	var victims []*slot
	s.mu.Lock()
	for e := s.idle.Back(); e != nil; {
		v := e.Value.(*slot)
		if v.lastUsed.After(cutoff) {
			break
		}
		prev := e.Prev()
		s.idle.Remove(e)
		v.elem = nil
		s.unmap(v)
		victims = append(victims, v)
		e = prev
	}
	s.mu.Unlock()
	for _, v := range victims {
		if err := s.writePending(v); err != nil {
			s.log.Warn("writing an idle rollout's state failed; readers rebuild it from the records", "rollout_id", v.id, "err", err)
		}
		v.files.close()
	}
}

// writePending writes an unreachable slot's pending state under the
// rollout's flock, if the files are still as the slot left them.
func (s *FileStore) writePending(v *slot) error {
	c := v.cache
	if c == nil || !c.dirty {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	cached := v.files.lock
	v.files.lock = nil
	lk, err := s.acquireFileLock(ctx, s.path(v.id, suffixLock), true, cached)
	if err != nil {
		return err
	}
	defer release(lk, false)
	key, err := s.currentKey(v.id)
	if err != nil || key != c.key {
		return err
	}
	return s.writeState(v.id, c.st, false)
}

// statFile is the key of path itself (a planted link is not followed: its
// key never matches a descriptor the store opened).
func statFile(path string) (statKey, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return statKey{}, nil
	}
	if err != nil {
		return statKey{}, fmt.Errorf("store: stat %s: %w", filepath.Base(path), err)
	}
	return keyOf(fi), nil
}

func keyOf(fi os.FileInfo) statKey {
	k := statKey{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.dev, k.ino = uint64(st.Dev), st.Ino
		k.ctime = st.Ctim.Sec*1e9 + st.Ctim.Nsec
	}
	return k
}

func (s *FileStore) currentKey(id string) (filesKey, error) {
	st, err := statFile(s.path(id, suffixState))
	if err != nil {
		return filesKey{}, err
	}
	jl, err := statFile(s.path(id, suffixJSONL))
	if err != nil {
		return filesKey{}, err
	}
	return filesKey{state: st, jsonl: jl}, nil
}

// load returns the rollout's state: the cached one when the files are as this
// process left them, else the state file (or the empty state). The returned
// pointer is the cache's own when cached; callers that fail must call
// h.forget so a half-applied change is never reused.
func (h *held) load() (*State, filesKey, error) {
	key, err := h.s.currentKey(h.id)
	if err != nil {
		return nil, key, err
	}
	if c := h.sl.cache; c != nil && c.key == key {
		return c.st, key, nil
	}
	st, err := h.s.readStateFile(h.id)
	if err != nil {
		return nil, key, err
	}
	return &st, key, nil
}

func (s *FileStore) readStateFile(id string) (State, error) {
	data, err := readRegular(s.path(id, suffixState))
	if errors.Is(err, os.ErrNotExist) {
		return newState(), nil
	}
	if err != nil {
		return State{}, fmt.Errorf("store: read state of %s: %w", id, err)
	}
	st, err := ParseState(data)
	if err != nil {
		return State{}, fmt.Errorf("store: state of %s: %w", id, err)
	}
	return st, nil
}

// remember caches st as the state matching the files as they are now.
func (h *held) remember(st *State, dirty bool) {
	key, err := h.s.currentKey(h.id)
	if err != nil {
		h.sl.cache = nil
		return
	}
	h.sl.cache = &stateCache{st: st, key: key, dirty: dirty}
}

func (h *held) forget() { h.sl.cache = nil }

// lockLoaded takes the rollout's exclusive lock and loads its state. On a
// load error it forgets the cached state and releases the lock; on success
// the caller unlocks.
func (s *FileStore) lockLoaded(ctx context.Context, id string) (*held, *State, filesKey, error) {
	h, err := s.lock(ctx, id, true)
	if err != nil {
		return nil, nil, filesKey{}, err
	}
	st, key, err := h.load()
	if err != nil {
		h.forget()
		h.unlock()
		return nil, nil, filesKey{}, err
	}
	return h, st, key, nil
}

// writeState replaces the state file through a temp file and rename. A
// durable write also fsyncs the temp file and then the directory.
func (s *FileStore) writeState(id string, st *State, durable bool) error {
	b, err := st.MarshalCanonical()
	if err != nil {
		return err
	}
	b = append(b, '\n')
	f, err := os.CreateTemp(s.dir, stateTempPattern)
	if err != nil {
		return s.failed(&WriteError{Path: s.dir, Op: "create a state temp file in", Err: err})
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return s.failed(&WriteError{Path: tmp, Op: "write state to", Err: err})
	}
	if durable {
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return s.failed(&WriteError{Path: tmp, Op: "fsync state", Err: err})
		}
	}
	if err := f.Close(); err != nil {
		return s.failed(&WriteError{Path: tmp, Op: "close state", Err: err})
	}
	if err := os.Rename(tmp, s.path(id, suffixState)); err != nil {
		return s.failed(&WriteError{Path: s.path(id, suffixState), Op: "rename state to", Err: err})
	}
	ok = true
	if durable {
		return s.syncDir()
	}
	return nil
}

func (s *FileStore) syncDir() error {
	d, err := os.Open(s.dir)
	if err != nil {
		return fmt.Errorf("store: open directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("store: fsync directory: %w", err)
	}
	return nil
}

// appendLine appends data to path through a descriptor of its own and
// fsyncs it (for the rare appends that need no kept descriptor).
func (s *FileStore) appendLine(path string, data []byte) (statKey, error) {
	cur, err := statFile(path)
	if err != nil {
		return statKey{}, err
	}
	var a *appender
	defer func() {
		if a != nil {
			_ = a.f.Close()
		}
	}()
	return s.appendTo(&a, path, cur, data)
}

// trimLine strips what Python's bytes.strip strips (ASCII whitespace only).
func trimLine(b []byte) []byte {
	return bytes.Trim(b, " \t\n\r\v\f")
}

// nextLine splits buf at the first newline.
func nextLine(buf []byte) (line, rest []byte) {
	if i := bytes.IndexByte(buf, '\n'); i >= 0 {
		return buf[:i], buf[i+1:]
	}
	return buf, nil
}

// reconciled is what one reconciliation read: the entries of the tail it
// indexed, which start at byte from of the JSONL, in file order.
type reconciled struct {
	from    int64
	entries []*record.Entry
}

// reconcile brings st's index up to the JSONL tail (docs/store.md#crash-recovery). When
// repair is false nothing is written (used by State); otherwise a torn tail
// is truncated and a conflicting durable payload is recorded durably. It
// also returns the entries of the tail it read (nil when it read nothing),
// so a freeze need not parse those lines again.
//
// Each line is scanned once: JSON validity is only asked about a line the
// record parser refused (the parser accepts nothing that is not JSON), to
// tell a torn or corrupt line from a record that does not validate.
func (s *FileStore) reconcile(id string, st *State, jsonlSize int64, repair bool) (bool, *reconciled, error) {
	if st.IndexedSize < 0 || st.IndexedSize > jsonlSize {
		return false, nil, fmt.Errorf("%w: %s: indexed_size %d outside the file (%d bytes)",
			ErrCorrupt, id, st.IndexedSize, jsonlSize)
	}
	if st.IndexedSize == jsonlSize && !st.Legacy {
		return false, nil, nil
	}
	path := s.path(id, suffixJSONL)
	read := &reconciled{from: st.IndexedSize}
	chunk := s.tailChunk
	if chunk <= 0 {
		chunk = tailChunkBytes
	}
	tr, err := openTail(path, st.IndexedSize, jsonlSize, chunk)
	if err != nil {
		return false, nil, err
	}
	defer tr.close()
	var parser record.LineParser
	newSize := jsonlSize
	var stop error // the parse failure that ends the tail, if any
	pending := map[string]string{}
	// The tail is read in chunks of whole lines, so a cold 21 MB rollout
	// never sits in memory whole; each chunk's digests are computed while it
	// is parsed. Conflicts are checked in file order over the lines before
	// the first failure, so the first problem in the file is the one
	// reported, as a single pass would.
	for done := false; !done && stop == nil; {
		lines, last, err := tr.next()
		if err != nil {
			return false, nil, err
		}
		done = last
		digests := hashLines(lines)
		parsed := 0
		for i, l := range lines {
			e, err := parser.Parse(l.payload)
			if err != nil && !json.Valid(l.payload) {
				follows := i+1 < len(lines)
				if !follows && !last {
					if follows, err = tr.restHasContent(); err != nil {
						return false, nil, err
					}
				}
				if follows {
					stop = fmt.Errorf("%w: %s: line at byte %d is not JSON and more content follows it",
						ErrCorrupt, id, l.start)
					break
				}
				// A torn tail: the write that produced it never returned, so
				// no caller was told it was stored.
				newSize = l.start
				done = true
				break
			}
			if err != nil {
				stop = fmt.Errorf("%w: %s: line at byte %d: %w", ErrCorrupt, id, l.start, err)
				break
			}
			read.entries = append(read.entries, e)
			parsed++
		}
		digs := digests()
		for i, e := range read.entries[len(read.entries)-parsed:] {
			digest := digs[i]
			existing, ok := pending[e.ModelCallID]
			if !ok {
				existing, ok = st.EntryDigests[e.ModelCallID]
			}
			if ok && existing != digest {
				if repair {
					st.Incomplete = true
					st.Version++
					if err := s.writeState(id, st, true); err != nil {
						return false, nil, err
					}
				}
				return false, nil, &DurableConflictError{RolloutID: id, CallID: e.ModelCallID}
			}
			pending[e.ModelCallID] = digest
		}
	}
	if stop != nil {
		return false, nil, stop
	}
	if newSize != jsonlSize && repair {
		if err := truncateSync(path, newSize); err != nil {
			return false, nil, err
		}
	}
	recovered := len(read.entries)
	for k, v := range pending {
		st.EntryDigests[k] = v
	}
	st.IndexedSize = newSize
	if recovered > 0 && !st.Legacy {
		st.Version += recovered
	}
	st.Legacy = false
	st.legacyRaw = nil
	return true, read, nil
}

// tailLine is one non-blank line of a JSONL tail: its payload (trimmed as
// Python's bytes.strip trims) and the file offset the line starts at.
type tailLine struct {
	payload []byte
	start   int64
}

// splitLines cuts a tail read from file offset base into its non-blank lines.
func splitLines(tail []byte, base int64) []tailLine {
	var out []tailLine
	for pos, rest := base, tail; len(rest) > 0; {
		line, next := nextLine(rest)
		start := pos
		pos += int64(len(rest) - len(next))
		rest = next
		if payload := trimLine(line); len(payload) > 0 {
			out = append(out, tailLine{payload: payload, start: start})
		}
	}
	return out
}

// tailChunkBytes is how much of a JSONL tail reconciliation reads at once
// (more when one line is longer).
const tailChunkBytes = 4 << 20

// tailReader reads the bytes [from, to) of a JSONL file as chunks of whole
// lines.
type tailReader struct {
	f        *os.File
	name     string
	pos, end int64 // next file offset to read; end of the tail
	buf      []byte
	base     int64 // file offset of buf[0]
	consumed int   // bytes at the front of buf the last chunk returned
}

func openTail(path string, from, to int64, chunk int) (*tailReader, error) {
	tr := &tailReader{name: filepath.Base(path), pos: from, end: to, base: from}
	if to <= from {
		return tr, nil
	}
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	tr.f = f
	tr.buf = make([]byte, 0, min(to-from, int64(chunk)))
	return tr, nil
}

func (tr *tailReader) close() {
	if tr.f != nil {
		_ = tr.f.Close()
	}
}

// fill reads more of the tail into buf, growing it when it is full.
func (tr *tailReader) fill() error {
	if len(tr.buf) == cap(tr.buf) {
		tr.buf = slices.Grow(tr.buf, cap(tr.buf))
	}
	want := min(int64(cap(tr.buf)-len(tr.buf)), tr.end-tr.pos)
	n, err := tr.f.ReadAt(tr.buf[len(tr.buf):len(tr.buf)+int(want)], tr.pos)
	tr.buf = tr.buf[:len(tr.buf)+n]
	tr.pos += int64(n)
	if errors.Is(err, io.EOF) {
		// The file is shorter than its stat said: what is there is the tail.
		tr.end = tr.pos
		err = nil
	}
	if err != nil {
		return fmt.Errorf("store: read %s: %w", tr.name, err)
	}
	return nil
}

// next returns the non-blank lines of the next chunk and whether it is the
// last one. A chunk ends at a newline unless it is the last.
func (tr *tailReader) next() ([]tailLine, bool, error) {
	if tr.f == nil {
		return nil, true, nil
	}
	// Drop what the previous chunk returned: the caller is done with its
	// lines, so the buffer is reused.
	if tr.consumed > 0 {
		n := copy(tr.buf, tr.buf[tr.consumed:])
		tr.buf = tr.buf[:n]
		tr.base += int64(tr.consumed)
		tr.consumed = 0
	}
	for {
		if tr.pos >= tr.end {
			lines := splitLines(tr.buf, tr.base)
			return lines, true, nil
		}
		if err := tr.fill(); err != nil {
			return nil, false, err
		}
		if tr.pos >= tr.end {
			continue
		}
		if cut := bytes.LastIndexByte(tr.buf, '\n'); cut >= 0 {
			tr.consumed = cut + 1
			return splitLines(tr.buf[:cut+1], tr.base), false, nil
		}
	}
}

// restHasContent reports whether anything but whitespace follows the chunk
// just returned. The chunk's lines may still be in use, so it reads into a
// buffer of its own.
func (tr *tailReader) restHasContent() (bool, error) {
	if len(trimLine(tr.buf[tr.consumed:])) > 0 {
		return true, nil
	}
	tr.base += int64(len(tr.buf))
	tr.buf, tr.consumed = make([]byte, 0, cap(tr.buf)), 0
	for {
		if tr.pos >= tr.end {
			return false, nil
		}
		if err := tr.fill(); err != nil {
			return false, err
		}
		if len(trimLine(tr.buf)) > 0 {
			return true, nil
		}
		tr.base += int64(len(tr.buf))
		tr.buf = tr.buf[:0]
	}
}

// parallelHashBytes is the tail size from which entry digests are computed
// on a second goroutine while the lines are parsed.
const parallelHashBytes = 1 << 20

// hashLines starts computing every line's entry digest and returns a
// function that waits for them. A large tail is hashed by a helper goroutine
// while the caller parses, and the caller joins in when it asks for the
// result; lines are taken from a shared counter, so both finish together.
// On a cold 21 MB rollout the digests cost about as much as everything else
// in a freeze.
func hashLines(lines []tailLine) func() []string {
	digests := make([]string, len(lines))
	size := 0
	for _, l := range lines {
		size += len(l.payload)
	}
	var next atomic.Int64
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= len(lines) {
				return
			}
			digests[i] = record.EntryDigest(lines[i].payload)
		}
	}
	if size < parallelHashBytes || runtime.GOMAXPROCS(0) < 2 {
		return func() []string { work(); return digests }
	}
	var wg sync.WaitGroup
	wg.Go(work)
	return func() []string {
		work()
		wg.Wait()
		return digests
	}
}

func truncateSync(path string, size int64) error {
	f, err := openRegular(path, os.O_WRONLY)
	if err != nil {
		return fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("store: truncate torn tail of %s: %w", filepath.Base(path), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store: fsync %s: %w", filepath.Base(path), err)
	}
	return nil
}

// CanonicalLine validates e and returns its canonical bytes and entry
// digest: the line every store backend keeps, byte for byte.
func CanonicalLine(e *record.Entry) ([]byte, string, error) {
	canonical, err := EncodeLine(e)
	if err != nil {
		return nil, "", err
	}
	return canonical, record.EntryDigest(canonical), nil
}

// EncodeLine is CanonicalLine without the entry digest, for a
// CanonicalSink, which computes the digest itself.
func EncodeLine(e *record.Entry) ([]byte, error) {
	if e == nil {
		return nil, errors.New("store: nil entry")
	}
	if err := ValidateRolloutID(e.RolloutID); err != nil {
		return nil, err
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("store: entry %s/%s: %w", e.RolloutID, e.ModelCallID, err)
	}
	canonical, err := e.MarshalCanonical()
	if err != nil {
		return nil, fmt.Errorf("store: entry %s/%s: %w", e.RolloutID, e.ModelCallID, err)
	}
	return canonical, nil
}

func lifecycleErr(id string, st *State) error {
	if st.Retired {
		return fmt.Errorf("store: rollout %s: %w", id, ErrRetired)
	}
	if st.Frozen {
		return fmt.Errorf("store: rollout %s: %w", id, ErrFrozen)
	}
	return nil
}

// Put appends e idempotently (docs/store.md#operations). It returns only after the line
// is fsynced. A byte-identical re-put succeeds without a new line; a
// different payload under a stored call id fails with ErrConflict and marks
// the rollout incomplete.
func (s *FileStore) Put(ctx context.Context, e *record.Entry) error {
	canonical, err := EncodeLine(e)
	if err != nil {
		return err
	}
	_, err = s.PutCanonical(ctx, e, canonical)
	return err
}

// PutCanonical is Put of an entry EncodeLine has encoded; see
// CanonicalSink. A new line's digest is computed while the line is written
// and synced.
func (s *FileStore) PutCanonical(ctx context.Context, e *record.Entry, canonical []byte) (string, error) {
	id := e.RolloutID
	h, st, key, err := s.lockLoaded(ctx, id)
	if err != nil {
		return "", err
	}
	defer h.unlock()
	if err := lifecycleErr(id, st); err != nil {
		return "", err
	}
	changed, _, err := s.reconcile(id, st, key.jsonl.size, true)
	if err != nil {
		h.forget()
		return "", err
	}
	if existing, ok := st.EntryDigests[e.ModelCallID]; ok {
		return s.putAgain(h, st, e, record.EntryDigest(canonical), existing, changed)
	}
	digest := entryDigestBeside(canonical)
	line := append(canonical, '\n')
	jk, err := s.appendTo(&h.sl.files.jsonl, s.path(id, suffixJSONL), key.jsonl, line)
	sum := digest()
	if err != nil {
		h.forget()
		return "", err
	}
	st.EntryDigests[e.ModelCallID] = sum
	st.IndexedSize = jk.size
	st.Version++
	if s.stateEveryPut || changed {
		// A reconciliation means another writer's state lagged: persist
		// the index so the next reader does not parse the same tail again.
		if err := s.writeState(id, st, false); err != nil {
			h.forget()
			return "", err
		}
		h.remember(st, false)
		return sum, nil
	}
	// Lazy: the state file is untouched, so its key is still valid.
	h.sl.cache = &stateCache{st: st, key: filesKey{state: key.state, jsonl: jk}, dirty: true}
	return sum, nil
}

// putAgain is PutCanonical of a call id the rollout already holds, with
// digest existing: a byte-identical re-put succeeds without a new line, a
// different one marks the rollout incomplete and fails with ErrConflict.
// changed is whether reconciling just changed st.
func (s *FileStore) putAgain(h *held, st *State, e *record.Entry, digest, existing string, changed bool) (string, error) {
	id := e.RolloutID
	if existing == digest {
		wasDirty := h.sl.cache != nil && h.sl.cache.st == st && h.sl.cache.dirty
		if changed {
			if err := s.writeState(id, st, false); err != nil {
				h.forget()
				return "", err
			}
		}
		h.remember(st, wasDirty && !changed)
		return digest, nil
	}
	st.Incomplete = true
	st.Version++
	if err := s.writeState(id, st, true); err != nil {
		h.forget()
		return "", err
	}
	h.remember(st, false)
	return "", fmt.Errorf("store: rollout %s: model call id %q: %w", id, e.ModelCallID, ErrConflict)
}

// besideDigestBytes is the line size from which PutCanonical hashes a line
// in a goroutine of its own, beside the line's write and sync: SHA-256 of a
// 32k-token line takes about 0.1 ms, a quarter of its sync on this
// project's test machines, and on the put's path it was all added to the
// call. Below it the goroutine costs more than it hides.
const besideDigestBytes = 32 << 10

// entryDigestBeside starts the entry digest of canonical and returns what
// waits for it (call it once). canonical must not change until then.
func entryDigestBeside(canonical []byte) func() string {
	if len(canonical) < besideDigestBytes {
		sum := record.EntryDigest(canonical)
		return func() string { return sum }
	}
	done := make(chan string, 1)
	go func() { done <- record.EntryDigest(canonical) }()
	return func() string { return <-done }
}

// BeginCall records a call intent before generation (docs/store.md#operations). An
// intent without an entry makes the next freeze incomplete.
func (s *FileStore) BeginCall(ctx context.Context, rolloutID, callID string) error {
	return s.writeIntent(ctx, rolloutID, callID, true)
}

// WriteIntent is BeginCall without waiting for the intent to be durable;
// see IntentWriter.
func (s *FileStore) WriteIntent(ctx context.Context, rolloutID, callID string) error {
	return s.writeIntent(ctx, rolloutID, callID, false)
}

func (s *FileStore) writeIntent(ctx context.Context, rolloutID, callID string, durable bool) error {
	if err := ValidateCall(rolloutID, callID); err != nil {
		return err
	}
	h, st, _, err := s.lockLoaded(ctx, rolloutID)
	if err != nil {
		return err
	}
	defer h.unlock()
	if err := lifecycleErr(rolloutID, st); err != nil {
		return err
	}
	path := s.path(rolloutID, suffixIntents)
	cur, err := statFile(path)
	if err != nil {
		return err
	}
	line := []byte(callID + "\n")
	if !durable {
		return s.writeTo(&h.sl.files.intents, path, cur, line)
	}
	_, err = s.appendTo(&h.sl.files.intents, path, cur, line)
	return err
}

// SyncIntents makes the rollout's intents written so far durable; see
// IntentWriter. It changes nothing, so it takes no lock: a rollout whose
// intents file is gone (dropped or retired meanwhile) has nothing to sync.
func (s *FileStore) SyncIntents(ctx context.Context, rolloutID string) error {
	if err := ValidateRolloutID(rolloutID); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	path := s.path(rolloutID, suffixIntents)
	f, err := openRegular(path, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	if err := s.durable(f); err != nil {
		return s.failed(&WriteError{Path: path, Op: "fsync", Err: err})
	}
	return nil
}

// MarkIncomplete durably records that a call of the rollout was lost. It
// works after a freeze (so a late loss invalidates a consumed snapshot) but
// not after retirement.
func (s *FileStore) MarkIncomplete(ctx context.Context, rolloutID, callID string) error {
	if err := ValidateCall(rolloutID, callID); err != nil {
		return err
	}
	h, st, _, err := s.lockLoaded(ctx, rolloutID)
	if err != nil {
		return err
	}
	defer h.unlock()
	if st.Retired {
		return fmt.Errorf("store: rollout %s: %w", rolloutID, ErrRetired)
	}
	st.Incomplete = true
	st.Version++
	if err := s.writeState(rolloutID, st, true); err != nil {
		h.forget()
		return err
	}
	h.remember(st, false)
	if _, err := s.appendLine(s.path(rolloutID, suffixIncomplete), []byte(callID+"\n")); err != nil {
		return err
	}
	return s.syncDir()
}

// Freeze freezes the rollout and returns its snapshot (docs/store.md#operations). The
// first freeze mints the snapshot id; later ones return the same id and the
// current version. As in Gym, a line that fails to read back after the
// state was frozen (e.g. a non-finite log-prob written as null) fails the
// freeze but leaves the rollout frozen.
func (s *FileStore) Freeze(ctx context.Context, rolloutID string) (*Snapshot, error) {
	h, st, key, err := s.lockLoaded(ctx, rolloutID)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	if st.Retired {
		return nil, fmt.Errorf("store: rollout %s: %w", rolloutID, ErrRetired)
	}
	changed, tail, err := s.reconcile(rolloutID, st, key.jsonl.size, true)
	if err != nil {
		h.forget()
		return nil, err
	}
	if !st.Frozen {
		st.Frozen = true
		st.SnapshotID = NewSnapshotID()
		st.Version++
		if err := s.writeState(rolloutID, st, true); err != nil {
			h.forget()
			return nil, err
		}
	} else if changed || (h.sl.cache != nil && h.sl.cache.st == st && h.sl.cache.dirty) {
		if err := s.writeState(rolloutID, st, true); err != nil {
			h.forget()
			return nil, err
		}
	}
	h.remember(st, false)
	entries, err := s.readFrozenEntries(rolloutID, tail)
	if err != nil {
		return nil, err
	}
	dangling, err := s.danglingIntents(rolloutID, entries)
	if err != nil {
		return nil, err
	}
	return &Snapshot{
		RolloutID:  rolloutID,
		Entries:    entries,
		Incomplete: st.Incomplete || len(dangling) > 0,
		SnapshotID: st.SnapshotID,
		Version:    st.Version,
	}, nil
}

// NewSnapshotID returns a random UUID4 as 32 lowercase hex digits, the form
// Python's uuid4().hex has.
func NewSnapshotID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// readFrozenEntries reads every entry of a rollout that Freeze has just
// reconciled under the same exclusive lock, so the file still holds what the
// reconciliation read (a torn tail already cut off). Lines the
// reconciliation parsed (tail) are not parsed again when they start at a
// line boundary, so the lines before them are exactly the file's other
// lines; otherwise every line is read afresh.
func (s *FileStore) readFrozenEntries(id string, tail *reconciled) ([]*record.Entry, error) {
	if tail == nil || len(tail.entries) == 0 {
		return s.readEntriesUnlocked(id, false)
	}
	if tail.from == 0 {
		// The whole file was the tail (a state that lagged from the start,
		// as when another process wrote every line): nothing else to read.
		return tail.entries, nil
	}
	data, err := readAll(s.path(id, suffixJSONL), s.takeReadBuffer())
	defer s.keepReadBuffer(data)
	if errors.Is(err, os.ErrNotExist) {
		return []*record.Entry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", id, err)
	}
	if tail.from > int64(len(data)) || (tail.from > 0 && data[tail.from-1] != '\n') {
		return parseEntries(id, data, false, []*record.Entry{})
	}
	entries, err := parseEntries(id, data[:tail.from], false, make([]*record.Entry, 0, len(tail.entries)))
	if err != nil {
		return nil, err
	}
	return append(entries, tail.entries...), nil
}

// readEntriesUnlocked parses every line. With tolerateTorn, an unterminated
// last line that is not JSON is skipped instead of failing: a shared-lock
// reader cannot repair it and it was never acknowledged.
func (s *FileStore) readEntriesUnlocked(id string, tolerateTorn bool) ([]*record.Entry, error) {
	data, err := readAll(s.path(id, suffixJSONL), s.takeReadBuffer())
	defer s.keepReadBuffer(data)
	if errors.Is(err, os.ErrNotExist) {
		return []*record.Entry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", id, err)
	}
	return parseEntries(id, data, tolerateTorn, []*record.Entry{})
}

// maxKeptReadBuffer bounds the read buffer a store keeps between reads.
const maxKeptReadBuffer = 256 << 20

// takeReadBuffer returns an empty buffer for reading a JSONL file: the one
// the last read left behind when no other read holds it. Parsed entries keep
// no reference to the bytes they were read from, so the buffer is reused and
// reading a large rollout again neither zeroes nor faults in fresh memory
// (which costs as much as parsing it). The store keeps at most one buffer,
// of at most maxKeptReadBuffer bytes.
func (s *FileStore) takeReadBuffer() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.readBuf
	s.readBuf = nil
	return b[:0]
}

func (s *FileStore) keepReadBuffer(b []byte) {
	if cap(b) > maxKeptReadBuffer {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cap(b) > cap(s.readBuf) {
		s.readBuf = b[:0]
	}
}

// readAll reads the whole file at path into buf (reusing its capacity), as
// os.ReadFile does.
func readAll(path string, buf []byte) ([]byte, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	return readAllFrom(f, buf)
}

// readAllFrom reads the rest of f into buf (reusing its capacity).
func readAllFrom(f *os.File, buf []byte) ([]byte, error) {
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		// One byte more than the size, so the read that finds EOF needs
		// no growth.
		buf = slices.Grow(buf, int(fi.Size())+1)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// parallelParseBytes is the file size from which parseEntries reads the two
// halves of a file on two goroutines (when two may run at once). Below it a
// second goroutine costs more than it saves.
const parallelParseBytes = 4 << 20

// parseEntries parses the lines of data (a JSONL file from its first byte)
// and appends the entries to dst. Each line is scanned once: JSON validity is
// only asked about a line the record parser refused, to tell a torn tail
// from a bad record, and the parser accepts nothing that is not valid JSON.
//
// A large file is cut after the newline nearest its middle and the halves
// are parsed at once; the lines are the same lines, the result is the first
// half's entries then the second's, and when both halves fail the first
// half's error (the earlier line) is the one reported, as a single pass
// would.
func parseEntries(id string, data []byte, tolerateTorn bool, dst []*record.Entry) ([]*record.Entry, error) {
	if len(data) < parallelParseBytes || runtime.GOMAXPROCS(0) < 2 {
		return parseLines(id, data, 0, tolerateTorn, dst)
	}
	cut := bytes.IndexByte(data[len(data)/2:], '\n')
	if cut < 0 || len(data)/2+cut+1 == len(data) {
		return parseLines(id, data, 0, tolerateTorn, dst)
	}
	mid := len(data)/2 + cut + 1
	var second []*record.Entry
	var secondErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		second, secondErr = parseLines(id, data[mid:], int64(mid), tolerateTorn, nil)
	}()
	// The first half ends with a newline, so none of its lines is the
	// file's unterminated last line and tolerateTorn never applies to it.
	dst, err := parseLines(id, data[:mid], 0, tolerateTorn, dst)
	<-done
	if err != nil {
		return nil, err
	}
	if secondErr != nil {
		return nil, secondErr
	}
	return append(dst, second...), nil
}

// parseLines parses data, whose first byte is at offset base of the file.
func parseLines(id string, data []byte, base int64, tolerateTorn bool, dst []*record.Entry) ([]*record.Entry, error) {
	var parser record.LineParser
	pos := base
	for rest := data; len(rest) > 0; {
		line, next := nextLine(rest)
		start := pos
		pos += int64(len(rest) - len(next))
		last := next == nil
		rest = next
		payload := trimLine(line)
		if len(payload) == 0 {
			continue
		}
		e, err := parser.Parse(payload)
		if err != nil {
			if tolerateTorn && last && !json.Valid(payload) {
				break
			}
			return nil, fmt.Errorf("%w: %s: line at byte %d: %w", ErrCorrupt, id, start, err)
		}
		dst = append(dst, e)
	}
	return dst, nil
}

// danglingIntents lists intents with neither an entry nor a cancel line
// ("-<call id>", written by Gym's cancel_call extension), sorted.
func (s *FileStore) danglingIntents(id string, entries []*record.Entry) ([]string, error) {
	data, err := readRegular(s.path(id, suffixIntents))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: read intents of %s: %w", id, err)
	}
	return DanglingIntents(strings.Split(string(data), "\n"), entries), nil
}

// DanglingIntents lists, sorted, the call intents among lines that have
// neither an entry nor a cancel line ("-<call id>"): calls that began and
// never committed, which make a snapshot incomplete. Every store backend
// keeps intents as such lines (docs/store.md#files-per-rollout).
func DanglingIntents(lines []string, entries []*record.Entry) []string {
	open := map[string]bool{}
	cancelled := map[string]bool{}
	for _, l := range lines {
		l = strings.Trim(l, " \t\r\v\f")
		switch {
		case l == "":
		case strings.HasPrefix(l, "-"):
			cancelled[l[1:]] = true
		default:
			open[l] = true
		}
	}
	for _, e := range entries {
		delete(open, e.ModelCallID)
	}
	var out []string
	for c := range open {
		if !cancelled[c] {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// Drop retires the rollout only if it is frozen under exactly snapshotID and
// version (docs/store.md#operations); it removes the records and keeps the state as a
// tombstone, so a late writer of the consumed attempt still fails.
func (s *FileStore) Drop(ctx context.Context, rolloutID, snapshotID string, version int) (bool, error) {
	h, st, _, err := s.lockLoaded(ctx, rolloutID)
	if err != nil {
		return false, err
	}
	defer h.unlock()
	if st.Retired || !st.Frozen || st.SnapshotID != snapshotID || st.Version != version {
		return false, nil
	}
	for _, suf := range []string{suffixJSONL, suffixIncomplete, suffixIntents} {
		if err := removeIfExists(s.path(rolloutID, suf)); err != nil {
			h.forget()
			return false, err
		}
	}
	st.IndexedSize = 0
	st.EntryDigests = map[string]string{}
	st.Legacy = false
	st.legacyRaw = nil
	st.Retired = true
	if err := s.writeState(rolloutID, st, true); err != nil {
		h.forget()
		return false, err
	}
	h.remember(st, false)
	// The durable state write ended with a directory fsync, which also
	// made the removals above durable.
	return true, nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: remove %s: %w", filepath.Base(path), err)
	}
	return nil
}

// Delete removes every file of the rollout except its lock (concurrent users
// keep locking one inode); the id is then usable again from version 0.
func (s *FileStore) Delete(ctx context.Context, rolloutID string) error {
	h, err := s.lock(ctx, rolloutID, true)
	if err != nil {
		return err
	}
	defer h.unlock()
	h.forget()
	for _, suf := range []string{suffixJSONL, suffixIncomplete, suffixIntents, suffixState} {
		if err := removeIfExists(s.path(rolloutID, suf)); err != nil {
			return err
		}
	}
	return s.syncDir()
}

// SweepRetired removes the tombstones (state, intents, incomplete and lock
// files) of retired rollouts whose state file is older than olderThan, and
// returns how many it removed. Unreadable state files are skipped and
// reported in the returned error after the sweep finishes.
func (s *FileStore) SweepRetired(ctx context.Context, olderThan time.Duration) (int, error) {
	names, err := s.listNames()
	if err != nil {
		return 0, err
	}
	count := 0
	var errs []error
	for _, name := range names {
		id, ok := strings.CutSuffix(name, suffixState)
		if !ok || ValidateRolloutID(id) != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		removed, err := s.sweepOne(ctx, id, olderThan)
		if err != nil {
			errs = append(errs, err)
		}
		if removed {
			count++
		}
	}
	if count > 0 {
		if err := s.syncDir(); err != nil {
			errs = append(errs, err)
		}
	}
	return count, errors.Join(errs...)
}

func (s *FileStore) sweepOne(ctx context.Context, id string, olderThan time.Duration) (bool, error) {
	// Look before locking: most state files of a busy directory are too
	// young or not retired, and taking their locks (creating lock files
	// Gym may already have swept) would make every sweep cost a lock per
	// rollout. The locked check below is the one that decides.
	if fi, err := os.Lstat(s.path(id, suffixState)); err != nil || fi.ModTime().After(time.Now().Add(-olderThan)) {
		return false, nil
	}
	if st, err := s.readStateFile(id); err != nil || !st.Retired {
		return false, err
	}
	h, err := s.lock(ctx, id, true)
	if err != nil {
		return false, err
	}
	defer h.unlock()
	fi, err := os.Stat(s.path(id, suffixState))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: stat state of %s: %w", id, err)
	}
	if fi.ModTime().After(time.Now().Add(-olderThan)) {
		return false, nil
	}
	st, err := s.readStateFile(id)
	if err != nil {
		return false, err
	}
	if !st.Retired {
		return false, nil
	}
	h.forget()
	for _, suf := range []string{suffixState, suffixIntents, suffixIncomplete, suffixLock} {
		if err := removeIfExists(s.path(id, suf)); err != nil {
			return false, err
		}
	}
	return true, nil
}

func (s *FileStore) listNames() ([]string, error) {
	d, err := os.Open(s.dir)
	if err != nil {
		return nil, fmt.Errorf("store: open directory: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("store: list directory: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

// Rollouts lists the rollout ids that have records, a state, intents or an
// incomplete marker in the directory, sorted.
func (s *FileStore) Rollouts(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names, err := s.listNames()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var ids []string
	for _, name := range names {
		for _, suf := range []string{suffixJSONL, suffixState, suffixIntents, suffixIncomplete} {
			id, ok := strings.CutSuffix(name, suf)
			if ok && ValidateRolloutID(id) == nil && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// ReadEntries returns the rollout's committed entries in file order under a
// shared lock, without freezing or repairing anything.
func (s *FileStore) ReadEntries(ctx context.Context, rolloutID string) ([]*record.Entry, error) {
	h, err := s.lock(ctx, rolloutID, false)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	return s.readEntriesUnlocked(rolloutID, true)
}

// IsIncomplete reports the state's incomplete flag (not dangling intents),
// as Gym's is_incomplete does.
func (s *FileStore) IsIncomplete(ctx context.Context, rolloutID string) (bool, error) {
	st, err := s.sharedState(ctx, rolloutID, false)
	if err != nil {
		return false, err
	}
	return st.Incomplete, nil
}

// State returns the rollout's state as a reader would find it after
// reconciling the JSONL tail; nothing on disk is changed.
func (s *FileStore) State(ctx context.Context, rolloutID string) (State, error) {
	return s.sharedState(ctx, rolloutID, true)
}

func (s *FileStore) sharedState(ctx context.Context, rolloutID string, reconcile bool) (State, error) {
	h, err := s.lock(ctx, rolloutID, false)
	if err != nil {
		return State{}, err
	}
	defer h.unlock()
	st, key, err := h.load()
	if err != nil {
		return State{}, err
	}
	out := st.Clone()
	if reconcile {
		if _, _, err := s.reconcile(rolloutID, &out, key.jsonl.size, false); err != nil {
			return State{}, err
		}
	}
	return out, nil
}

// Close writes the state of rollouts whose puts left it pending, so the
// directory needs no reconciliation when this process is gone, and closes
// the descriptors idle rollouts kept. The work is bounded: at most the
// rollouts in use plus WithMaxIdleRollouts idle ones have anything pending.
// The store stays usable.
func (s *FileStore) Close() error {
	s.mu.Lock()
	var ids []string
	for id := range s.slots {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		h, err := s.lock(context.Background(), id, true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if c := h.sl.cache; c != nil && c.dirty {
			if key, err := s.currentKey(id); err == nil && key == c.key {
				if err := s.writeState(id, c.st, false); err != nil {
					errs = append(errs, err)
				}
			}
		}
		// Nothing is pending now: the slot is forgotten on unlock.
		h.forget()
		h.unlock()
	}
	return errors.Join(errs...)
}

var (
	_ Sink   = (*FileStore)(nil)
	_ Source = (*FileStore)(nil)
	_ Reader = (*FileStore)(nil)
)
