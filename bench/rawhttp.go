package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/capbench/capbench/internal/h1"
)

// rawClient is a minimal HTTP/1.1 client for plain-http load: one
// pre-encoded request per call on a pooled keep-alive connection, read on
// the calling goroutine. net/http's client hands every reply through two
// goroutines per connection, which costs the generator about half its rate
// next to wrk; https and proxies still go through net/http.
type rawClient struct {
	addr, host string
	idle       chan *rawConn
	dialer     net.Dialer
}

type rawConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// newRawClient returns a client for base, or nil when base is not plain http.
func newRawClient(base string) *rawClient {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &rawClient{addr: addr, host: u.Host, idle: make(chan *rawConn, 4096), dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}}
}

func (rc *rawClient) get(ctx context.Context) (*rawConn, error) {
	select {
	case c := <-rc.idle:
		return c, nil
	default:
	}
	c, err := rc.dialer.DialContext(ctx, "tcp", rc.addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 32<<10), bw: bufio.NewWriterSize(c, 16<<10)}, nil
}

func (rc *rawClient) put(c *rawConn) {
	select {
	case rc.idle <- c:
	default:
		_ = c.c.Close()
	}
}

// closeIdle closes every pooled connection.
func (rc *rawClient) closeIdle() {
	for {
		select {
		case c := <-rc.idle:
			_ = c.c.Close()
		default:
			return
		}
	}
}

// rawReply is a reply being read; Close returns the connection to the pool
// when the body was read to its end.
type rawReply struct {
	Status int
	Body   io.Reader
	rc     *rawClient
	conn   *rawConn
	body   *bodyTracker
	keep   bool
	stop   func() bool
}

type bodyTracker struct {
	r io.Reader
	// trailer, for a chunked body, is where the trailer section follows the
	// last chunk; it is read at the end so the next reply starts clean.
	trailer *bufio.Reader
	eof     bool
	bad     bool
}

func (b *bodyTracker) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) && !b.eof {
		b.eof = true
		if b.trailer != nil && h1.SkipTrailer(b.trailer) != nil {
			b.bad = true
		}
	}
	return n, err
}

func (r *rawReply) Close() {
	r.stop()
	if r.keep && !r.body.eof {
		// Drain a short tail so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.body, maxDrain))
	}
	if r.keep && r.body.eof && !r.body.bad {
		_ = r.conn.c.SetDeadline(time.Time{})
		r.rc.put(r.conn)
		return
	}
	_ = r.conn.c.Close()
}

// post sends one POST and reads the status line and headers.
func (rc *rawClient) post(ctx context.Context, path string, header []byte, body []byte) (*rawReply, error) {
	conn, err := rc.get(ctx)
	if err != nil {
		return nil, err
	}
	// Cancelling ctx unblocks reads and writes through the deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.c.SetDeadline(time.Unix(1, 0)) })
	if d, ok := ctx.Deadline(); ok {
		_ = conn.c.SetDeadline(d)
	}
	fail := func(err error) (*rawReply, error) {
		stop()
		_ = conn.c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, err
	}
	w := conn.bw
	w.WriteString("POST ")
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(rc.host)
	w.WriteString("\r\nContent-Type: application/json\r\nContent-Length: ")
	w.WriteString(strconv.Itoa(len(body)))
	w.WriteString("\r\n")
	w.Write(header)
	w.WriteString("\r\n")
	w.Write(body)
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	status, length, chunked, keep, err := readHead(conn.br)
	if err != nil {
		return fail(err)
	}
	var r io.Reader
	switch {
	case chunked:
		r = httputil.NewChunkedReader(conn.br)
	case length >= 0:
		r = io.LimitReader(conn.br, length)
	default:
		r, keep = conn.br, false // until the server closes
	}
	bt := &bodyTracker{r: r}
	if chunked {
		bt.trailer = conn.br
	}
	return &rawReply{Status: status, Body: bt, rc: rc, conn: conn, body: bt, keep: keep, stop: stop}, nil
}

var (
	headerContentLength    = []byte("Content-Length")
	headerTransferEncoding = []byte("Transfer-Encoding")
	headerConnection       = []byte("Connection")
)

// readHead parses the status line and the headers a reply's framing needs.
func readHead(br *bufio.Reader) (status int, length int64, chunked, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, false, false, err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, 0, false, false, fmt.Errorf("bad status line %q", bytes.TrimSpace(line))
	}
	keep = line[7] == '1'
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, 0, false, false, fmt.Errorf("bad status line %q", bytes.TrimSpace(line))
	}
	length = -1
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, false, fmt.Errorf("read headers: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, headerContentLength):
			if length, err = strconv.ParseInt(string(value), 10, 64); err != nil {
				return 0, 0, false, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, headerTransferEncoding):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, headerConnection):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		}
	}
	if status == 204 || status == 304 || status/100 == 1 {
		length = 0
	}
	return status, length, chunked, keep, nil
}
