package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capbench/capbench/internal/h1"
)

// Limits bound what one client can make the proxy hold: body bytes in
// flight, time to send a request, connections, and time waiting on the
// upstream. Zero fields take the defaults below; see docs/proxy-security.md.
type Limits struct {
	// MaxInflightBodyBytes is the admission budget: the sum of the request
	// bodies being handled at once (a body costs many times its size while
	// it is decoded and re-encoded). A request that does not fit waits up to
	// AdmissionWait, then gets 503 with Retry-After. Default: twice
	// Options.MaxBodyBytes. A body without Content-Length is charged
	// Options.MaxBodyBytes.
	MaxInflightBodyBytes int64
	// AdmissionWait is how long a request may queue for the budget.
	AdmissionWait time.Duration
	// ReadHeaderTimeout bounds the time to receive a request's headers,
	// from the connection's first byte or its last request.
	ReadHeaderTimeout time.Duration
	// ReadBodyTimeout bounds the time to receive a request's whole body.
	// It is not a limit on the reply: long streams are unaffected.
	ReadBodyTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration
	// MaxConnections caps open client connections. At the cap the oldest
	// idle keep-alive connection is closed to make room; when none is idle
	// new connections wait in the listen queue. Default: half the process's
	// descriptor limit (each call also holds an upstream connection and store
	// files), at most DefaultMaxConnections.
	MaxConnections int
	// UpstreamTimeout bounds the wait for the upstream's response headers
	// (for a non-streamed call: the whole generation). It applies to the
	// proxy's own upstream client, not to Options.Client.
	UpstreamTimeout time.Duration
	// StreamIdleTimeout cuts an upstream reply that sends no bytes for this
	// long after its headers (a stream stalled mid-way); the rollout is
	// marked incomplete. Default: UpstreamTimeout.
	StreamIdleTimeout time.Duration
}

// Limit defaults.
const (
	DefaultAdmissionWait     = 10 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadBodyTimeout   = 2 * time.Minute
	DefaultIdleTimeout       = 90 * time.Second
	DefaultMaxConnections    = 4096
	DefaultUpstreamTimeout   = 10 * time.Minute
)

// withDefaults validates l against the body limit and fills in defaults.
// Errors name the `capbench proxy` flags.
func (l Limits) withDefaults(maxBody int64) (Limits, error) {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--admission-wait", l.AdmissionWait}, {"--read-header-timeout", l.ReadHeaderTimeout},
		{"--read-body-timeout", l.ReadBodyTimeout}, {"--idle-timeout", l.IdleTimeout},
		{"--upstream-timeout", l.UpstreamTimeout}, {"--stream-idle-timeout", l.StreamIdleTimeout},
	} {
		if d.v < 0 {
			return l, fmt.Errorf("proxy: %s %s is negative", d.flag, d.v)
		}
	}
	if l.MaxConnections < 0 {
		return l, fmt.Errorf("proxy: --max-connections %d is negative", l.MaxConnections)
	}
	if l.MaxInflightBodyBytes < 0 {
		return l, fmt.Errorf("proxy: --max-inflight-body-bytes %d is negative", l.MaxInflightBodyBytes)
	}
	if l.MaxInflightBodyBytes == 0 {
		l.MaxInflightBodyBytes = 2 * maxBody
	}
	if l.MaxInflightBodyBytes < maxBody {
		return l, fmt.Errorf("proxy: --max-inflight-body-bytes %d is below --max-body-bytes %d: a body of the allowed size could never be admitted",
			l.MaxInflightBodyBytes, maxBody)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.AdmissionWait, DefaultAdmissionWait)
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.ReadBodyTimeout, DefaultReadBodyTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	def(&l.UpstreamTimeout, DefaultUpstreamTimeout)
	def(&l.StreamIdleTimeout, l.UpstreamTimeout)
	if l.MaxConnections == 0 {
		l.MaxConnections = defaultMaxConnections(openFileLimit())
	}
	return l, nil
}

// DefaultOpenRollouts is how many idle rollouts a file store in front of
// this proxy may keep descriptors for (three each): a twelfth of the
// descriptor limit, between 4 and 256, so that the store's descriptors and
// the connection limit's half of them fit together.
func DefaultOpenRollouts() int {
	nofile := openFileLimit()
	if nofile == 0 {
		return 256
	}
	return min(256, max(4, int(nofile/12)))
}

// defaultMaxConnections keeps client connections to half the descriptors,
// so that a flood of them cannot starve the upstream and the store.
func defaultMaxConnections(nofile uint64) int {
	if nofile == 0 || nofile/2 >= DefaultMaxConnections {
		return DefaultMaxConnections
	}
	return max(16, int(nofile/2))
}

// admission is a FIFO weighted semaphore over body bytes. FIFO keeps a large
// body from starving behind a stream of small ones.
type admission struct {
	mu      sync.Mutex
	free    int64
	waiters []*waiter
	held    atomic.Int64 // bytes admitted now, for the gauge
}

type waiter struct {
	n     int64
	ready chan struct{}
}

func newAdmission(budget int64) *admission { return &admission{free: budget} }

// acquire reserves n bytes, waiting at most wait (or until ctx ends). n
// never exceeds the budget (bodies over --max-body-bytes are refused before
// admission). The wait's timer is only made when the call must queue.
func (a *admission) acquire(ctx context.Context, n int64, wait time.Duration) error {
	a.mu.Lock()
	if len(a.waiters) == 0 && a.free >= n {
		a.free -= n
		a.mu.Unlock()
		a.held.Add(n)
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	a.waiters = append(a.waiters, w)
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	select {
	case <-w.ready:
		a.held.Add(n)
		return nil
	case <-ctx.Done():
		a.mu.Lock()
		select {
		case <-w.ready: // granted while giving up: hand it back
			a.mu.Unlock()
			a.held.Add(n)
			a.release(n)
			return ctx.Err()
		default:
		}
		for i, x := range a.waiters {
			if x == w {
				a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
				break
			}
		}
		a.grantLocked() // the head may have changed
		a.mu.Unlock()
		return ctx.Err()
	}
}

func (a *admission) release(n int64) {
	a.held.Add(-n)
	a.mu.Lock()
	a.free += n
	a.grantLocked()
	a.mu.Unlock()
}

// grantLocked admits waiters from the head while they fit.
func (a *admission) grantLocked() {
	for len(a.waiters) > 0 && a.waiters[0].n <= a.free {
		w := a.waiters[0]
		a.waiters = a.waiters[1:]
		a.free -= w.n
		close(w.ready)
	}
}

// connLimiter caps accepted connections. At the cap it closes the oldest
// idle keep-alive connection, so a flood of idle clients cannot lock out
// real callers; connections that never send a request are ended by
// ReadHeaderTimeout.
type connLimiter struct {
	net.Listener
	slots   chan struct{}
	done    chan struct{}
	once    sync.Once
	waiting atomic.Bool

	mu   sync.Mutex
	idle map[*limitedConn]time.Time
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: ln, slots: make(chan struct{}, max), done: make(chan struct{}),
		idle: map[*limitedConn]time.Time{}}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		l.waiting.Store(true)
		l.shedOldestIdle()
		select {
		case l.slots <- struct{}{}:
			l.waiting.Store(false)
		case <-l.done:
			l.waiting.Store(false)
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, l: l}, nil
}

func (l *connLimiter) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *connLimiter) shedOldestIdle() {
	l.mu.Lock()
	var oldest *limitedConn
	var at time.Time
	for c, t := range l.idle {
		if oldest == nil || t.Before(at) {
			oldest, at = c, t
		}
	}
	if oldest != nil {
		delete(l.idle, oldest)
	}
	l.mu.Unlock()
	if oldest != nil {
		_ = oldest.Close()
	}
}

// connState is the http.Server hook that tracks idle connections.
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	if st != http.StateIdle {
		l.mu.Lock()
		delete(l.idle, lc)
		l.mu.Unlock()
		return
	}
	if l.waiting.Load() {
		// Someone waits for a slot: this idle connection gives it up.
		_ = lc.Close()
		return
	}
	l.mu.Lock()
	l.idle[lc] = time.Now()
	l.mu.Unlock()
}

// limitedConn frees its slot once, on the first Close.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}

// newServer is the http.Server Start runs, with the limits applied.
func (p *Proxy) newServer(ctx context.Context, ln net.Listener) (*http.Server, net.Listener) {
	lim := newConnLimiter(ln, p.opts.Limits.MaxConnections)
	l := p.opts.Limits
	p.log.Info("proxy limits", "max_connections", l.MaxConnections, "read_header_timeout", l.ReadHeaderTimeout,
		"read_body_timeout", l.ReadBodyTimeout, "idle_timeout", l.IdleTimeout, "upstream_timeout", l.UpstreamTimeout, "stream_idle_timeout", l.StreamIdleTimeout,
		"max_body_bytes", p.opts.MaxBodyBytes, "max_inflight_body_bytes", l.MaxInflightBodyBytes, "rollout_tokens", p.opts.RolloutSecret != "")
	return &http.Server{
		Handler:           p.handler,
		ReadHeaderTimeout: p.opts.Limits.ReadHeaderTimeout,
		IdleTimeout:       p.opts.Limits.IdleTimeout,
		ConnState:         lim.connState,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}, lim
}

// applyUpstreamTimeout sets the response-header timeout on the proxy's own
// upstream transport.
func (p *Proxy) applyUpstreamTimeout() {
	if p.opts.Client != nil {
		return
	}
	t := p.client.Transport
	if lean, ok := t.(*h1.Transport); ok {
		lean.ResponseHeaderTimeout = p.opts.Limits.UpstreamTimeout
		t = lean.Fallback
	}
	if std, ok := t.(*http.Transport); ok {
		std.ResponseHeaderTimeout = p.opts.Limits.UpstreamTimeout
	}
}
