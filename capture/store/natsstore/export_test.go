package natsstore

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RawRecord builds the record message a writer publishes for callID in the
// rollout's current epoch (for specs that play a writer which died between
// publishing and committing).
func (s *Store) RawRecord(ctx context.Context, rolloutID, callID string, canonical []byte, digest string) (*nats.Msg, error) {
	if err := s.ensure(ctx, rolloutID); err != nil {
		return nil, err
	}
	l, err := s.load(ctx, rolloutID)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(s.subject(rolloutID, kindRecord))
	m.Data = canonical
	m.Header.Set(jetstream.MsgIDHeader, msgID(rolloutID, l.st.Epoch, kindRecord, callID))
	m.Header.Set(hdrEpoch, l.st.Epoch)
	m.Header.Set(hdrDigest, digest)
	m.Header.Set(hdrCall, callID)
	return m, nil
}

// JetStream is the client's JetStream context.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Messages counts the stream's messages on the rollout's subjects.
func (s *Store) Messages(ctx context.Context, rolloutID string) (int, error) {
	n := 0
	err := s.scan(ctx, []string{s.opts.Prefix + "." + token(rolloutID) + ".>"}, func(jetstream.Msg) error { n++; return nil })
	return n, err
}

// Retried reports whether the store's retry loop tries err again.
func Retried(err error) bool { return !permanent(err) }

// ErrLagging is the mark of a read that is behind the state.
var ErrLagging = errLagging
