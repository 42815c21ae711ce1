package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/capbench/capbench/capture/store"
)

// A store that writes call intents ahead of their durability
// (store.IntentWriter: the file store) gets each intent written before the
// call is forwarded, where a killed proxy still leaves it, and synced only
// when the call is answered without a record: a call whose record was put
// is durable through the record, and on the file store the record's sync
// would have covered the intent's anyway. So a captured non-streamed call
// waits for one sync instead of two, and a streamed call's intent is synced
// while the engine works on its first token
// (docs/capture-path.md#one-captured-call-in-order).

// errIntentNotDurable is what a handler's writes get once the intent could
// not be made durable and the client was answered with an error instead.
var errIntentNotDurable = errors.New("proxy: the call intent could not be made durable; the reply was withheld")

// writeIntent registers the call intent: written ahead when the store can,
// else durable at once (BeginCall). A streamed call's sync starts now, so it
// runs while the engine generates.
func (p *Proxy) writeIntent(ctx context.Context, cc *callCtx, stream bool) error {
	iw, ok := p.opts.Store.(store.IntentWriter)
	if !ok {
		return p.opts.Store.BeginCall(ctx, cc.rt.RolloutID, cc.callID)
	}
	if err := iw.WriteIntent(ctx, cc.rt.RolloutID, cc.callID); err != nil {
		return err
	}
	cc.intent = &pendingIntent{sync: func() error { return p.syncIntent(ctx, iw, cc.rt.RolloutID) }}
	if stream {
		cc.intent.early = make(chan error, 1)
		go func() { cc.intent.early <- cc.intent.sync() }()
	}
	return nil
}

// syncIntent makes the rollout's written intents durable, even for a client
// that has gone (a dangling intent must mask the rollout either way).
func (p *Proxy) syncIntent(ctx context.Context, iw store.IntentWriter, rolloutID string) error {
	start := time.Now()
	err := iw.SyncIntents(context.WithoutCancel(ctx), rolloutID)
	p.metrics.storeLatency.WithLabelValues("sync_intents").Observe(time.Since(start).Seconds())
	return err
}

// pendingIntent is a call intent written but not yet known durable.
type pendingIntent struct {
	sync     func() error
	early    chan error // a sync started beside the engine call, when non-nil
	recorded bool       // the call's record was put: no sync is needed
}

// settle makes the intent durable unless the record made it unneeded.
func (pi *pendingIntent) settle() error {
	if pi.early != nil {
		return <-pi.early
	}
	if pi.recorded {
		return nil
	}
	return pi.sync()
}

// intentGate holds a call's reply until its pending intent is settled. If
// the intent cannot be made durable, the client gets a 503 in the dialect's
// envelope instead of the reply (the call can be retried; it would otherwise
// be lost without a trace on a crash), and every later write fails.
type intentGate struct {
	http.ResponseWriter
	cc      *callCtx
	errw    errorWriter
	settled bool
	failed  bool
}

// open settles the intent on the reply's first write; it reports whether
// the reply may go on.
func (g *intentGate) open() bool {
	if g.settled {
		return !g.failed
	}
	g.settled = true
	err := g.cc.intent.settle()
	if err == nil {
		return true
	}
	g.failed = true
	g.cc.log.Error("the call intent could not be made durable; the reply was withheld", "err", err)
	h := g.ResponseWriter.Header()
	for _, k := range []string{"Content-Type", "Content-Length", "Cache-Control"} {
		h.Del(k)
	}
	g.errw(g.ResponseWriter, http.StatusServiceUnavailable, fmt.Sprintf(
		"the capture store could not make the call intent of rollout %s durable (%s), so the reply was withheld and "+
			"nothing of this call was recorded. Check the proxy's log and the capture disk, then retry the call",
		strconv.Quote(g.cc.rt.RolloutID), storeErrorKind(err)))
	return false
}

func (g *intentGate) WriteHeader(code int) {
	if g.open() {
		g.ResponseWriter.WriteHeader(code)
	}
}

func (g *intentGate) Write(b []byte) (int, error) {
	if !g.open() {
		return 0, errIntentNotDurable
	}
	return g.ResponseWriter.Write(b)
}

func (g *intentGate) Flush() {
	if g.open() {
		if f, ok := g.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

func (g *intentGate) Unwrap() http.ResponseWriter { return g.ResponseWriter }
