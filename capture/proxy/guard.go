package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The guard is the proxy's outer layer: it checks what a client sends before
// any dialect handler sees it (docs/proxy-security.md).
//
//   - the decoded path is routed once: an encoded '?', '#' or a control
//     character in it is a 404, never re-parsed on the way upstream;
//   - unprefixed paths reach the upstream only on vLLM's API surface;
//   - with a rollout secret, calls under /ng-rollout/<id>/ need that id's token;
//   - bodies over the limit are refused from Content-Length, before reading;
//   - bodies in flight are admitted against a byte budget;
//   - a body must arrive within the body timeout;
//   - error bodies never show the upstream URL or the capture directory.

// forwardRoutes are the vLLM routes the proxy relays unchanged (unprefixed
// only), by method. Generating routes it cannot capture (/invocations,
// /inference/v1/generate, batch chat, /cohere) and admin routes (LoRA
// loading, dev mode) are left out; so is everything of a fake's /fake/*.
var forwardRoutes = map[string][]string{
	"/version":                    {http.MethodGet},
	"/load":                       {http.MethodGet},
	"/ping":                       {http.MethodGet, http.MethodPost},
	"/tokenize":                   {http.MethodPost},
	"/detokenize":                 {http.MethodPost},
	"/tokenizer_info":             {http.MethodGet},
	"/v1/chat/completions/render": {http.MethodPost},
	"/v1/completions/render":      {http.MethodPost},
}

// ownRoutes are the paths the proxy's own handler answers.
var ownRoutes = map[string]bool{
	pathChat: true, pathCompletions: true, pathResponses: true, pathMessages: true,
	pathCountTokens: true, pathModels: true, pathHealth: true, pathMetrics: true,
}

// routeMethods returns the methods allowed on a forwarded path, and whether
// the path is forwarded at all. /v1/responses/{id} and its cancel route take
// an id of letters, digits, '-' and '_'.
func routeMethods(path string) ([]string, bool) {
	if m, ok := forwardRoutes[path]; ok {
		return m, true
	}
	rest, ok := strings.CutPrefix(path, pathResponses+"/")
	if !ok {
		return nil, false
	}
	id, tail, hasTail := strings.Cut(rest, "/")
	if !plainID(id) {
		return nil, false
	}
	switch {
	case !hasTail:
		return []string{http.MethodGet}, true
	case tail == "cancel":
		return []string{http.MethodPost}, true
	}
	return nil, false
}

func plainID(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// badPathByte reports the first byte of a decoded path that must not be
// routed: '?' and '#' (only ever there encoded, %3F and %23) and controls.
func badPathByte(path string) (byte, bool) {
	for i := 0; i < len(path); i++ {
		if c := path[i]; c == '?' || c == '#' || c < 0x20 || c == 0x7f {
			return c, true
		}
	}
	return 0, false
}

// guardState is what the guard keeps between requests.
type guardState struct {
	admit    *admission
	redact   *strings.Replacer
	rejected *prometheus.CounterVec
}

// harden validates the limits, registers the guard's metrics and prepares
// the redaction of error bodies. Called once by New.
func (p *Proxy) harden() error {
	lim, err := p.opts.Limits.withDefaults(p.opts.MaxBodyBytes)
	if err != nil {
		return err
	}
	p.opts.Limits = lim
	g := &guardState{admit: newAdmission(lim.MaxInflightBodyBytes)}
	g.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capbench_proxy_guard_rejections_total",
		Help: "Requests the proxy refused before handling them, by reason.",
	}, []string{"reason"})
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "capbench_proxy_inflight_body_bytes",
		Help: "Request body bytes admitted and being handled now.",
	}, func() float64 { return float64(g.admit.held.Load()) })
	for _, c := range []prometheus.Collector{g.rejected, inflight} {
		if err := p.registry.Register(c); err != nil {
			return fmt.Errorf("proxy: registering metrics: %w", err)
		}
	}
	g.redact = strings.NewReplacer(redactions(p.upstream, p.opts.Store)...)
	p.guard = g
	p.applyUpstreamTimeout()
	return nil
}

// redactions lists what error bodies must not show, and its stand-in.
func redactions(upstream string, st Store) []string {
	var pairs []string
	if u, err := url.Parse(upstream); err == nil && u.Host != "" {
		pairs = append(pairs, upstream, "<upstream>", u.Scheme+"://"+u.Host, "<upstream>", u.Host, "<upstream>")
	}
	if d, ok := st.(interface{ Dir() string }); ok && d.Dir() != "" {
		dir := d.Dir()
		if abs, err := filepath.Abs(dir); err == nil && abs != dir {
			pairs = append(pairs, abs, "<capture-dir>")
		}
		pairs = append(pairs, dir, "<capture-dir>")
	}
	return pairs
}

// guarded wraps the proxy's handler in the guard.
func (p *Proxy) guarded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &redactWriter{ResponseWriter: w, repl: p.guard.redact}
		defer rw.finish()
		p.serveGuarded(rw, r, next)
	})
}

func (p *Proxy) serveGuarded(w http.ResponseWriter, r *http.Request, next http.Handler) {
	g := p.guard
	errw := errorWriter(writeOpenAIError)
	if c, bad := badPathByte(r.URL.Path); bad {
		g.rejected.WithLabelValues("path").Inc()
		errw(w, http.StatusNotFound, fmt.Sprintf("no such route: the decoded path holds %q, which no API path has "+
			"(an encoded '?' or '#' is part of the path, not a query)", string(rune(c))))
		return
	}
	rt := parseRoute(r.URL.Path)
	if strings.HasPrefix(rt.APIPath, pathMessages) {
		errw = writeAnthropicError
	}
	if r.Method == http.MethodHead {
		next.ServeHTTP(w, r) // answered locally, never forwarded
		return
	}
	// A doubled /v1 goes on to the handler's 404, which names the fix.
	if rt.RolloutID == "" && !ownRoutes[rt.APIPath] && !doubledV1(rt.APIPath) {
		methods, ok := routeMethods(rt.APIPath)
		if !ok {
			g.rejected.WithLabelValues("route").Inc()
			errw(w, http.StatusNotFound, "no such route: "+strconv.Quote(rt.APIPath)+" is not part of the API the proxy serves; the routes are "+
				servedRoutes+", and the engine's non-generating routes (see docs/proxy-security.md)")
			return
		}
		if !containsString(methods, r.Method) {
			g.rejected.WithLabelValues("method").Inc()
			errw(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+rt.APIPath+"; use "+strings.Join(methods, " or "))
			return
		}
	}
	if p.opts.RolloutSecret != "" && rt.RolloutID != "" {
		if !p.rolloutAuthorized(r.Header, rt.RolloutID) {
			g.rejected.WithLabelValues("rollout_token").Inc()
			errw(w, http.StatusUnauthorized, "missing or wrong rollout token for rollout "+strconv.Quote(rt.RolloutID)+
				": send the token minted for this rollout id as \""+RolloutTokenHeader+"\" or as the API key")
			return
		}
		r.Header.Del(RolloutTokenHeader) // never sent upstream
	}
	if r.ContentLength > p.opts.MaxBodyBytes {
		g.rejected.WithLabelValues("body_too_large").Inc()
		errw(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes exceeds the proxy's limit of %d bytes (--max-body-bytes)",
			r.ContentLength, p.opts.MaxBodyBytes))
		return
	}
	charge := p.bodyCharge(r)
	if charge > 0 {
		err := g.admit.acquire(r.Context(), charge, p.opts.Limits.AdmissionWait)
		if err != nil {
			g.rejected.WithLabelValues("admission").Inc()
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(p.opts.Limits.AdmissionWait/time.Second))))
			errw(w, http.StatusServiceUnavailable, fmt.Sprintf("the proxy is at its budget of %d request-body bytes in flight "+
				"(--max-inflight-body-bytes) and this request waited %s (--admission-wait); retry later",
				p.opts.Limits.MaxInflightBodyBytes, p.opts.Limits.AdmissionWait))
			return
		}
		defer g.admit.release(charge)
		p.deadlineBody(w, r)
	}
	next.ServeHTTP(w, r)
}

// bodyCharge is what a request's body costs against the admission budget.
func (p *Proxy) bodyCharge(r *http.Request) int64 {
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		return 0
	case r.ContentLength > 0:
		return r.ContentLength
	default: // chunked: could be anything up to the limit
		return p.opts.MaxBodyBytes
	}
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// errBodyTimeout replaces the connection's i/o timeout on a slow body.
type errBodyTimeout struct{ d time.Duration }

func (e errBodyTimeout) Error() string {
	return fmt.Sprintf("the request body did not arrive within %s (--read-body-timeout)", e.d)
}

// deadlineBody sets a read deadline for the request body and lifts it once
// the body has been read, so that a slow or stalled sender cannot hold a
// connection and its budget, while long replies stay unaffected.
func (p *Proxy) deadlineBody(w http.ResponseWriter, r *http.Request) {
	d := p.opts.Limits.ReadBodyTimeout
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return // not a real connection (httptest); nothing to bound
	}
	r.Body = &deadlineReader{ReadCloser: r.Body, rc: rc, d: d}
}

type deadlineReader struct {
	io.ReadCloser
	rc   *http.ResponseController
	d    time.Duration
	done bool
}

func (b *deadlineReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done {
		b.done = true
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// The deadline stays: the server's drain of the unread rest
			// then fails at once and it closes the connection after the
			// reply, instead of waiting on the stalled sender.
			return n, errBodyTimeout{b.d}
		}
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// maxRedactBuffer bounds the error body held for redaction; a larger one
// (an upstream validation dump) passes through as it is.
const maxRedactBuffer = 1 << 20

// redactWriter holds error replies (status >= 400, not event streams) until
// the handler returns and rewrites what they must not show.
type redactWriter struct {
	http.ResponseWriter
	repl        *strings.Replacer
	wroteHeader bool
	holding     bool
	status      int
	buf         []byte
}

func (w *redactWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *redactWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	if code >= 400 && !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		w.holding, w.status = true, code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *redactWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.holding {
		return w.ResponseWriter.Write(b)
	}
	if len(w.buf)+len(b) <= maxRedactBuffer {
		w.buf = append(w.buf, b...)
		return len(b), nil
	}
	w.holding = false
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(w.status)
	if _, err := w.ResponseWriter.Write([]byte(w.repl.Replace(string(w.buf)))); err != nil {
		return 0, err
	}
	w.buf = nil
	return w.ResponseWriter.Write(b)
}

func (w *redactWriter) Flush() {
	if w.holding {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// finish sends a held error reply, redacted.
func (w *redactWriter) finish() {
	if !w.holding {
		return
	}
	out := w.repl.Replace(string(w.buf))
	if w.Header().Get("Content-Length") != "" {
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	}
	w.ResponseWriter.WriteHeader(w.status)
	_, _ = w.ResponseWriter.Write([]byte(out))
}

// upstreamTimeoutMessage turns the upstream client's header timeout into a
// message naming the flag (the reply is 504, not a bare 502).
func upstreamTimeoutMessage(err error) (string, bool) {
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		return "", false
	}
	return "the upstream did not answer in time (--upstream-timeout); the call was not completed", true
}
