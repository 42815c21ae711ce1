package vllm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capbench/capbench/fakes/tokenizer"
)

// Server is a fake vLLM OpenAI-compatible server.
type Server struct {
	opts        Options
	model       string // first served name: what responses report
	maxModelLen int
	tok         textTokenizer
	tmpl        promptTemplate
	eng         *engine
	ledger      ledger
	scripts     scriptBook
	metrics     *metrics
	sched       *scheduler
	fingerprint string
	memory      memoryPlan
	minSpecial  int // no id below this is a special token
	// prompts caches the encodings of prompt segments: agents resend the
	// same system prompt, tools and history on every call.
	prompts *tokenizer.SegmentCache

	mu       sync.Mutex
	ln       net.Listener
	srv      *http.Server
	url      string
	closing  chan struct{}
	closeOne sync.Once
	bufs     sync.Pool
}

// New validates opts and runs vLLM's startup checks (flags, memory model).
// The returned error carries vLLM's startup message.
func New(opts Options) (*Server, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	mem, err := planMemory(o)
	if err != nil {
		return nil, err
	}
	tok, tmpl, err := newTextModel(o.ChatTemplateVariant)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:        o,
		model:       o.ServedModelNames[0],
		maxModelLen: mem.maxModelLen,
		tok:         tok,
		tmpl:        tmpl,
		eng:         newEngine(tok, tmpl, o.Lengths),
		memory:      mem,
		closing:     make(chan struct{}),
		prompts:     tokenizer.NewSegmentCache(promptCacheBytes),
	}
	s.ledger.limit = o.LedgerLimit
	s.ledger.maxBytes = max(o.LedgerMaxBytes, 0)
	s.ledger.decode = tok.Decode
	s.minSpecial = 0
	if id, ok := tok.SpecialID("<|endoftext|>"); ok {
		s.minSpecial = id // Qwen3's specials are the added tokens from <|endoftext|> on
	}
	s.sched = newScheduler(o.MaxNumSeqs, mem.kvBlocks)
	s.metrics = newMetrics(s)
	s.fingerprint = fingerprint(o, mem.maxModelLen)
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	if mem.concurrencyLine != "" {
		o.Logger.Info(mem.availableLine)
		o.Logger.Info(mem.concurrencyLine)
	}
	return s, nil
}

// promptCacheBytes bounds the prompt segment cache's memory.
const promptCacheBytes = 32 << 20

// encodePrompt tokenizes a rendered chat prompt.
func (s *Server) encodePrompt(prompt string) []int { return s.tok.EncodeCached(prompt, s.prompts) }

func fingerprint(o Options, maxLen int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s|%v|%d|%s|%s|%s|%s", o.Model, o.ServedModelNames, maxLen, o.DType, o.KVCacheDType, o.ToolCallParser, o.ReasoningParser))
	return "vllm-" + vllmVersion + "-" + hex.EncodeToString(h[:4])
}

// MaxModelLen is the effective context window.
func (s *Server) MaxModelLen() int { return s.maxModelLen }

// ConcurrencyLine is vLLM's "GPU KV cache size ... Maximum concurrency" log
// line, empty when the memory model is off.
func (s *Server) ConcurrencyLine() string { return s.memory.concurrencyLine }

// Start listens on Host:Port and serves until Close or ctx is done.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return errors.New("fake vllm: already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port)))
	if err != nil {
		return fmt.Errorf("fake vllm: listen: %w", err)
	}
	s.ln = ln
	host := s.opts.Host
	if host == "0.0.0.0" || host == "::" || host == "" {
		host = "127.0.0.1"
	}
	s.url = "http://" + net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	go func() {
		select {
		case <-ctx.Done():
			_ = s.Close()
		case <-s.closing:
		}
	}()
	s.opts.Logger.Info("fake vllm listening", "url", s.url, "model", s.model, "max_model_len", s.maxModelLen)
	return nil
}

// URL is the base URL, e.g. http://127.0.0.1:PORT (empty before Start).
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Handler serves the API without a listener (for httptest or embedding).
func (s *Server) Handler() http.Handler { return s }

// Close stops the listener and aborts running requests.
func (s *Server) Close() error {
	var err error
	s.closeOne.Do(func() {
		close(s.closing)
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		if srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if e := srv.Shutdown(ctx); e != nil {
				err = srv.Close()
			}
		}
	})
	return err
}

// Ledger returns a copy of the generations the ledger holds, oldest first
// (all of them unless LedgerLimit or LedgerMaxBytes dropped old ones).
func (s *Server) Ledger() []LedgerEntry {
	es, _ := s.ledger.after(0)
	return es
}

// LedgerAfter returns the held generations with Seq > seq and how many
// generations the bounds have dropped so far: a reader that keeps up reads
// each generation once, and one that fell behind can tell.
func (s *Server) LedgerAfter(seq uint64) ([]LedgerEntry, uint64) { return s.ledger.after(seq) }

// LedgerStats reports the held entries, their approximate bytes (what
// LedgerMaxBytes bounds) and the number dropped.
func (s *Server) LedgerStats() (entries int, bytes int64, dropped uint64) { return s.ledger.stats() }

// SetScript installs (or replaces) a script by name.
func (s *Server) SetScript(sc Script) error {
	if err := sc.validate(); err != nil {
		return err
	}
	s.scripts.put(sc)
	return nil
}

// ServeHTTP routes like vLLM's FastAPI app: auth middleware first, then
// exact paths; unknown paths get Starlette's {"detail":"Not Found"}.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if len(s.opts.APIKeys) > 0 && r.Method != http.MethodOptions && authProtected(path) && !s.authorized(r) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"Unauthorized"}`)
		return
	}
	switch path {
	case "/health":
		if s.method(w, r, http.MethodGet) {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusOK)
		}
	case "/version":
		if s.method(w, r, http.MethodGet) {
			writeJSONBytes(w, http.StatusOK, []byte(`{"version":"`+vllmVersion+`"}`))
		}
	case "/ping":
		if s.method(w, r, http.MethodGet, http.MethodPost) {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusOK)
		}
	case "/load":
		if s.method(w, r, http.MethodGet) {
			running, waiting := s.sched.counts()
			writeJSONBytes(w, http.StatusOK, fmt.Appendf(nil, `{"server_load":%d}`, running+waiting))
		}
	case "/metrics":
		if s.method(w, r, http.MethodGet) {
			s.metrics.handler.ServeHTTP(w, r)
		}
	case "/v1/models":
		if s.method(w, r, http.MethodGet) {
			s.handleModels(w)
		}
	case "/tokenize":
		if s.method(w, r, http.MethodPost) {
			s.handleTokenize(w, r)
		}
	case "/detokenize":
		if s.method(w, r, http.MethodPost) {
			s.handleDetokenize(w, r)
		}
	case "/v1/chat/completions":
		if s.method(w, r, http.MethodPost) {
			s.handleChat(w, r)
		}
	case "/v1/completions":
		if s.method(w, r, http.MethodPost) {
			s.handleCompletions(w, r)
		}
	case "/fake/ledger":
		if s.method(w, r, http.MethodGet) {
			s.handleLedger(w, r)
		}
	default:
		if name, ok := strings.CutPrefix(path, "/fake/scripts/"); ok && name != "" {
			s.handleScript(w, r, name)
			return
		}
		writeDetail(w, http.StatusNotFound, "Not Found")
	}
}

// LedgerDroppedHeader carries how many generations the ledger's bounds have
// dropped so far (GET /fake/ledger).
const LedgerDroppedHeader = "X-Fake-Ledger-Dropped"

// handleLedger serves GET /fake/ledger[?after=SEQ].
func (s *Server) handleLedger(w http.ResponseWriter, r *http.Request) {
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeAPIError(w, plainBadRequest(fmt.Sprintf("after=%q: want a ledger seq (a non-negative integer)", v)))
			return
		}
		after = n
	}
	es, dropped := s.ledger.after(after)
	if es == nil {
		es = []LedgerEntry{}
	}
	b, err := json.Marshal(es)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set(LedgerDroppedHeader, strconv.FormatUint(dropped, 10))
	writeJSONBytes(w, http.StatusOK, b)
}

// authProtected lists vLLM's key-protected prefixes plus the fake's control
// routes: the ledger holds every prompt and output, and scripts steer every
// reply, so with --api-key set they need the key too.
func authProtected(path string) bool {
	for _, p := range []string{"/v1", "/v2", "/inference", "/cohere", "/fake/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return false
	}
	for _, k := range s.opts.APIKeys {
		if tok == k {
			return true
		}
	}
	return false
}

func (s *Server) method(w http.ResponseWriter, r *http.Request, allowed ...string) bool {
	for _, m := range allowed {
		if r.Method == m || (m == http.MethodGet && r.Method == http.MethodHead) {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
	return false
}

// jsonContentType is shared by every reply; net/http only reads it, and an
// Add would copy it (its capacity is its length).
var jsonContentType = []string{"application/json"}

// The request headers the fake reads on every call, in the canonical form
// net/http stores received keys in (CanonicalHeaderKeys lists them for the
// test that checks it).
const (
	headerContentType = "Content-Type"
	headerRequestID   = "X-Request-Id"
	headerScript      = "X-Fake-Script"
	headerFault       = "X-Fake-Fault"
)

// headerValue is h.Get(key) for a key in canonical form: Get would
// canonicalize the key again on every call.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	h := w.Header() // canonical keys set directly: Set would canonicalize them again
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// readJSONBody enforces vLLM's content-type rule and the body size limit.
func (s *Server) readJSONBody(r *http.Request) ([]byte, *apiError) {
	if ct := headerValue(r.Header, headerContentType); ct != "application/json" { // the exact form needs no parsing
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, &apiError{Status: http.StatusBadRequest, Type: "Bad Request", Message: "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"}
		}
	}
	var src io.Reader = r.Body // net/http stops a body at its declared Content-Length
	if r.ContentLength < 0 || r.ContentLength > s.opts.MaxBodyBytes {
		src = http.MaxBytesReader(nil, r.Body, s.opts.MaxBodyBytes)
	}
	body, err := readAllSized(src, r.ContentLength, s.opts.MaxBodyBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: "Request Entity Too Large", Message: fmt.Sprintf("Request body exceeds the limit of %d bytes.", mbe.Limit)}
		}
		return nil, &apiError{Status: http.StatusBadRequest, Type: "Bad Request", Message: "could not read request body: " + err.Error()}
	}
	return body, nil
}

// fastDecoder is a request type with a reflection-free decoder for the
// common shapes; false sends the body through decodeBody instead.
type fastDecoder interface{ decodeFast(body []byte) bool }

// serveGeneration reads and decodes a generation request of type R, turns it
// into a job with prepare and serves it; each step answers with vLLM's error
// when it fails.
func serveGeneration[R any](s *Server, w http.ResponseWriter, r *http.Request, prepare func(*http.Request, *R, []byte) (*job, *apiError)) {
	body, ae := s.readJSONBody(r)
	if ae != nil {
		writeAPIError(w, ae)
		return
	}
	var req R
	if fd, ok := any(&req).(fastDecoder); !ok || !fd.decodeFast(body) {
		req = *new(R) // the fast path may have filled some fields
		if ae := decodeBody(body, &req); ae != nil {
			writeAPIError(w, ae)
			return
		}
	}
	j, ae := prepare(r, &req, body)
	if ae != nil {
		writeAPIError(w, ae)
		return
	}
	s.serveJob(w, r, j)
}

// decodeBody decodes JSON into v, mapping decode failures to pydantic-style errors.
func decodeBody(body []byte, v any) *apiError {
	if err := json.Unmarshal(body, v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return pydanticError("json_invalid", []any{"body", int(se.Offset)}, "JSON decode error", map[string]any{}, map[string]any{"error": se.Error()})
		case errors.As(err, &te):
			loc := []any{"body"}
			for _, f := range strings.Split(te.Field, ".") {
				if f != "" {
					loc = append(loc, f)
				}
			}
			kind, msg := pydanticTypeMsg(te.Type.Kind().String())
			return pydanticError(kind, loc, msg, te.Value, nil)
		default:
			return pydanticError("json_invalid", []any{"body", 0}, "JSON decode error", map[string]any{}, map[string]any{"error": err.Error()})
		}
	}
	return nil
}

func pydanticTypeMsg(goKind string) (string, string) {
	switch goKind {
	case "float64", "float32":
		return "float_parsing", "Input should be a valid number, unable to parse string as a number"
	case "int", "int64", "int32":
		return "int_parsing", "Input should be a valid integer, unable to parse string as an integer"
	case "bool":
		return "bool_parsing", "Input should be a valid boolean, unable to interpret input"
	case "string":
		return "string_type", "Input should be a valid string"
	case "slice":
		return "list_type", "Input should be a valid list"
	default:
		return "model_type", "Input should be a valid dictionary or instance of the model"
	}
}

func (s *Server) handleModels(w http.ResponseWriter) {
	now := time.Now().Unix()
	b := make([]byte, 0, 512)
	b = append(b, `{"object":"list","data":[`...)
	for i, name := range s.opts.ServedModelNames {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, name)
		b = fmt.Appendf(b, `,"object":"model","created":%d,"owned_by":"vllm","root":`, now)
		b = appendJSONString(b, s.opts.Model)
		b = fmt.Appendf(b, `,"parent":null,"max_model_len":%d,"permission":[{"id":"modelperm-%s","object":"model_permission","created":%d,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}`, s.maxModelLen, randomHex(), now)
	}
	b = append(b, "]}"...)
	writeJSONBytes(w, http.StatusOK, b)
}

func (s *Server) handleScript(w http.ResponseWriter, r *http.Request, name string) {
	switch r.Method {
	case http.MethodPut, http.MethodPost:
		body, ae := s.readJSONBody(r)
		if ae != nil {
			writeAPIError(w, ae)
			return
		}
		var sc Script
		if ae := decodeBody(body, &sc); ae != nil {
			writeAPIError(w, ae)
			return
		}
		if sc.Name == "" {
			sc.Name = name
		}
		if sc.Name != name {
			writeAPIError(w, plainBadRequest(fmt.Sprintf("script name %q does not match the path %q", sc.Name, name)))
			return
		}
		if err := s.SetScript(sc); err != nil {
			writeAPIError(w, plainBadRequest(err.Error()))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		sc, ok := s.scripts.get(name)
		if !ok {
			writeAPIError(w, &apiError{Status: http.StatusNotFound, Type: "NotFoundError", Message: fmt.Sprintf("script %q does not exist", name)})
			return
		}
		b, err := json.Marshal(sc)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSONBytes(w, http.StatusOK, b)
	default:
		s.method(w, r, http.MethodGet, http.MethodPut)
	}
}

func randomHex() string { return prefixedHex("") }

// prefixedHex is prefix followed by 16 random hex digits, built in one
// allocation.
func prefixedHex(prefix string) string {
	var raw [8]byte
	v := rand.Uint64()
	for i := range raw {
		raw[i] = byte(v >> (8 * i))
	}
	var digits [16]byte
	hex.Encode(digits[:], raw[:])
	var b strings.Builder
	b.Grow(len(prefix) + len(digits))
	b.WriteString(prefix)
	b.Write(digits[:])
	return b.String()
}

func (s *Server) getBuf() *[]byte { return s.bufs.Get().(*[]byte) }
func (s *Server) putBuf(b *[]byte) {
	if cap(*b) > 1<<20 {
		return
	}
	*b = (*b)[:0]
	s.bufs.Put(b)
}

// readAllSized is io.ReadAll with the buffer sized from the declared
// Content-Length (within the body limit), so a body is read without the
// doubling copies.
func readAllSized(r io.Reader, declared, limit int64) ([]byte, error) {
	if declared <= 0 || declared > limit {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, declared+1) // +1: the read that sees EOF needs room
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // a body longer than declared: let append grow it
		}
	}
}
