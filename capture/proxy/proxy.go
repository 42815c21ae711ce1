package proxy

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/capbench/capbench/capture/store"
)

// Store is what the capture path needs from a store: the sink it writes to
// and the reader parent resolution refreshes from.
type Store interface {
	store.Sink
	store.Reader
}

// DefaultMaxBodyBytes bounds request bodies when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 32 << 20

// Options configure a Proxy. Only Upstream is required.
type Options struct {
	// Upstream is the vLLM base URL, without /v1.
	Upstream string
	// Store receives the token records; nil disables capture (plain forwarding).
	Store Store
	// Host and Port to listen on; defaults 127.0.0.1 and an ephemeral port.
	Host string
	Port int
	// APIKey, when set, must be sent by clients as "Authorization: Bearer" or
	// "x-api-key".
	APIKey string
	// Model, when set, replaces the model name of every engine-bound request
	// (harnesses such as Claude Code ask for names the engine does not serve).
	Model string
	// UpstreamAPIKey replaces the client's credentials on upstream requests.
	UpstreamAPIKey string
	// MaxBodyBytes bounds request bodies (default 32 MiB).
	MaxBodyBytes int64
	// SamplingOverrides are set on every engine-bound request (temperature,
	// top_p, top_k, ...), as a trainer pins its sampling. The key
	// "max_tokens" caps rather than sets: a smaller client value is kept.
	SamplingOverrides map[string]any
	// RequestTokenIDs adds return_token_ids:true so the prompt ids come back
	// with the reply; otherwise /tokenize is asked for them.
	RequestTokenIDs bool
	// DeltaRecords stores resolved prompts as suffixes of the parent (prompt_is_delta, docs/record.md#fields).
	DeltaRecords bool
	// Logger gets structured logs; nil discards them.
	Logger *slog.Logger
	// Registry receives the proxy's metrics; nil creates a fresh one.
	Registry *prometheus.Registry
	// Client sends upstream requests; nil creates one pooled client.
	Client *http.Client
	// BufferedStreams answers streaming clients the way NeMo Gym's model
	// server does: one non-streaming engine call, then a synthetic stream of
	// the complete reply. By default streams pass through as the engine
	// generates them (docs/streaming.md).
	BufferedStreams bool
	// OnPut, when set, is told how long each record's put took (encoding
	// its line, then the store's lock, append and sync) and its error. It is
	// called from request goroutines. A benchmark times the store here
	// rather than by wrapping it: a wrapper hides what the proxy looks for
	// in its store (intents written ahead, incremental reads, canonical
	// lines, disk figures) and measures a slower capture path than users run.
	OnPut func(d time.Duration, err error)
	// MaxTrackedRollouts bounds how many rollouts keep a lineage index in
	// memory (default DefaultMaxTrackedRollouts). Past it the least recently
	// used index is dropped; that rollout's next call rebuilds it from the
	// store, so the bound costs a re-read, never a wrong parent.
	MaxTrackedRollouts int
	// Limits bound body bytes in flight, client and upstream timeouts and
	// connections (limits.go); zero fields take defaults.
	Limits Limits
	// RolloutSecret, when set, makes every call under /ng-rollout/<id>/
	// present RolloutToken(secret, id) (authz.go, docs/proxy-security.md).
	RolloutSecret string
}

// DefaultMaxTrackedRollouts is Options.MaxTrackedRollouts when it is 0.
// Finished rollouts send no further calls, so without a bound a long-lived
// proxy would keep every rollout's index it ever saw.
const DefaultMaxTrackedRollouts = 4096

// Proxy is the capture proxy. Create it with New, then either Start it or
// mount Handler in a server of your own.
type Proxy struct {
	opts     Options
	upstream string
	client   *http.Client
	log      *slog.Logger
	registry *prometheus.Registry
	metrics  *metrics
	handler  http.Handler
	guard    *guardState

	rollouts sync.Map     // rollout id → *rolloutLineage
	evicting sync.Mutex   // held by the one eviction scan running
	tracked  atomic.Int64 // entries in rollouts
	// handed is the bytes of the committed entries the rollouts' followers
	// hold for their next call (as handToFollower counts them), within
	// handedBudget (defaultHandedBudget; specs lower it); reclaiming is held
	// by the one scan giving them back.
	handed       atomic.Int64
	handedBudget atomic.Int64
	reclaiming   sync.Mutex

	mu       sync.Mutex
	server   *http.Server
	listener net.Listener
	closed   chan struct{} // closed by Close; ends the Start watcher
	once     sync.Once
}

// New validates the options and builds a Proxy.
func New(opts Options) (*Proxy, error) {
	if opts.Upstream == "" {
		return nil, errors.New("proxy: Upstream is required")
	}
	u, err := url.Parse(opts.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("proxy: Upstream %q is not an http(s) URL", opts.Upstream)
	}
	if opts.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("proxy: MaxBodyBytes %d is negative", opts.MaxBodyBytes)
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxTrackedRollouts < 0 {
		return nil, fmt.Errorf("proxy: MaxTrackedRollouts %d is negative", opts.MaxTrackedRollouts)
	}
	if opts.MaxTrackedRollouts == 0 {
		opts.MaxTrackedRollouts = DefaultMaxTrackedRollouts
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("proxy: Port %d is out of range", opts.Port)
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	for k := range opts.SamplingOverrides {
		switch k {
		case "stream", "messages", "prompt", "logprobs", "top_logprobs", "return_tokens_as_token_ids", "return_token_ids", "n":
			return nil, fmt.Errorf("proxy: SamplingOverrides may not set %q", k)
		}
	}
	p := &Proxy{
		opts:     opts,
		upstream: strings.TrimRight(opts.Upstream, "/"),
		client:   opts.Client,
		log:      opts.Logger,
		registry: opts.Registry,
	}
	p.handedBudget.Store(defaultHandedBudget)
	if p.client == nil {
		p.client = newUpstreamClient()
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.registry == nil {
		p.registry = prometheus.NewRegistry()
	}
	if p.metrics, err = newMetrics(p.registry); err != nil {
		return nil, fmt.Errorf("proxy: registering metrics: %w", err)
	}
	if err = registerDiskMetrics(p.registry, opts.Store); err != nil {
		return nil, fmt.Errorf("proxy: registering metrics: %w", err)
	}
	if err := p.harden(); err != nil {
		return nil, err
	}
	p.handler = p.guarded(http.HandlerFunc(p.serveHTTP))
	return p, nil
}

// Start listens on Host:Port and serves until ctx ends or Close is called.
func (p *Proxy) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.server != nil {
		return errors.New("proxy: already started")
	}
	addr := net.JoinHostPort(p.opts.Host, strconv.Itoa(p.opts.Port))
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("proxy: listening on %s: %w", addr, err)
	}
	srv, ln := p.newServer(ctx, ln)
	p.server, p.listener = srv, ln
	p.closed = make(chan struct{})
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("proxy stopped serving", "err", err)
		}
	}()
	go func(closed <-chan struct{}) {
		select {
		case <-ctx.Done():
			_ = p.Close()
		case <-closed:
		}
	}(p.closed)
	p.log.Info("proxy listening", "url", "http://"+ln.Addr().String(), "upstream", p.upstream, "capture", p.opts.Store != nil)
	return nil
}

// URL is the proxy's base URL once started ("" before).
func (p *Proxy) URL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener == nil {
		return ""
	}
	return "http://" + p.listener.Addr().String()
}

// Handler serves the proxy's routes; usable without Start. To cut a reply
// whose upstream failed mid-stream it panics with http.ErrAbortHandler, which
// net/http's server turns into an aborted connection.
func (p *Proxy) Handler() http.Handler { return p.handler }

// Registry is the registry the proxy's metrics live in.
func (p *Proxy) Registry() *prometheus.Registry { return p.registry }

// Close stops the listener, waits briefly for in-flight calls and drops the
// idle upstream connections of the proxy's own client. It does not close the
// store, nor a Client passed in Options: the caller owns those.
func (p *Proxy) Close() error {
	p.mu.Lock()
	srv, closed := p.server, p.closed
	p.mu.Unlock()
	if srv == nil {
		return nil
	}
	p.once.Do(func() { close(closed) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if p.opts.Client == nil {
		// The pooled upstream client is the proxy's own; its keep-alive
		// connections to vLLM would otherwise outlive the proxy.
		p.client.CloseIdleConnections()
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("proxy: shutting down: %w", err)
	}
	return nil
}

// API paths the proxy interprets.
const (
	pathChat        = "/v1/chat/completions"
	pathCompletions = "/v1/completions"
	pathResponses   = "/v1/responses"
	pathMessages    = "/v1/messages"
	pathCountTokens = "/v1/messages/count_tokens"
	pathModels      = "/v1/models"
	pathHealth      = "/health"
	pathMetrics     = "/metrics"
)

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	rt := parseRoute(r.URL.Path)
	// Harness probes (Claude Code sends HEAD to its base URL) are answered
	// here and are never model calls.
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	if rt.APIPath == pathMetrics && rt.RolloutID == "" {
		promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{}).ServeHTTP(w, r)
		return
	}
	anthropicPath := strings.HasPrefix(rt.APIPath, pathMessages) || strings.HasPrefix(rt.APIPath, "/v1"+pathMessages)
	errw := writeOpenAIError
	if anthropicPath {
		errw = writeAnthropicError
	}
	if rt.APIPath != pathHealth && !p.authorized(r) {
		errw(w, http.StatusUnauthorized, "missing or wrong API key: send it as \"Authorization: Bearer <key>\" or \"x-api-key\"")
		return
	}
	if rt.RolloutID != "" {
		if err := store.ValidateRolloutID(rt.RolloutID); err != nil {
			errw(w, http.StatusBadRequest, fmt.Sprintf("invalid rollout id %q in the URL: %v", rt.RolloutID, err))
			return
		}
	}
	if doubledV1(rt.APIPath) {
		p.log.Warn("request path has /v1 twice: the client's base URL ends in /v1", "path", rt.APIPath, "rollout_id", rt.RolloutID)
		errw(w, http.StatusNotFound, unknownRouteMessage(rt))
		return
	}
	switch rt.APIPath {
	case pathChat, pathCompletions, pathResponses, pathMessages:
		if r.Method != http.MethodPost {
			errw(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+rt.APIPath+"; use POST")
			return
		}
		p.serveDialect(w, r, rt)
	case pathCountTokens:
		if r.Method != http.MethodPost {
			errw(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+rt.APIPath+"; use POST")
			return
		}
		p.serveCountTokens(w, r)
	case pathModels, pathHealth:
		if r.Method != http.MethodGet {
			errw(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+rt.APIPath+"; use GET")
			return
		}
		p.forward(w, r, rt.APIPath, nil)
	default:
		if rt.RolloutID != "" {
			// Unknown path under a rollout prefix: 404, nothing marked (Q5).
			p.log.Warn("unknown API path under a rollout prefix", "path", rt.APIPath, "rollout_id", rt.RolloutID)
			errw(w, http.StatusNotFound, unknownRouteMessage(rt))
			return
		}
		body := io.Reader(http.MaxBytesReader(w, r.Body, p.opts.MaxBodyBytes))
		if r.Body == nil || r.Body == http.NoBody {
			body = nil
		}
		p.forward(w, r, rt.APIPath, body)
	}
}

// authorized checks the client's key when one is configured.
func (p *Proxy) authorized(r *http.Request) bool {
	if p.opts.APIKey == "" {
		return true
	}
	want := []byte(p.opts.APIKey)
	if k := r.Header.Get("X-Api-Key"); k != "" && subtle.ConstantTimeCompare([]byte(k), want) == 1 {
		return true
	}
	if tok, ok := bearerToken(r.Header); ok && subtle.ConstantTimeCompare([]byte(tok), want) == 1 {
		return true
	}
	return false
}

// newCallID mints a model call id: a random UUID4 as 32 lowercase hex chars.
func newCallID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// newResponseID mints a Responses envelope id, resp_<32 hex>.
func newResponseID() string { return "resp_" + newCallID() }
