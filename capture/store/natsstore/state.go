package natsstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capbench/capbench/capture/store"
)

// rolloutState is the value of a rollout's KV key. Its version arithmetic
// is the file store's (docs/nats-store.md): +1 per committed put, conflict,
// loss and first freeze; drop keeps it.
type rolloutState struct {
	// Epoch names this incarnation of the rollout id: message ids and
	// message headers carry it, so what a deleted incarnation left in the
	// stream (or in the duplicate window) never counts for a new one.
	Epoch      string `json:"epoch"`
	Frozen     bool   `json:"frozen"`
	Retired    bool   `json:"retired"`
	Incomplete bool   `json:"incomplete"`
	SnapshotID string `json:"snapshot_id"`
	Version    int    `json:"version"`
	// EntryDigests maps each committed call id to its entry digest.
	EntryDigests map[string]string `json:"entry_digests"`
}

func newState() *rolloutState {
	return &rolloutState{Epoch: randomHex(8), EntryDigests: map[string]string{}}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// token encodes a rollout id as one subject token and KV key: ids may hold
// '.', the subject separator, which becomes '=' (not in the id alphabet, so
// the mapping is one to one).
func token(rolloutID string) string { return strings.ReplaceAll(rolloutID, ".", "=") }

func rolloutOf(tok string) string { return strings.ReplaceAll(tok, "=", ".") }

func (s *Store) subject(rolloutID, kind string) string {
	return s.opts.Prefix + "." + token(rolloutID) + "." + kind
}

// Subject kinds.
const (
	kindRecord = "rec"
	kindIntent = "int"
	kindLost   = "lost"
)

// loaded is a state with the KV revision it was read at (0: no key yet).
type loaded struct {
	st  *rolloutState
	rev uint64
}

func (s *Store) load(ctx context.Context, rolloutID string) (loaded, error) {
	data, rev, err := s.getState(ctx, token(rolloutID))
	if err != nil {
		return loaded{}, fmt.Errorf("natsstore: read state of %s: %w", rolloutID, err)
	}
	if rev == 0 {
		return loaded{st: newState()}, nil
	}
	st := &rolloutState{}
	if err := json.Unmarshal(data, st); err != nil || st.Epoch == "" {
		return loaded{}, fmt.Errorf("%w: state of %s in bucket %s is not a capbench state", store.ErrCorrupt, rolloutID, s.opts.Bucket)
	}
	if st.EntryDigests == nil {
		st.EntryDigests = map[string]string{}
	}
	return loaded{st: st, rev: rev}, nil
}

// getState reads the key's latest value through the stream leader
// (STREAM.MSG.GET), not KV's direct get, which on a replicated bucket any
// replica may answer from behind: a client must read what another client's
// acknowledged write left. rev 0 means no value (absent, deleted or purged).
func (s *Store) getState(ctx context.Context, key string) ([]byte, uint64, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + s.opts.Bucket + "." + key})
	if err != nil {
		return nil, 0, err
	}
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+s.opts.Bucket, req)
	if err != nil {
		return nil, 0, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("decode reply: %w", err)
	}
	if e := resp.Error; e != nil {
		if e.ErrCode == noMessageFound {
			return nil, 0, nil
		}
		return nil, 0, &jetstream.APIError{Code: e.Code, ErrorCode: jetstream.ErrorCode(e.ErrCode), Description: e.Description}
	}
	if resp.Message == nil {
		return nil, 0, errors.New("empty reply")
	}
	if bytes.Contains(resp.Message.Hdrs, []byte("KV-Operation:")) {
		return nil, 0, nil // a delete or purge marker
	}
	return resp.Message.Data, resp.Message.Seq, nil
}

// noMessageFound is JetStream's "no message found" error code.
const noMessageFound = 10037

// errStale is a lost compare-and-set: reload and decide again.
var errStale = errors.New("natsstore: state changed concurrently")

// save writes l.st if the key is still at l.rev (or still absent).
func (s *Store) save(ctx context.Context, rolloutID string, l loaded) (uint64, error) {
	b, err := json.Marshal(l.st)
	if err != nil {
		return 0, fmt.Errorf("natsstore: encode state of %s: %w", rolloutID, err)
	}
	var rev uint64
	if l.rev == 0 {
		rev, err = s.kv.Create(ctx, token(rolloutID), b)
	} else {
		rev, err = s.kv.Update(ctx, token(rolloutID), b, l.rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err) {
		return 0, errStale
	}
	if err != nil {
		return 0, fmt.Errorf("natsstore: write state of %s: %w", rolloutID, err)
	}
	return rev, nil
}

func isWrongLastSeq(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// update applies change to the current state under compare-and-set until it
// lands. change returns save=false to leave the state as it is.
func (s *Store) update(ctx context.Context, rolloutID string, change func(st *rolloutState) (save bool, err error)) (*rolloutState, error) {
	for {
		l, err := s.load(ctx, rolloutID)
		if err != nil {
			return nil, err
		}
		doSave, err := change(l.st)
		if err != nil || !doSave {
			return l.st, err
		}
		if _, err := s.save(ctx, rolloutID, l); errors.Is(err, errStale) {
			continue
		} else if err != nil {
			return nil, err
		}
		return l.st, nil
	}
}

func lifecycleErr(id string, st *rolloutState) error {
	if st.Retired {
		return fmt.Errorf("store: rollout %s: %w", id, store.ErrRetired)
	}
	if st.Frozen {
		return fmt.Errorf("store: rollout %s: %w", id, store.ErrFrozen)
	}
	return nil
}

// maxCached bounds the per-client cache of rollout states.
const maxCached = 4096

// cached returns a copy of the state this client last wrote for id, if any.
// A put starts from it to save a read; its compare-and-set fails if another
// client changed the rollout since.
func (s *Store) cached(id string) (loaded, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	l, ok := s.cache[id]
	if !ok {
		return loaded{}, false
	}
	st := *l.st
	st.EntryDigests = maps.Clone(l.st.EntryDigests)
	return loaded{st: &st, rev: l.rev}, true
}

func (s *Store) remember(id string, l loaded) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.cache == nil || len(s.cache) >= maxCached {
		s.cache = map[string]loaded{}
	}
	s.cache[id] = l
}

func (s *Store) forget(id string) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	delete(s.cache, id)
}
