package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// readResponse reads a reply's status line and headers, skipping
// informational (1xx) replies. A failure before the first byte wraps
// errNoReply.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for first := true; ; first = false {
		if first {
			if _, err := br.Peek(1); err != nil {
				if isTimeout(err) {
					return nil, err // a timeout is not a closed connection: never resent
				}
				return nil, fmt.Errorf("%w: %w", errNoReply, err)
			}
		}
		resp, err := readHead(br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

func readHead(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, unexpected(err)
	}
	proto, status, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") || len(proto) != 8 || len(status) < 3 {
		return nil, fmt.Errorf("h1: malformed status line %q", line)
	}
	code, err := strconv.Atoi(status[:3])
	if err != nil || code < 100 {
		return nil, fmt.Errorf("h1: malformed status line %q", line)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, fmt.Errorf("h1: reading reply headers: %w", unexpected(err))
	}
	resp := &http.Response{
		Status: status, StatusCode: code, Proto: proto, ProtoMajor: 1, ProtoMinor: int(proto[7] - '0'),
		Header: http.Header(hdr), Request: req, ContentLength: -1,
	}
	resp.Close = resp.ProtoMinor == 0 || headerHas(resp.Header, "Connection", "close")
	if cl := resp.Header.Get("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("h1: bad Content-Length %q", cl)
		}
		resp.ContentLength = n
	}
	if headerHas(resp.Header, "Transfer-Encoding", "chunked") {
		resp.TransferEncoding = []string{"chunked"}
		resp.ContentLength = -1
		resp.Header.Del("Transfer-Encoding")
		resp.Header.Del("Content-Length")
	}
	if code == http.StatusNoContent || code == http.StatusNotModified || req.Method == http.MethodHead {
		resp.ContentLength = 0
		resp.TransferEncoding = nil
	}
	return resp, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// headerHas reports whether a comma-separated header lists token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// framing returns the reader of resp's body as its headers frame it.
func framing(br *bufio.Reader, resp *http.Response) (r io.Reader, chunked bool) {
	switch {
	case len(resp.TransferEncoding) > 0:
		return httputil.NewChunkedReader(br), true
	case resp.ContentLength >= 0:
		return &exactReader{r: br, left: resp.ContentLength}, false
	default:
		resp.Close = true // delimited by the server closing
		return br, false
	}
}

// exactReader reads a Content-Length body; an end before it is a cut reply.
type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if errors.Is(err, io.EOF) {
		if e.left > 0 {
			return n, io.ErrUnexpectedEOF
		}
		err = nil
	}
	if err == nil && e.left == 0 {
		err = io.EOF
	}
	return n, err
}

// body is a reply's body; Close returns the connection to its pool when
// the body was read to its clean end, and closes it otherwise.
type body struct {
	r       io.Reader
	chunked bool
	conn    *conn
	t       *Transport
	stop    func() bool
	keep    bool
	eof     bool
	bad     bool
	closed  bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("h1: read on a closed body")
	}
	n, err := b.r.Read(p)
	if err == nil {
		return n, nil
	}
	if errors.Is(err, io.EOF) {
		if !b.eof {
			b.eof = true
			if b.chunked && SkipTrailer(b.conn.br) != nil {
				b.bad = true
			}
		}
		return n, io.EOF
	}
	b.bad = true
	return n, err
}

func (b *body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	stopped := b.stop()
	if b.keep && b.eof && !b.bad && stopped {
		_ = b.conn.nc.SetDeadline(time.Time{})
		// The pool is looked up now: CloseIdleConnections may have
		// replaced it since the request.
		b.t.pool(b.conn.addr).put(b.conn)
		return nil
	}
	return b.conn.nc.Close()
}

// SkipTrailer reads a chunked body's trailer lines, after the last chunk,
// to the empty one, so the connection's next reply starts clean.
func SkipTrailer(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}
