// Package natsstore is a capture store on NATS JetStream, for capture
// proxies on several nodes that write one rollout's calls wherever they
// land. It implements the same Sink, Source and Reader interfaces as the
// file store, with the same semantics (proven by the conformance kit):
//
//   - records are messages on <prefix>.<rollout>.rec whose message id is the
//     call id (scoped by rollout and its epoch), so a retried publish inside
//     the stream's duplicate window is stored once;
//   - the rollout state (lifecycle flags, version, call id → entry digest
//     index) is one key of a KV bucket, changed only by compare-and-set: a
//     record is committed when its digest enters the index, and freeze and
//     drop are revision-checked updates of the same key;
//   - call intents and incomplete marks are messages on .int and .lost.
//
// Readers return only indexed records, so a message whose put lost the race
// against a freeze (or whose writer died before committing) is never seen.
// docs/nats-store.md describes the layout and when to choose this store.
package natsstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capbench/capbench/capture/store"
)

// Defaults of Options.
const (
	DefaultStream     = "CAPBENCH_CAPTURE"
	DefaultBucket     = "capbench_rollouts"
	DefaultPrefix     = "capbench.capture"
	DefaultDuplicates = 2 * time.Minute
	DefaultOpTimeout  = 30 * time.Second
	attemptTimeout    = 5 * time.Second
)

// Options configure a Store. Only URL is required.
type Options struct {
	// URL lists the servers, comma-separated: nats://host:4222[,nats://...].
	URL string
	// Stream holds records, intents and marks; Bucket is the KV bucket of
	// rollout states; Prefix is the subject prefix of the stream.
	Stream, Bucket, Prefix string
	// Replicas of the stream and the bucket (1 for a single server).
	Replicas int
	// Duplicates is the stream's duplicate window.
	Duplicates time.Duration
	// OpTimeout bounds one store operation including its retries across
	// reconnects; past it the operation fails (and the proxy marks the
	// rollout incomplete).
	OpTimeout time.Duration
	// Name is the client connection name shown by the server.
	Name string
}

// ParseURL reads a store URL: nats://host:port[,host:port...][?stream=S&bucket=B&prefix=P&replicas=N&op_timeout=30s].
func ParseURL(raw string) (Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Options{}, fmt.Errorf("natsstore: store URL %q does not parse; want nats://host:port", Redacted(raw))
	}
	shown := u.Redacted()
	if u.Scheme != "nats" {
		return Options{}, fmt.Errorf("natsstore: store URL %q: scheme %q, want nats://host:port", shown, u.Scheme)
	}
	if u.Host == "" {
		return Options{}, fmt.Errorf("natsstore: store URL %q has no host; want nats://host:port", shown)
	}
	if u.Path != "" && u.Path != "/" {
		return Options{}, fmt.Errorf("natsstore: store URL %q: unexpected path %q; options go in the query (?stream=...&bucket=...)", shown, u.Path)
	}
	creds := ""
	if u.User != nil {
		creds = u.User.String() + "@" // every server of the list gets them
	}
	var servers []string
	for _, h := range strings.Split(u.Host, ",") {
		servers = append(servers, "nats://"+creds+h)
	}
	o := Options{URL: strings.Join(servers, ",")}
	q := u.Query()
	for k := range q {
		switch k {
		case "stream", "bucket", "prefix", "replicas", "op_timeout", "duplicates", "name":
		default:
			return Options{}, fmt.Errorf("natsstore: store URL %q: unknown option %q (known: stream, bucket, prefix, replicas, duplicates, op_timeout, name)", shown, k)
		}
	}
	o.Stream, o.Bucket, o.Prefix, o.Name = q.Get("stream"), q.Get("bucket"), q.Get("prefix"), q.Get("name")
	if v := q.Get("replicas"); v != "" {
		if o.Replicas, err = strconv.Atoi(v); err != nil || o.Replicas < 1 {
			return Options{}, fmt.Errorf("natsstore: store URL %q: replicas=%q, want a positive integer", shown, v)
		}
	}
	for key, dst := range map[string]*time.Duration{"op_timeout": &o.OpTimeout, "duplicates": &o.Duplicates} {
		if v := q.Get(key); v != "" {
			if *dst, err = time.ParseDuration(v); err != nil || *dst <= 0 {
				return Options{}, fmt.Errorf("natsstore: store URL %q: %s=%q, want a positive duration such as 30s", shown, key, v)
			}
		}
	}
	return o, nil
}

// Redacted is raw with any password replaced by "xxxxx", for messages.
func Redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			return "nats://xxxxx" + raw[i:]
		}
		return raw
	}
	return u.Redacted()
}

func (o *Options) fill() error {
	if o.URL == "" {
		return errors.New("natsstore: no server URL (want nats://host:port)")
	}
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, " *>") || strings.HasPrefix(o.Prefix, ".") || strings.HasSuffix(o.Prefix, ".") {
		return fmt.Errorf("natsstore: prefix %q is not a subject prefix (dot-separated tokens, no wildcards)", o.Prefix)
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Duplicates == 0 {
		o.Duplicates = DefaultDuplicates
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.Name == "" {
		o.Name = "capbench"
	}
	return nil
}

// Store is a capture store client. It is safe for concurrent use; open one
// per process.
type Store struct {
	opts   Options
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	kv     jetstream.KeyValue

	cacheMu sync.Mutex
	cache   map[string]loaded // states this client last wrote
}

// Open connects and creates the stream and the bucket when missing (an
// existing one with the same name is updated to this configuration).
func Open(ctx context.Context, o Options) (*Store, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(o.URL,
		nats.Name(o.Name),
		nats.MaxReconnects(-1), // a store outlives server restarts
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.Timeout(attemptTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("natsstore: connect %s: %w", redactList(o.URL), err)
	}
	s := &Store{opts: o, nc: nc}
	if err := s.setup(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) setup(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("natsstore: jetstream: %w", err)
	}
	s.js = js
	return s.retry(ctx, "create stream and bucket", func(ctx context.Context) error {
		st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        s.opts.Stream,
			Description: "capbench capture records, call intents and incomplete marks",
			Subjects:    []string{s.opts.Prefix + ".>"},
			Storage:     jetstream.FileStorage,
			Replicas:    s.opts.Replicas,
			Duplicates:  s.opts.Duplicates,
			Discard:     jetstream.DiscardNew, // never evict evidence silently
		})
		if err != nil {
			return fmt.Errorf("natsstore: stream %s: %w", s.opts.Stream, err)
		}
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      s.opts.Bucket,
			Description: "capbench rollout states",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    s.opts.Replicas,
		})
		if err != nil {
			return fmt.Errorf("natsstore: bucket %s: %w", s.opts.Bucket, err)
		}
		s.stream, s.kv = st, kv
		return nil
	})
}

// Close drains nothing and closes the connection; every acknowledged
// operation is already stored on the server.
func (s *Store) Close() error {
	s.nc.Close()
	return nil
}

// MaxRecordBytes is the largest canonical record the connected server
// accepts (its max_payload less room for headers).
func (s *Store) MaxRecordBytes() int64 { return s.nc.MaxPayload() - headerRoom }

const headerRoom = 1024

// permanent reports errors a retry cannot fix: store semantics, bad input,
// a closed client.
func permanent(err error) bool {
	if errors.Is(err, errLagging) {
		return false // read again: the replica catches up within the budget
	}
	for _, e := range []error{
		store.ErrFrozen, store.ErrRetired, store.ErrConflict, store.ErrInvalidRolloutID,
		store.ErrInvalidCallID, store.ErrCorrupt, errTooLarge, nats.ErrConnectionClosed,
		nats.ErrMaxPayload, nats.ErrBadSubject,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ae *jetstream.APIError
	return errors.As(err, &ae) && ae.Code == 400 && ae.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence
}

var errTooLarge = errors.New("record larger than the server's max_payload")

// errLagging marks a read that found fewer of the state's indexed records
// than it names. On a replicated stream the read's ephemeral consumer may sit
// on a replica that has not yet applied the latest acknowledged publish (a
// quorum acknowledged it), so the read is tried again within the
// operation's budget before the rollout is called corrupt.
var errLagging = errors.New("the stream read is behind the state")

// retry runs f until it succeeds, fails permanently, or the operation's
// budget (OpTimeout, or ctx) ends. Each attempt has its own deadline so a
// request lost in a disconnect is sent again; f must be idempotent, which
// every operation here is by construction (message ids, digest index,
// revision checks).
func (s *Store) retry(ctx context.Context, op string, f func(ctx context.Context) error) error {
	return s.retryEach(ctx, op, attemptTimeout, f)
}

// retryReads is retry for operations that read a whole rollout (freeze,
// read): one attempt may take the whole budget, as a large rollout takes
// long to stream.
func (s *Store) retryReads(ctx context.Context, op string, f func(ctx context.Context) error) error {
	return s.retryEach(ctx, op, s.opts.OpTimeout, f)
}

func (s *Store) retryEach(ctx context.Context, op string, each time.Duration, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.OpTimeout)
	defer cancel()
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, each)
		err := f(actx)
		acancel()
		if err == nil || permanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("natsstore: %s: gave up after %d attempts in %s: %w", op, attempt, s.opts.OpTimeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natsstore: %s: gave up after %d attempts: %w", op, attempt, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// redactList redacts each URL of a comma-separated server list.
func redactList(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = Redacted(p)
	}
	return strings.Join(parts, ",")
}
