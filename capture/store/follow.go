package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/capbench/capbench/capture/record"
)

// TailReader is the incremental read side of a store: the entries appended
// after a cursor, and one committed entry by its place in the file. A
// request-time reader (the proxy's parent resolution) uses it through a
// Follower so that no call re-reads the calls before it.
type TailReader interface {
	// ReadTail returns the entries after from. known, when not nil, is
	// asked first for each line: an entry it returns stands for that line,
	// which is then not parsed.
	ReadTail(ctx context.Context, rolloutID string, from Cursor, known KnownLine) (Tail, error)
	ReadLine(ctx context.Context, rolloutID string, at LineRef) (*record.Entry, error)
	// CheckLine is ReadLine without the read: nil while at still names a
	// line of the rollout, ErrStaleRef when it no longer does.
	CheckLine(ctx context.Context, rolloutID string, at LineRef) error
}

// Cursor is a place in one rollout's records file: an offset in one file
// (by identity), so a replaced or truncated file is noticed.
type Cursor struct {
	offset int64
	file   fileID
}

// LineRef locates one committed line.
type LineRef struct {
	offset int64
	length int
	file   fileID
}

// Tail is what was appended after a cursor. Reset means the file is not the
// one the cursor was in (deleted, replaced, cut back): Entries then hold the
// whole rollout, from its first line, and earlier refs are void.
type Tail struct {
	Entries []*record.Entry
	Refs    []LineRef
	Next    Cursor
	Reset   bool
}

// KnownLine names the entry a line (without its newline) encodes when the
// reader already holds it, else nil.
type KnownLine func(line []byte) *record.Entry

// ErrStaleRef is returned by ReadLine when the file no longer holds the line
// (it was replaced or cut back since the ref was read).
var ErrStaleRef = errors.New("line reference is stale")

// ReadTail returns the entries of the lines after from, under a shared lock,
// repairing nothing: a torn unterminated last line is left for later, as
// ReadEntries leaves it.
func (s *FileStore) ReadTail(ctx context.Context, rolloutID string, from Cursor, known KnownLine) (Tail, error) {
	h, err := s.lock(ctx, rolloutID, false)
	if err != nil {
		return Tail{}, err
	}
	defer h.unlock()
	path := s.path(rolloutID, suffixJSONL)
	f, err := openRegular(path, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return Tail{Entries: []*record.Entry{}, Reset: from != Cursor{}}, nil
	}
	if err != nil {
		return Tail{}, fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Tail{}, fmt.Errorf("store: stat %s: %w", path, err)
	}
	id := idOf(fi)
	out := Tail{Entries: []*record.Entry{}}
	start := from.offset
	if from.file != id || start > fi.Size() {
		out.Reset = from != Cursor{}
		start = 0
	}
	data := make([]byte, fi.Size()-start)
	if _, err := f.ReadAt(data, start); err != nil && len(data) > 0 {
		return Tail{}, fmt.Errorf("store: read %s: %w", path, err)
	}
	next, err := parseTail(rolloutID, data, start, id, known, &out)
	if err != nil {
		return Tail{}, err
	}
	out.Next = Cursor{offset: next, file: id}
	return out, nil
}

// parseTail parses data (the file from offset base) into out, but for the
// lines known names, and returns the offset after the last line it took.
func parseTail(id string, data []byte, base int64, file fileID, known KnownLine, out *Tail) (int64, error) {
	var parser record.LineParser
	pos := base
	for rest := data; len(rest) > 0; {
		line, next := nextLine(rest)
		start := pos
		raw := len(rest) - len(next)
		rest = next
		payload := trimLine(line)
		if len(payload) > 0 {
			e, err := knownOrParse(known, parser.Parse, payload)
			if err != nil {
				if next == nil && !json.Valid(payload) {
					// A torn last line: never acknowledged; read again later.
					return start, nil
				}
				return 0, fmt.Errorf("%w: %s: line at byte %d: %w", ErrCorrupt, id, start, err)
			}
			out.Entries = append(out.Entries, e)
			out.Refs = append(out.Refs, LineRef{offset: start, length: raw, file: file})
		}
		pos += int64(raw)
	}
	return pos, nil
}

// knownOrParse is the entry known names for line, else line parsed.
func knownOrParse(known KnownLine, parse func([]byte) (*record.Entry, error), line []byte) (*record.Entry, error) {
	if known != nil {
		if e := known(line); e != nil {
			return e, nil
		}
	}
	return parse(line)
}

// ReadLine reads the one entry at ref, under a shared lock.
func (s *FileStore) ReadLine(ctx context.Context, rolloutID string, ref LineRef) (*record.Entry, error) {
	var e *record.Entry
	err := s.atLine(ctx, rolloutID, ref, func(f *os.File) error {
		buf := make([]byte, ref.length)
		if _, err := f.ReadAt(buf, ref.offset); err != nil {
			return fmt.Errorf("store: read %s: %w", f.Name(), err)
		}
		var err error
		if e, err = record.ParseLine(trimLine(buf)); err != nil {
			return fmt.Errorf("%w: %s: line at byte %d: %w", ErrCorrupt, rolloutID, ref.offset, err)
		}
		return nil
	})
	return e, err
}

// CheckLine reports whether ref still names a line of the rollout's
// records (ErrStaleRef when the file was replaced or cut back below it),
// without reading the line.
func (s *FileStore) CheckLine(ctx context.Context, rolloutID string, ref LineRef) error {
	return s.atLine(ctx, rolloutID, ref, func(*os.File) error { return nil })
}

// atLine runs fn on the rollout's JSONL, under its shared lock, once ref is
// known to lie in it.
func (s *FileStore) atLine(ctx context.Context, rolloutID string, ref LineRef, fn func(*os.File) error) error {
	h, err := s.lock(ctx, rolloutID, false)
	if err != nil {
		return err
	}
	defer h.unlock()
	path := s.path(rolloutID, suffixJSONL)
	f, err := openRegular(path, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: %s: %w", rolloutID, ErrStaleRef)
	}
	if err != nil {
		return fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: stat %s: %w", path, err)
	}
	if idOf(fi) != ref.file || ref.offset+int64(ref.length) > fi.Size() {
		return fmt.Errorf("store: %s: %w", rolloutID, ErrStaleRef)
	}
	return fn(f)
}

// Follower follows one rollout's records for request-time parent
// resolution: each Refresh reads only what was appended since the last, and
// a parent's cumulative tokens are read from that parent's own lines. It
// keeps one small reference per call, so nothing a call costs grows with
// the calls before it, and the entries its last Refresh read until
// ForgetRead (a follower kept between calls should forget them once the
// call is resolved: they hold whole token arrays). Not safe for concurrent
// use.
type Follower struct {
	src   TailReader
	id    string
	cur   Cursor
	lines map[string]followed
	// recent holds the entries the last Refresh read, by call id: the
	// parent a call names is most often the call just before it, whose
	// line that Refresh has just parsed (a 32k-token line costs half a
	// millisecond to parse again).
	recent map[string]*record.Entry
	// wrote are the lines this process appended since the last Refresh
	// (Wrote): that Refresh takes their entries instead of parsing them,
	// and keeps those it took in handed until ForgetRead.
	wrote  []wroteLine
	handed map[string]bool
	// full holds the full prompts of the handed delta records, by call id:
	// Cumulative starts from one instead of walking the delta chain back
	// to its anchor, one line read and parsed per call of the rollout.
	full map[string][]int
}

// wroteLine is a line by its bytes: a line read back is the one written
// when it holds the same bytes. Comparing them costs a twentieth of hashing
// them (the test the store's own idempotency index makes), and the
// resolution that reads the line back runs beside the engine call.
type wroteLine struct {
	e          *record.Entry
	line       []byte
	fullPrompt []int // a delta record's full prompt (WroteDelta), else nil
}

type followed struct {
	ref    LineRef
	delta  bool
	parent string
}

// NewFollower follows rolloutID in src from its first line.
func NewFollower(src TailReader, rolloutID string) *Follower {
	return &Follower{src: src, id: rolloutID, lines: map[string]followed{}}
}

// Refresh reads what was appended since the last Refresh. With reset, the
// file is not the one followed so far (deleted, replaced or cut back):
// added then holds every entry of the rollout and earlier ones are void.
// The follower answers Cumulative from the same entries until ForgetRead,
// so the caller reads them and does not change them.
func (f *Follower) Refresh(ctx context.Context) (added []*record.Entry, reset bool, err error) {
	var known KnownLine
	if len(f.wrote) > 0 {
		known = f.written
	}
	t, err := f.src.ReadTail(ctx, f.id, f.cur, known)
	wrote := f.wrote
	f.wrote = nil
	clear(f.handed)
	clear(f.full)
	if err != nil {
		return nil, false, err
	}
	if t.Reset {
		clear(f.lines)
	}
	clear(f.recent)
	for i, e := range t.Entries {
		if _, dup := f.lines[e.ModelCallID]; dup {
			continue // the first line of a call id is the one that counts
		}
		fl := followed{ref: t.Refs[i], delta: e.PromptIsDelta}
		if e.ParentCallID != nil {
			fl.parent = *e.ParentCallID
		}
		f.lines[e.ModelCallID] = fl
		if f.recent == nil {
			f.recent = map[string]*record.Entry{}
		}
		f.recent[e.ModelCallID] = e
		if w, ok := wasWritten(wrote, e); ok {
			if f.handed == nil {
				f.handed = map[string]bool{}
			}
			f.handed[e.ModelCallID] = true
			if w.fullPrompt != nil {
				if f.full == nil {
					f.full = map[string][]int{}
				}
				f.full[e.ModelCallID] = w.fullPrompt
			}
		}
	}
	f.cur = t.Next
	return t.Entries, t.Reset, nil
}

// Wrote tells the follower that this process appended e to the rollout as
// the line canonical (without its newline), as store.EncodeLine returned
// it. The next Refresh takes e for a line of those bytes instead of parsing
// the line (a 32k-token line costs half a millisecond to parse), and
// Cumulative answers from it until ForgetRead. The follower holds canonical
// until that Refresh. Neither e nor canonical may change afterwards, and
// e's Digest, when set on a
// full (not delta) record, must be the token digest of its own prompt and
// generation, as record's StampLineage stamps it: CumulativeDigest names it
// without hashing.
func (f *Follower) Wrote(e *record.Entry, canonical []byte) {
	f.wrote = append(f.wrote, wroteLine{e: e, line: canonical})
}

// WroteDelta is Wrote for a delta record (prompt_is_delta) whose full
// prompt, its parent's cumulative tokens and then its own suffix, is
// fullPrompt. Cumulative then answers for e from fullPrompt instead of
// walking e's delta chain back to its anchor, which reads one line per
// earlier call of the rollout; and CumulativeDigest names e's Digest, which
// must be the token digest of fullPrompt and e's generation, as record's
// StampLineage stamps the full record before the delta transform.
// fullPrompt must not change afterwards.
func (f *Follower) WroteDelta(e *record.Entry, canonical []byte, fullPrompt []int) {
	f.wrote = append(f.wrote, wroteLine{e: e, line: canonical, fullPrompt: fullPrompt})
}

// ForgetWritten drops what Wrote handed over; the next Refresh parses every
// line it reads.
func (f *Follower) ForgetWritten() { f.wrote = nil }

// written is the KnownLine of the lines Wrote named.
func (f *Follower) written(line []byte) *record.Entry {
	for _, w := range f.wrote {
		if bytes.Equal(line, w.line) {
			return w.e
		}
	}
	return nil
}

func wasWritten(wrote []wroteLine, e *record.Entry) (wroteLine, bool) {
	for _, w := range wrote {
		if w.e == e {
			return w, true
		}
	}
	return wroteLine{}, false
}

// ForgetRead drops the entries the last Refresh read; Cumulative then
// reads every line from the store again.
func (f *Follower) ForgetRead() { f.recent, f.handed, f.full = nil, nil, nil }

// Holding is how many entries the follower holds from its last Refresh.
func (f *Follower) Holding() int { return len(f.recent) }

// Len is how many call ids have been followed.
func (f *Follower) Len() int { return len(f.lines) }

// Cumulative returns a followed call's full prompt + generation, reading
// its line (and, for a delta record, the lines back to its full-prompt
// anchor, or to a delta record handed over with its full prompt).
func (f *Follower) Cumulative(ctx context.Context, callID string) ([]int, error) {
	var chain []*record.Entry
	var anchor []int // the full prompt the chain's oldest entry was handed with
	seen := map[string]bool{}
	for id := callID; ; {
		fl, ok := f.lines[id]
		if !ok {
			return nil, fmt.Errorf("call %s is not in the rollout's entries", id)
		}
		if seen[id] {
			return nil, fmt.Errorf("delta chain loops at call %s", id)
		}
		seen[id] = true
		e, err := f.line(ctx, id, fl.ref)
		if err != nil {
			return nil, err
		}
		chain = append(chain, e)
		if !fl.delta {
			break
		}
		if full := f.full[id]; full != nil && f.handed[id] {
			anchor = full
			break
		}
		if fl.parent == "" {
			return nil, fmt.Errorf("delta record %s has no parent", id)
		}
		id = fl.parent
	}
	n := len(anchor)
	for _, e := range chain {
		n += len(e.PromptTokenIDs) + len(e.GenerationTokenIDs)
	}
	out := append(make([]int, 0, n), anchor...)
	for i, e := range slices.Backward(chain) {
		if i < len(chain)-1 || anchor == nil {
			out = append(out, e.PromptTokenIDs...)
		}
		out = append(out, e.GenerationTokenIDs...)
	}
	return out, nil
}

// CumulativeDigest is Cumulative, and the token digest of those tokens when
// the follower knows it without hashing: callID's entry was handed over by
// Wrote (a full record, stamped from its own tokens) and is still the one
// its line holds. Otherwise the digest is "".
func (f *Follower) CumulativeDigest(ctx context.Context, callID string) ([]int, string, error) {
	tokens, err := f.Cumulative(ctx, callID)
	if err != nil {
		return nil, "", err
	}
	if e := f.recent[callID]; f.handed[callID] && (!e.PromptIsDelta || f.full[callID] != nil) && e.Digest != nil {
		return tokens, *e.Digest, nil
	}
	return tokens, "", nil
}

// line is the entry at ref: the one the last Refresh parsed while ref still
// names its line, else read again.
func (f *Follower) line(ctx context.Context, id string, ref LineRef) (*record.Entry, error) {
	if e, ok := f.recent[id]; ok {
		if err := f.src.CheckLine(ctx, f.id, ref); err != nil {
			return nil, err
		}
		return e, nil
	}
	return f.src.ReadLine(ctx, f.id, ref)
}

var _ TailReader = (*FileStore)(nil)

var (
	_ CanonicalSink = (*FileStore)(nil)
	_ IntentWriter  = (*FileStore)(nil)
	_ CanonicalSink = (*MemoryStore)(nil)
	_ TailReader    = (*MemoryStore)(nil)
)
