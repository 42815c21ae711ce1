package proxy

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// errStreamIdle reports an upstream reply that sent nothing for longer than
// the stream idle timeout after its headers (docs/proxy-security.md).
type errStreamIdle struct{ after time.Duration }

func (e *errStreamIdle) Error() string {
	return fmt.Sprintf("the engine sent nothing for %s after its reply started (--stream-idle-timeout); the reply was cut", e.after)
}

// idleBody cuts an upstream reply body once no bytes have arrived for d:
// the response-header timeout ends at the headers, so without it a stream
// that stalls mid-way would hold the call (and its rollout) forever.
type idleBody struct {
	body  io.ReadCloser
	d     time.Duration
	timer *time.Timer
	fired atomic.Bool
}

// newIdleBody wraps body; cancel must abort the request the body belongs
// to, which unblocks a Read waiting on the stalled connection. d <= 0
// disables the bound.
func newIdleBody(body io.ReadCloser, d time.Duration, cancel context.CancelFunc) io.ReadCloser {
	if d <= 0 {
		return body
	}
	ib := &idleBody{body: body, d: d}
	ib.timer = time.AfterFunc(d, func() {
		ib.fired.Store(true)
		cancel()
	})
	return ib
}

func (ib *idleBody) Read(b []byte) (int, error) {
	n, err := ib.body.Read(b)
	if ib.fired.Load() {
		return n, &errStreamIdle{after: ib.d}
	}
	if n > 0 {
		ib.timer.Reset(ib.d)
	}
	return n, err
}

func (ib *idleBody) Close() error {
	ib.timer.Stop()
	return ib.body.Close()
}
