// Package h1 is a lean HTTP/1.1 round tripper for plain-http upstreams
// (vLLM on loopback or a private network). Each request is written and its
// reply read on the calling goroutine, over a pooled keep-alive connection.
// net/http's Transport hands every exchange to two goroutines per
// connection (a reader and a writer) and back; at tens of thousands of small
// calls a second that handoff is a large share of a proxy's CPU.
//
// What it does not do (https, proxies from the environment, request bodies
// of unknown length, upgrades, Expect: 100-continue) it hands to a fallback
// http.RoundTripper, so it can stand wherever a Transport does.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transport is an http.RoundTripper; the zero value is not usable: use New.
type Transport struct {
	// Fallback serves the requests this transport does not.
	Fallback http.RoundTripper
	// ResponseHeaderTimeout bounds the wait for a reply's headers after the
	// request was written; 0 = no bound.
	ResponseHeaderTimeout time.Duration
	// IdleTimeout is how long a kept connection may sit unused before it is
	// closed instead of reused. It should be below the server's own
	// keep-alive timeout (uvicorn, which serves vLLM: 5 s), so the transport
	// rarely picks a connection the server is closing.
	IdleTimeout time.Duration
	// MaxIdlePerHost bounds the kept connections per host.
	MaxIdlePerHost int

	dialer net.Dialer
	mu     sync.Mutex
	pools  map[string]*pool
}

// New returns a Transport with fallback for what it does not serve.
func New(fallback http.RoundTripper) *Transport {
	return &Transport{
		Fallback:       fallback,
		IdleTimeout:    4 * time.Second,
		MaxIdlePerHost: 512,
		dialer:         net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		pools:          map[string]*pool{},
	}
}

// RoundTrip sends req and returns its reply; the reply's Body returns the
// connection to the pool when read to its end and closed.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.serves(req) {
		return t.fallback(req)
	}
	addr := hostPort(req.URL.Host)
	p := t.pool(addr)
	for attempt := 0; ; attempt++ {
		c, reused, err := p.get(req.Context(), t)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := t.exchange(req, c)
		if err == nil {
			return resp, nil
		}
		// A kept connection the server closed while it sat idle fails
		// before any reply byte; the body is a []byte we can send again.
		if reused && attempt == 0 && errors.Is(err, errNoReply) && ctxErr(req.Context()) == nil && rewind(req) {
			continue
		}
		closeBody(req)
		return nil, err
	}
}

// CloseIdleConnections closes every kept connection, and the fallback's.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	pools := t.pools
	t.pools = map[string]*pool{}
	t.mu.Unlock()
	for _, p := range pools {
		p.closeIdle()
	}
	if ci, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func (t *Transport) fallback(req *http.Request) (*http.Response, error) {
	if t.Fallback == nil {
		closeBody(req)
		return nil, fmt.Errorf("h1: no fallback transport for %s %s", req.Method, req.URL.Redacted())
	}
	return t.Fallback.RoundTrip(req)
}

// serves reports whether req is one this transport sends itself.
func (t *Transport) serves(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" || req.Method == http.MethodConnect {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && (req.ContentLength <= 0 || req.GetBody == nil) {
		return false // a length we do not know, or a body we could not resend
	}
	if req.Close || req.Header.Get("Expect") != "" || req.Header.Get("Upgrade") != "" || len(req.TransferEncoding) > 0 {
		return false
	}
	if proxied, err := http.ProxyFromEnvironment(req); err != nil || proxied != nil {
		return false
	}
	return validHeaders(req.Header)
}

func (t *Transport) pool(addr string) *pool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pools[addr]
	if p == nil {
		p = &pool{addr: addr, max: max(t.MaxIdlePerHost, 1), idleFor: t.IdleTimeout}
		t.pools[addr] = p
	}
	return p
}

// errNoReply marks a failure before any byte of the reply arrived.
var errNoReply = errors.New("connection closed before any reply")

// exchange writes req on c and reads the reply's head.
func (t *Transport) exchange(req *http.Request, c *conn) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = c.nc.Close()
		if cerr := ctxErr(ctx); cerr != nil {
			return nil, fmt.Errorf("%w (%v)", cerr, err)
		}
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(d)
	}
	if err := writeRequest(c.bw, req); err != nil {
		return fail(fmt.Errorf("%w: writing the request: %v", errNoReply, err))
	}
	if t.ResponseHeaderTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(t.ResponseHeaderTimeout))
	}
	resp, err := readResponse(c.br, req)
	if err != nil {
		if isTimeout(err) && ctxErr(ctx) == nil && t.ResponseHeaderTimeout > 0 {
			err = &timeoutError{"h1: timeout awaiting response headers"}
		}
		return fail(err)
	}
	if t.ResponseHeaderTimeout > 0 {
		d, _ := ctx.Deadline()
		_ = c.nc.SetReadDeadline(d)
	}
	b := &body{conn: c, stop: stop, t: t}
	b.r, b.chunked = framing(c.br, resp)
	b.keep = !resp.Close
	b.eof = resp.ContentLength == 0 && !b.chunked
	resp.Body = b
	return resp, nil
}

// ctxErr is ctx's error, or DeadlineExceeded once its deadline has passed:
// the connection's deadline, set to ctx's, can fire a moment before ctx's
// own timer does.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// timeoutError is a net.Error that says it timed out, as net/http's is.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func hostPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// rewind replaces req's body with a fresh copy for a second attempt.
func rewind(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	b, err := req.GetBody()
	if err != nil {
		return false
	}
	req.Body = b
	return true
}

// validHeaders refuses header values that could split the request; the
// fallback then applies net/http's own checks and error.
func validHeaders(h http.Header) bool {
	for k, vs := range h {
		if strings.ContainsAny(k, "\r\n: ") {
			return false
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				return false
			}
		}
	}
	return true
}

// writeRequest writes req's head and body and flushes.
func writeRequest(w *bufio.Writer, req *http.Request) error {
	path := req.URL.RequestURI()
	_, _ = w.WriteString(req.Method)
	_ = w.WriteByte(' ')
	_, _ = w.WriteString(path)
	_, _ = w.WriteString(" HTTP/1.1\r\nHost: ")
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	_, _ = w.WriteString(host)
	_, _ = w.WriteString("\r\n")
	if req.Header.Get("User-Agent") == "" {
		_, _ = w.WriteString("User-Agent: Go-http-client/1.1\r\n")
	}
	for k, vs := range req.Header {
		if k == "Host" || k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vs {
			_, _ = w.WriteString(k)
			_, _ = w.WriteString(": ")
			_, _ = w.WriteString(v)
			_, _ = w.WriteString("\r\n")
		}
	}
	if req.ContentLength > 0 || methodWantsLength(req.Method) {
		_, _ = w.WriteString("Content-Length: ")
		_, _ = w.WriteString(strconv.FormatInt(max(req.ContentLength, 0), 10))
		_, _ = w.WriteString("\r\n")
	}
	_, _ = w.WriteString("\r\n")
	if req.Body != nil && req.Body != http.NoBody {
		n, err := io.Copy(w, io.LimitReader(req.Body, req.ContentLength))
		_ = req.Body.Close()
		if err != nil {
			return err
		}
		if n != req.ContentLength {
			return fmt.Errorf("request body is %d bytes, not the %d its ContentLength says", n, req.ContentLength)
		}
	}
	return w.Flush()
}

func methodWantsLength(m string) bool {
	return m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch
}
