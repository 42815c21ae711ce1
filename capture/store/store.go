// Package store holds captured token records per rollout: the sink the capture
// path writes to, the source the consumer freezes and retires, a file store
// whose on-disk format is interoperable with NeMo Gym's file store, and an
// in-memory store with the same semantics.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/capbench/capbench/capture/record"
)

// Errors callers test with errors.Is.
var (
	ErrFrozen           = errors.New("rollout already frozen")
	ErrRetired          = errors.New("rollout retired")
	ErrConflict         = errors.New("call id reused with a different payload")
	ErrInvalidRolloutID = errors.New("invalid rollout id")
	ErrCorrupt          = errors.New("corrupt capture file")
	// ErrInvalidCallID reports a model call id that cannot be written to the
	// line-oriented intents and incomplete files (it contains a line break).
	ErrInvalidCallID = errors.New("invalid model call id")
)

// MaxRolloutIDLen is the longest rollout id whose file names fit in 255
// bytes with the longest suffix (".tokens.state.json", ".tokens.incomplete").
const MaxRolloutIDLen = 255 - len(".tokens.incomplete")

// ValidateRolloutID applies the file store's rule (docs/store.md#files-per-rollout): non-empty,
// and every character an ASCII letter, ASCII digit, '.', '_' or '-'. It is
// exactly Python's rule, so a leading '.' or '-' is accepted and Gym-written
// directories stay readable; what matters is that no id can name a path
// outside the store directory.
//
// An id is also at most MaxRolloutIDLen bytes, so that every file name of
// the rollout fits in a file name (255 bytes): a longer id would fail at the
// first file, after its lock file was created.
func ValidateRolloutID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidRolloutID)
	}
	if len(id) > MaxRolloutIDLen {
		return fmt.Errorf("%w: %d bytes long; at most %d fit in the store's file names",
			ErrInvalidRolloutID, len(id), MaxRolloutIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q (byte %d is not an ASCII letter, digit, '.', '_' or '-')",
				ErrInvalidRolloutID, id, i)
		}
	}
	return nil
}

// ValidateCall checks the ids of a call intent or a lost call before any
// file (or message) is written.
func ValidateCall(rolloutID, callID string) error {
	if err := ValidateRolloutID(rolloutID); err != nil {
		return err
	}
	return validateCallID(callID)
}

// validateCallID rejects call ids that would split a line of the intents or
// incomplete file. Python does not check this; a Go writer must not corrupt
// the files a Python reader parses line by line.
func validateCallID(id string) error {
	if strings.ContainsAny(id, "\r\n") {
		return fmt.Errorf("%w: %q contains a line break", ErrInvalidCallID, id)
	}
	return nil
}

// DurableConflictError reports two durable lines of one rollout that carry
// the same call id with different payloads (a writer that bypassed the
// index, such as an at-least-once transport). Its text is the one NeMo Gym's
// store raises, because consumers persist it as the rollout's error.
type DurableConflictError struct {
	RolloutID, CallID string
}

func (e *DurableConflictError) Error() string {
	return fmt.Sprintf("Model call id '%s' has conflicting durable payloads for rollout '%s'", e.CallID, e.RolloutID)
}

// Unwrap makes the error match ErrConflict.
func (e *DurableConflictError) Unwrap() error { return ErrConflict }

// Snapshot is the frozen content of one rollout.
type Snapshot struct {
	RolloutID  string
	Entries    []*record.Entry
	Incomplete bool
	SnapshotID string
	Version    int
}

// Sink is the write side used by the capture path.
type Sink interface {
	Put(ctx context.Context, e *record.Entry) error
	MarkIncomplete(ctx context.Context, rolloutID, callID string) error
	BeginCall(ctx context.Context, rolloutID, callID string) error
	Close() error
}

// CanonicalSink is a Sink that also takes an entry already encoded: the
// canonical line EncodeLine returned for it, and nothing else. It returns
// the line's entry digest, which it computes where that costs the put
// least. A caller that needs the line and digest too (a proxy telling its
// follower what it wrote) then encodes and hashes the entry once.
type CanonicalSink interface {
	PutCanonical(ctx context.Context, e *record.Entry, canonical []byte) (digest string, err error)
}

// IntentWriter is a Sink whose call intents can be written ahead of their
// durability (docs/store.md#intents-made-durable-once). WriteIntent is
// BeginCall without the wait for the intent to be durable: it returns once
// the line is written (a process killed after it leaves the line behind) or
// refuses the call as BeginCall would. SyncIntents makes every intent of the
// rollout written so far durable. A caller that writes intents this way
// makes them durable before it answers a call whose record it did not put:
// a call whose record is durable needs no intent.
type IntentWriter interface {
	WriteIntent(ctx context.Context, rolloutID, callID string) error
	SyncIntents(ctx context.Context, rolloutID string) error
}

// Source is the read side used by the consumer.
type Source interface {
	Freeze(ctx context.Context, rolloutID string) (*Snapshot, error)
	Drop(ctx context.Context, rolloutID, snapshotID string, version int) (bool, error)
	Close() error
}

// Reader reads the committed entries of a rollout without freezing it (used by
// request-time parent resolution).
type Reader interface {
	ReadEntries(ctx context.Context, rolloutID string) ([]*record.Entry, error)
}
