package proxy

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/capbench/capbench/internal/h1"
)

// hopHeaders are never forwarded (RFC 9110 §7.6.1), plus the headers the
// proxy sets itself.
var hopHeaders = map[string]bool{
	"Connection":          true,
	"Proxy-Connection":    true,
	"Keep-Alive":          true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
	"Host":                true,
	"Content-Length":      true,
	// The proxy decodes replies itself; letting the client's list through
	// would invite br/zstd bodies. Go's transport asks for gzip and decodes.
	"Accept-Encoding": true,
}

// newUpstreamClient is the one pooled client all upstream requests share:
// plain-http calls go over internal/h1's transport, which reads each reply
// on the handler's goroutine; the rest (https, an HTTP proxy from the
// environment, bodies of unknown length) over net/http's.
func newUpstreamClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 512
	t.MaxConnsPerHost = 0
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: h1.New(t)}
}

// copyRequestHeaders copies the end-to-end headers of the client request to
// the upstream request, replacing credentials when an upstream key is set.
func (p *Proxy) copyRequestHeaders(dst, src http.Header) {
	connectionListed := map[string]bool{}
	for _, v := range src.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			connectionListed[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	for k, vs := range src {
		ck := http.CanonicalHeaderKey(k)
		if hopHeaders[ck] || connectionListed[ck] {
			continue
		}
		if p.opts.UpstreamAPIKey != "" && (ck == "Authorization" || ck == "X-Api-Key") {
			continue
		}
		dst[ck] = append([]string(nil), vs...)
	}
	if p.opts.UpstreamAPIKey != "" {
		dst.Set("Authorization", "Bearer "+p.opts.UpstreamAPIKey)
	}
}

// upstreamError is a non-2xx upstream answer, passed to the client with its
// status and body.
type upstreamError struct {
	Status      int
	Body        []byte
	ContentType string
}

func (e *upstreamError) Error() string {
	return fmt.Sprintf("upstream answered %d: %s", e.Status, truncate(string(e.Body), 200))
}

// message extracts a human-readable message from an upstream error body in
// either the OpenAI envelope, vLLM's bare form or FastAPI's detail form.
func (e *upstreamError) message() string {
	var env struct {
		Error  json.RawMessage `json:"error"`
		Detail any             `json:"detail"`
	}
	if json.Unmarshal(e.Body, &env) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(env.Error, &inner) == nil && inner.Message != "" {
			return inner.Message
		}
		var s string
		if json.Unmarshal(env.Error, &s) == nil && s != "" {
			return s
		}
		if env.Detail != nil {
			return fmt.Sprint(env.Detail)
		}
	}
	if len(e.Body) == 0 {
		return http.StatusText(e.Status)
	}
	return truncate(string(e.Body), 2000)
}

// transportError is a failure to reach upstream or to read its reply.
type transportError struct{ err error }

func (e *transportError) Error() string { return "upstream request failed: " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// upstreamPost builds a POST of a JSON body to the upstream path: the
// client's headers as forwarded (hdr), or only the upstream key when the
// proxy sends on its own (hdr nil).
func (p *Proxy) upstreamPost(ctx context.Context, path string, hdr http.Header, body []byte, accept string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.upstream+path, bytes.NewReader(body))
	if err != nil {
		return nil, &transportError{err}
	}
	if hdr != nil {
		p.copyRequestHeaders(req.Header, hdr)
	} else if p.opts.UpstreamAPIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.opts.UpstreamAPIKey)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	return req, nil
}

// postJSON sends body to upstream path and decodes the JSON reply. A non-2xx
// answer is an *upstreamError; a connection or decoding failure a
// *transportError.
func (p *Proxy) postJSON(ctx context.Context, path string, hdr http.Header, body []byte) (map[string]any, error) {
	return p.postReply(ctx, path, hdr, body, nil)
}

// postReply is postJSON that also hands a chat reply's prompt-id text to
// prompt when it is not nil (decodeChatReplyText).
func (p *Proxy) postReply(ctx context.Context, path string, hdr http.Header, body []byte, prompt *promptIDs) (map[string]any, error) {
	decode := decodeObject
	if path == pathChat {
		decode = func(raw []byte) (map[string]any, error) { return decodeChatReplyText(raw, prompt) }
	}
	req, err := p.upstreamPost(ctx, path, hdr, body, "application/json")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, &transportError{err}
	}
	defer resp.Body.Close()
	raw, err := readDecoded(resp)
	p.metrics.upstreamLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, &transportError{fmt.Errorf("reading upstream reply: %w", err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &upstreamError{Status: resp.StatusCode, Body: raw, ContentType: resp.Header.Get("Content-Type")}
	}
	out, err := decode(raw)
	if err != nil {
		return nil, &transportError{fmt.Errorf("upstream reply is not a JSON object: %w", err)}
	}
	return out, nil
}

// maxReplyBytes bounds an upstream reply the proxy buffers (after
// decompression). A 256k-token prompt with return_token_ids and log-probs
// stays far below it.
const maxReplyBytes = 512 << 20

// readDecoded reads a reply body, undoing a Content-Encoding the transport
// left in place.
func readDecoded(resp *http.Response) ([]byte, error) {
	r, err := decodedReader(resp)
	if err != nil {
		return nil, err
	}
	b, err := readAllSized(io.LimitReader(r, maxReplyBytes+1), resp.ContentLength, maxReadHint)
	if err != nil {
		return nil, err
	}
	if len(b) > maxReplyBytes {
		return nil, fmt.Errorf("upstream reply exceeds %d bytes", maxReplyBytes)
	}
	return b, nil
}

func decodedReader(resp *http.Response) (io.Reader, error) {
	enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	switch enc {
	case "", "identity":
		return resp.Body, nil
	case "gzip", "x-gzip":
		return gzip.NewReader(resp.Body)
	case "deflate":
		// "deflate" is zlib-wrapped by the RFC, raw by some servers.
		br := &peekReader{r: resp.Body}
		head, _ := br.peek(2)
		if len(head) == 2 && head[0]&0x0f == 8 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 {
			return zlib.NewReader(br)
		}
		return flate.NewReader(br), nil
	default:
		return nil, fmt.Errorf("unsupported content encoding %q", enc)
	}
}

// peekReader lets decodedReader look at the first bytes of a body.
type peekReader struct {
	r   io.Reader
	buf []byte
}

func (p *peekReader) peek(n int) ([]byte, error) {
	for len(p.buf) < n {
		b := make([]byte, n-len(p.buf))
		m, err := p.r.Read(b)
		p.buf = append(p.buf, b[:m]...)
		if err != nil {
			return p.buf, err
		}
	}
	return p.buf[:n], nil
}

func (p *peekReader) Read(b []byte) (int, error) {
	if len(p.buf) > 0 {
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		return n, nil
	}
	return p.r.Read(b)
}

// decodeObjectMembers is decodeObject that also returns the object's
// members as written, from the same pass, when the direct parser read it
// (nil otherwise: newRawObject then splits them). The member named lazy
// (none when "") is left undecoded (*lazyValue) when the direct parser
// reads the object; otherwise everything is decoded. head is what that
// member likely begins with (parseGenericMembers).
func decodeObjectMembers(raw []byte, lazy string, head []byte) (map[string]any, []rawMember, error) {
	if m, members, ok := parseGenericMembers(raw, lazy, head); ok {
		return m, members, nil
	}
	m, err := decodeObject(raw)
	return m, nil, err
}

// decodeObject decodes one JSON object, keeping numbers exact.
func decodeObject(raw []byte) (map[string]any, error) {
	if v, ok := parseGeneric(raw); ok {
		if m, ok := v.(map[string]any); ok {
			return m, nil
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	if out == nil {
		return nil, errors.New("null instead of an object")
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// forward relays a request upstream unchanged (apart from headers), streaming
// the reply back. Used for routes the proxy does not interpret.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, apiPath string, body io.Reader) {
	target := p.upstream + apiPath
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	upCtx, cancelUp := context.WithCancel(r.Context())
	defer cancelUp()
	req, err := http.NewRequestWithContext(upCtx, r.Method, target, body)
	if err != nil {
		writeOpenAIError(w, http.StatusBadGateway, err.Error())
		return
	}
	p.copyRequestHeaders(req.Header, r.Header)
	resp, err := p.client.Do(req)
	if msg, ok := upstreamTimeoutMessage(err); ok {
		writeOpenAIError(w, http.StatusGatewayTimeout, msg)
		return
	}
	if err != nil {
		writeOpenAIError(w, http.StatusBadGateway, "upstream request failed: "+err.Error())
		return
	}
	resp.Body = newIdleBody(resp.Body, p.opts.Limits.StreamIdleTimeout, cancelUp)
	defer resp.Body.Close()
	rd, err := decodedReader(resp)
	if err != nil {
		writeOpenAIError(w, http.StatusBadGateway, err.Error())
		return
	}
	for k, vs := range resp.Header {
		ck := http.CanonicalHeaderKey(k)
		if hopHeaders[ck] || ck == "Content-Encoding" {
			continue
		}
		w.Header()[ck] = vs
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32*1024)
	for {
		n, rerr := rd.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if errors.Is(rerr, io.EOF) {
			return
		}
		if rerr != nil {
			// The upstream cut its reply: cut the client's too (a clean
			// end of the chunked body would read as a complete reply).
			p.log.Warn("upstream reply cut mid-way; cutting the client's", "path", apiPath, "err", rerr)
			panic(http.ErrAbortHandler)
		}
	}
}
