// Package store holds captured token records per rollout: the sink the capture
// path writes to, the source the consumer freezes and retires, a file store
// whose on-disk format is interoperable with NeMo Gym's file store, and an
// in-memory store with the same semantics.
package store

import (
	"context"
	"errors"

	"github.com/capbench/capbench/capture/record"
)

// Errors callers test with errors.Is.
var (
	ErrFrozen           = errors.New("rollout already frozen")
	ErrRetired          = errors.New("rollout retired")
	ErrConflict         = errors.New("call id reused with a different payload")
	ErrInvalidRolloutID = errors.New("invalid rollout id")
	ErrCorrupt          = errors.New("corrupt capture file")
)

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
