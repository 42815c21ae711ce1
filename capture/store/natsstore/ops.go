package natsstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// Message headers besides Nats-Msg-Id.
const (
	hdrEpoch  = "Capbench-Epoch"
	hdrDigest = "Capbench-Digest"
	hdrCall   = "Capbench-Call-Id"
)

// canonicalLine validates e (its call id too: intents are lines) and
// returns the canonical line and digest the file store writes.
func canonicalLine(e *record.Entry) ([]byte, string, error) {
	if e != nil {
		if err := store.ValidateCall(e.RolloutID, e.ModelCallID); err != nil {
			return nil, "", err
		}
	}
	return store.CanonicalLine(e)
}

// msgID is the deduplication id of a message: the call id, scoped by the
// rollout, its epoch and the message kind.
func msgID(rolloutID, epoch, kind, callID string) string {
	return token(rolloutID) + "/" + epoch + "/" + kind + "/" + callID
}

// Put appends e idempotently: a byte-identical re-put succeeds without a
// second record; a different payload under a committed call id fails with
// store.ErrConflict and marks the rollout incomplete; a frozen or retired
// rollout refuses it. It returns once the record is stored and indexed.
func (s *Store) Put(ctx context.Context, e *record.Entry) error {
	canonical, digest, err := canonicalLine(e)
	if err != nil {
		return err
	}
	if n := int64(len(canonical)); n > s.MaxRecordBytes() {
		return fmt.Errorf("store: entry %s/%s: %w: %d bytes, limit %d; raise max_payload on the server (docs/nats-store.md)",
			e.RolloutID, e.ModelCallID, errTooLarge, n, s.MaxRecordBytes())
	}
	return s.retry(ctx, "put", func(ctx context.Context) error {
		return s.putOnce(ctx, e.RolloutID, e.ModelCallID, canonical, digest)
	})
}

func (s *Store) putOnce(ctx context.Context, id, callID string, canonical []byte, digest string) error {
	for {
		l, fromCache := s.cached(id)
		if !fromCache {
			var err error
			if l, err = s.load(ctx, id); err != nil {
				return err
			}
		}
		_, exists := l.st.EntryDigests[callID]
		if fromCache && (exists || lifecycleErr(id, l.st) != nil) {
			// Only a write may rest on a cached state (its compare-and-set
			// catches staleness); an answer without one needs a fresh read.
			s.forget(id)
			continue
		}
		if err := lifecycleErr(id, l.st); err != nil {
			return err
		}
		if existing, ok := l.st.EntryDigests[callID]; ok {
			if existing == digest {
				return nil
			}
			return s.conflict(ctx, id, callID)
		}
		if l.rev == 0 {
			// Fix the epoch before any message carries it.
			if _, err := s.save(ctx, id, l); err != nil && !errors.Is(err, errStale) {
				return err
			}
			continue
		}
		stored, err := s.publishRecord(ctx, id, l.st.Epoch, callID, canonical, digest)
		if err != nil {
			return err
		}
		if stored != digest {
			// Another writer stored a different payload under this call id
			// inside the duplicate window.
			s.forget(id)
			return s.conflict(ctx, id, callID)
		}
		l.st.EntryDigests[callID] = digest
		l.st.Version++
		rev, err := s.save(ctx, id, l)
		if errors.Is(err, errStale) {
			s.forget(id)
			continue // decide again on the new state; a re-publish is deduplicated
		}
		if err != nil {
			s.forget(id)
			return err
		}
		s.remember(id, loaded{st: l.st, rev: rev})
		return nil
	}
}

// publishRecord stores the record message and returns the digest of what
// the stream holds under its message id (another payload's on a duplicate).
func (s *Store) publishRecord(ctx context.Context, id, epoch, callID string, canonical []byte, digest string) (string, error) {
	m := nats.NewMsg(s.subject(id, kindRecord))
	m.Data = canonical
	m.Header.Set(jetstream.MsgIDHeader, msgID(id, epoch, kindRecord, callID))
	m.Header.Set(hdrEpoch, epoch)
	m.Header.Set(hdrDigest, digest)
	m.Header.Set(hdrCall, callID)
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		return "", fmt.Errorf("natsstore: publish record %s/%s: %w", id, callID, err)
	}
	if !ack.Duplicate {
		return digest, nil
	}
	raw, err := s.stream.GetMsg(ctx, ack.Sequence)
	if err != nil {
		return "", fmt.Errorf("natsstore: read the stored duplicate of %s/%s (seq %d): %w", id, callID, ack.Sequence, err)
	}
	return raw.Header.Get(hdrDigest), nil
}

// conflict marks the rollout incomplete and returns store.ErrConflict.
func (s *Store) conflict(ctx context.Context, id, callID string) error {
	_, err := s.update(ctx, id, func(st *rolloutState) (bool, error) {
		if err := lifecycleErr(id, st); err != nil {
			return false, err
		}
		st.Incomplete = true
		st.Version++
		return true, nil
	})
	if err != nil {
		return err
	}
	return fmt.Errorf("store: rollout %s: model call id %q: %w", id, callID, store.ErrConflict)
}

// BeginCall records a call intent; an intent without a committed record
// makes the next freeze incomplete. A frozen or retired rollout refuses it.
func (s *Store) BeginCall(ctx context.Context, rolloutID, callID string) error {
	if err := store.ValidateCall(rolloutID, callID); err != nil {
		return err
	}
	return s.retry(ctx, "begin_call", func(ctx context.Context) error {
		if err := s.ensure(ctx, rolloutID); err != nil {
			return err
		}
		l, err := s.load(ctx, rolloutID)
		if err != nil {
			return err
		}
		if err := lifecycleErr(rolloutID, l.st); err != nil {
			return err
		}
		if err := s.publishMark(ctx, rolloutID, l.st.Epoch, kindIntent, callID); err != nil {
			return err
		}
		// A freeze that landed while the intent was in flight may not have
		// seen it: refuse the call as a freeze before the intent would have.
		after, err := s.load(ctx, rolloutID)
		if err != nil {
			return err
		}
		return lifecycleErr(rolloutID, after.st)
	})
}

// ensure creates the rollout's state key when it does not exist yet, so the
// epoch an intent carries is the one later readers see.
func (s *Store) ensure(ctx context.Context, id string) error {
	for {
		l, err := s.load(ctx, id)
		if err != nil {
			return err
		}
		if l.rev != 0 {
			return nil
		}
		if _, err := s.save(ctx, id, l); err != nil && !errors.Is(err, errStale) {
			return err
		}
	}
}

func (s *Store) publishMark(ctx context.Context, id, epoch, kind, callID string) error {
	m := nats.NewMsg(s.subject(id, kind))
	m.Data = []byte(callID)
	m.Header.Set(jetstream.MsgIDHeader, msgID(id, epoch, kind, callID))
	m.Header.Set(hdrEpoch, epoch)
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("natsstore: publish %s mark %s/%s: %w", kind, id, callID, err)
	}
	return nil
}

// MarkIncomplete records that a call of the rollout was lost: the state's
// incomplete flag (compare-and-set, a version step) and a .lost message.
// It works after a freeze but not after retirement.
func (s *Store) MarkIncomplete(ctx context.Context, rolloutID, callID string) error {
	if err := store.ValidateCall(rolloutID, callID); err != nil {
		return err
	}
	return s.retry(ctx, "mark_incomplete", func(ctx context.Context) error {
		st, err := s.update(ctx, rolloutID, func(st *rolloutState) (bool, error) {
			if st.Retired {
				return false, fmt.Errorf("store: rollout %s: %w", rolloutID, store.ErrRetired)
			}
			st.Incomplete = true
			st.Version++
			return true, nil
		})
		if err != nil {
			return err
		}
		return s.publishMark(ctx, rolloutID, st.Epoch, kindLost, callID)
	})
}

// Freeze freezes the rollout and returns its snapshot: the first freeze
// mints the snapshot id (a version step), later ones return it with the
// current version. The snapshot is incomplete when the state says so or a
// call intent has no committed record.
func (s *Store) Freeze(ctx context.Context, rolloutID string) (*store.Snapshot, error) {
	if err := store.ValidateRolloutID(rolloutID); err != nil {
		return nil, err
	}
	var snap *store.Snapshot
	err := s.retryReads(ctx, "freeze", func(ctx context.Context) error {
		st, err := s.update(ctx, rolloutID, func(st *rolloutState) (bool, error) {
			if st.Retired {
				return false, fmt.Errorf("store: rollout %s: %w", rolloutID, store.ErrRetired)
			}
			if st.Frozen {
				return false, nil
			}
			st.Frozen, st.SnapshotID = true, store.NewSnapshotID()
			st.Version++
			return true, nil
		})
		if err != nil {
			return err
		}
		entries, intents, err := s.read(ctx, rolloutID, st, true)
		if err != nil {
			return err
		}
		snap = &store.Snapshot{
			RolloutID:  rolloutID,
			Entries:    entries,
			Incomplete: st.Incomplete || len(store.DanglingIntents(intents, entries)) > 0,
			SnapshotID: st.SnapshotID,
			Version:    st.Version,
		}
		return nil
	})
	return snap, err
}

// Drop retires the rollout only if it is frozen under exactly snapshotID and
// version: the state becomes a retired tombstone (a late writer still
// fails) and the rollout's messages are purged.
func (s *Store) Drop(ctx context.Context, rolloutID, snapshotID string, version int) (bool, error) {
	if err := store.ValidateRolloutID(rolloutID); err != nil {
		return false, err
	}
	var dropped, uncertain bool
	err := s.retry(ctx, "drop", func(ctx context.Context) error {
		for {
			l, err := s.load(ctx, rolloutID)
			if err != nil {
				return err
			}
			st := l.st
			match := st.Frozen && st.SnapshotID == snapshotID && st.Version == version
			if st.Retired {
				// Retired by an attempt of ours whose reply was lost.
				dropped = uncertain && match
				return nil
			}
			if !match || l.rev == 0 {
				return nil
			}
			st.Retired, st.EntryDigests = true, map[string]string{}
			_, err = s.save(ctx, rolloutID, l)
			if errors.Is(err, errStale) {
				continue
			}
			if err != nil {
				uncertain = true
				return err
			}
			dropped = true
			return nil
		}
	})
	s.forget(rolloutID)
	if err != nil || !dropped {
		return false, err
	}
	// The tombstone already hides them; purging frees the space.
	return true, s.purge(ctx, rolloutID)
}

func (s *Store) purge(ctx context.Context, id string) error {
	return s.retry(ctx, "purge", func(ctx context.Context) error {
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(s.opts.Prefix+"."+token(id)+".>")); err != nil {
			return fmt.Errorf("natsstore: purge messages of %s: %w", id, err)
		}
		return nil
	})
}

// Delete forgets the rollout entirely; the id starts over from version 0
// with a new epoch.
func (s *Store) Delete(ctx context.Context, rolloutID string) error {
	if err := store.ValidateRolloutID(rolloutID); err != nil {
		return err
	}
	s.forget(rolloutID)
	err := s.retry(ctx, "delete", func(ctx context.Context) error {
		if err := s.kv.Purge(ctx, token(rolloutID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("natsstore: delete state of %s: %w", rolloutID, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.purge(ctx, rolloutID)
}

// ReadEntries returns the committed entries in stream order.
func (s *Store) ReadEntries(ctx context.Context, rolloutID string) ([]*record.Entry, error) {
	if err := store.ValidateRolloutID(rolloutID); err != nil {
		return nil, err
	}
	var entries []*record.Entry
	err := s.retryReads(ctx, "read", func(ctx context.Context) error {
		l, err := s.load(ctx, rolloutID)
		if err != nil {
			return err
		}
		entries, _, err = s.read(ctx, rolloutID, l.st, false)
		return err
	})
	return entries, err
}

// State returns the rollout's lifecycle flags, version and index as a
// store.State (for tests and inspection).
func (s *Store) State(ctx context.Context, rolloutID string) (store.State, error) {
	if err := store.ValidateRolloutID(rolloutID); err != nil {
		return store.State{}, err
	}
	var out store.State
	err := s.retry(ctx, "state", func(ctx context.Context) error {
		l, err := s.load(ctx, rolloutID)
		if err != nil {
			return err
		}
		out = store.State{Frozen: l.st.Frozen, Retired: l.st.Retired, Incomplete: l.st.Incomplete,
			SnapshotID: l.st.SnapshotID, Version: l.st.Version, EntryDigests: l.st.EntryDigests}
		return nil
	})
	return out, err
}

// Rollouts lists the rollout ids that have a state, sorted.
func (s *Store) Rollouts(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.retry(ctx, "list rollouts", func(ctx context.Context) error {
		keys, err := s.kv.Keys(ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			ids = nil
			return nil
		}
		if err != nil {
			return fmt.Errorf("natsstore: list rollouts: %w", err)
		}
		ids = ids[:0]
		for _, k := range keys {
			ids = append(ids, rolloutOf(k))
		}
		return nil
	})
	slices.Sort(ids)
	return ids, err
}

// read returns the indexed records of st's epoch in stream order and, with
// intents, the call intents of that epoch.
func (s *Store) read(ctx context.Context, id string, st *rolloutState, intents bool) ([]*record.Entry, []string, error) {
	subjects := []string{}
	if len(st.EntryDigests) > 0 {
		subjects = append(subjects, s.subject(id, kindRecord))
	}
	if intents {
		subjects = append(subjects, s.subject(id, kindIntent))
	}
	if len(subjects) == 0 {
		return nil, nil, nil
	}
	var entries []*record.Entry
	var calls []string
	seen := map[string]bool{}
	err := s.scan(ctx, subjects, func(m jetstream.Msg) error {
		h := m.Headers()
		if h.Get(hdrEpoch) != st.Epoch {
			return nil // left by a deleted incarnation of the id
		}
		if strings.HasSuffix(m.Subject(), "."+kindIntent) {
			calls = append(calls, string(m.Data()))
			return nil
		}
		call := h.Get(hdrCall)
		if want, ok := st.EntryDigests[call]; !ok || want != h.Get(hdrDigest) || seen[call] {
			return nil // never committed (lost a race with a freeze, or its writer died)
		}
		e, err := record.ParseLine(m.Data())
		if err != nil {
			return fmt.Errorf("%w: %s: record of call %q: %w", store.ErrCorrupt, id, call, err)
		}
		seen[call] = true
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(seen) != len(st.EntryDigests) {
		return nil, nil, fmt.Errorf("%w: %w: %s: the state indexes %d records but the stream %s holds %d of them",
			store.ErrCorrupt, errLagging, id, len(st.EntryDigests), s.opts.Stream, len(seen))
	}
	return entries, calls, nil
}

// scan delivers every message on subjects, in stream order, through a
// short-lived ephemeral consumer.
func (s *Store) scan(ctx context.Context, subjects []string, fn func(jetstream.Msg) error) error {
	cons, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubjects:    subjects,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: 30 * time.Second, // reaped if this client dies mid-scan
	})
	if err != nil {
		return fmt.Errorf("natsstore: read consumer: %w", err)
	}
	info := cons.CachedInfo()
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptTimeout)
		_ = s.js.DeleteConsumer(dctx, s.opts.Stream, info.Name)
		cancel()
	}()
	remaining := info.NumPending
	for remaining > 0 {
		batch, err := cons.Fetch(int(min(remaining, 32)), jetstream.FetchMaxWait(attemptTimeout))
		if err != nil {
			return fmt.Errorf("natsstore: fetch: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if err := fn(m); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("natsstore: fetch: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("natsstore: fetch: %d messages announced but none delivered", remaining)
		}
		remaining -= uint64(n)
	}
	return nil
}

var (
	_ store.Sink   = (*Store)(nil)
	_ store.Source = (*Store)(nil)
	_ store.Reader = (*Store)(nil)
)

// Look returns the rollout's state and, unless it is retired, the snapshot a
// freeze would return, without freezing it or writing anything (read-only
// inspection: capbench verdict and explain). An id with no state is
// store.ErrNoSuchRollout.
func (s *Store) Look(ctx context.Context, rolloutID string) (*store.View, error) {
	if err := store.ValidateRolloutID(rolloutID); err != nil {
		return nil, err
	}
	var v *store.View
	err := s.retryReads(ctx, "look", func(ctx context.Context) error {
		l, err := s.load(ctx, rolloutID)
		if err != nil {
			return err
		}
		if l.rev == 0 {
			return fmt.Errorf("store: rollout %s: %w", rolloutID, store.ErrNoSuchRollout)
		}
		st := l.st
		v = &store.View{State: store.State{Frozen: st.Frozen, Retired: st.Retired, Incomplete: st.Incomplete,
			SnapshotID: st.SnapshotID, Version: st.Version, EntryDigests: st.EntryDigests}}
		if st.Retired {
			return nil
		}
		entries, intents, err := s.read(ctx, rolloutID, st, true)
		if err != nil {
			return err
		}
		v.Snapshot = &store.Snapshot{
			RolloutID:  rolloutID,
			Entries:    entries,
			Incomplete: st.Incomplete || len(store.DanglingIntents(intents, entries)) > 0,
			SnapshotID: st.SnapshotID,
			Version:    st.Version,
		}
		return nil
	})
	return v, err
}
