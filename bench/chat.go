package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ChatSpec describes the single-call workload's request bodies.
type ChatSpec struct {
	Model string `json:"model"`
	// Prompt is the prompt length in tokens (approximate: filler words of
	// about one token each; the server's usage gives the exact count).
	Prompt Dist `json:"prompt_tokens"`
	// Output is max_tokens per request.
	Output Dist `json:"max_tokens"`
	Stream bool `json:"stream"`
	// Extra body fields, sent as given (ignore_eos, temperature, ...).
	Extra map[string]any `json:"extra_body,omitempty"`
	// Variants is the number of distinct bodies drawn (default 64); job n
	// sends body n mod Variants, so both paths of a pair send one body.
	Variants int    `json:"variants,omitempty"`
	Seed     uint64 `json:"seed"`
}

var promptWords = strings.Fields(`the model reads a short plan and then writes a careful answer about data tools
tests files results steps values checks output input order review simple clear next first last small large
fast slow good new old same other each every this that with from into over under after before while`)

// BuildChatBodies draws the request bodies of spec.
func BuildChatBodies(spec ChatSpec) ([][]byte, error) {
	n := spec.Variants
	if n <= 0 {
		n = 64
	}
	reserved := map[string]bool{"model": true, "messages": true, "max_tokens": true, "stream": true}
	for k := range spec.Extra {
		if reserved[k] {
			return nil, fmt.Errorf("--body-field %s: set by the workload itself (use --model, --prompt-tokens, --max-tokens, --stream)", k)
		}
	}
	r := rand.New(rand.NewPCG(spec.Seed, 0x5eed))
	out := make([][]byte, n)
	for i := range out {
		body := map[string]any{}
		for k, v := range spec.Extra {
			body[k] = v
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Request %d.", i)
		for range spec.Prompt.Draw(r) {
			b.WriteByte(' ')
			b.WriteString(promptWords[r.IntN(len(promptWords))])
		}
		body["model"] = spec.Model
		body["messages"] = []map[string]string{{"role": "user", "content": b.String()}}
		body["max_tokens"] = spec.Output.Draw(r)
		body["stream"] = spec.Stream
		if spec.Stream {
			if _, set := body["stream_options"]; !set {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
		}
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request body: %w", err)
		}
		out[i] = raw
	}
	return out, nil
}

// Endpoint is where one path's requests go.
type Endpoint struct {
	// Base is the server root; a trailing "/" or "/v1" is dropped.
	Base string `json:"base"`
	// RolloutPrefix, when set, sends job n through the capture URL
	// {Base}/ng-rollout/{prefix}-{n}/training-token-capture, one rollout per job.
	RolloutPrefix string `json:"rollout_prefix,omitempty"`
}

// NormalizeBase drops the "/" and "/v1" tails users paste.
func NormalizeBase(u string) string {
	u = strings.TrimRight(u, "/")
	u = strings.TrimSuffix(u, "/v1")
	return strings.TrimRight(u, "/")
}

// RolloutID is the rollout id job n of stage st uses on this endpoint (""
// without capture).
func (e Endpoint) RolloutID(st, job int) string {
	if e.RolloutPrefix == "" {
		return ""
	}
	return e.RolloutPrefix + "-" + strconv.Itoa(st) + "-" + strconv.Itoa(job)
}

// basePath is the base URL's own path, such as /capture for a proxy
// mounted there ("" when it has none).
func (e Endpoint) basePath() string {
	if u, err := url.Parse(NormalizeBase(e.Base)); err == nil {
		return u.Path
	}
	return ""
}

// pathFor is the request path for a rollout ("" = none) under prefix, the
// endpoint's basePath.
func pathFor(prefix, rolloutID, api string) string {
	if rolloutID != "" {
		return prefix + "/ng-rollout/" + rolloutID + "/training-token-capture" + api
	}
	return prefix + api
}

// ChatWorkload sends single Chat Completions calls. Plain-http endpoints
// use a minimal keep-alive HTTP/1.1 client (rawhttp.go); others net/http.
type ChatWorkload struct {
	Client    *http.Client
	Bodies    [][]byte
	Stream    bool
	Header    http.Header
	APIKey    string
	Endpoints map[Path]Endpoint
	// NetHTTP sends every request through Client, never the raw client.
	NetHTTP bool
	// API is the request path (default /v1/chat/completions).
	API string
	// PathBodies overrides Bodies for one path (a replay through capture
	// sends text prompts where the direct path sends token ids).
	PathBodies map[Path][][]byte
	// RolloutFor, when set, names job n's rollout on capture endpoints
	// (a replay keeps the recorded grouping of calls into rollouts).
	RolloutFor func(job int) string
	paths      []Path
	prefixes   map[Path]string // each endpoint's basePath
	raw        map[Path]*rawClient
	rawHdr     []byte
	once       sync.Once
}

func (c *ChatWorkload) init() {
	c.once.Do(func() {
		c.raw, c.prefixes = map[Path]*rawClient{}, map[Path]string{}
		for _, p := range []Path{PathDirect, PathProxy, PathTarget} {
			ep, ok := c.Endpoints[p]
			if !ok {
				continue
			}
			c.paths = append(c.paths, p)
			c.prefixes[p] = ep.basePath()
			if rc := newRawClient(NormalizeBase(ep.Base)); rc != nil && !c.NetHTTP {
				c.raw[p] = rc
			}
		}
		var b bytes.Buffer
		for k, vs := range c.Header {
			for _, v := range vs {
				fmt.Fprintf(&b, "%s: %s\r\n", k, v)
			}
		}
		if c.APIKey != "" {
			fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", c.APIKey)
		}
		c.rawHdr = b.Bytes()
	})
}

// Paths lists the endpoints' paths, direct first.
func (c *ChatWorkload) Paths() []Path {
	c.init()
	return c.paths
}

// Close closes idle connections.
func (c *ChatWorkload) Close() {
	c.init()
	for _, rc := range c.raw {
		rc.closeIdle()
	}
	if c.Client != nil {
		c.Client.CloseIdleConnections()
	}
}

var (
	bufPool   = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}
	replyPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}
)

// readAll appends r to buf (reused across replies).
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// Send performs one call and fills s.
func (c *ChatWorkload) Send(ctx context.Context, job int, p Path, base time.Time, s *Sample) {
	c.init()
	ep := c.Endpoints[p]
	s.RolloutID = ep.RolloutID(s.Stage, job)
	if c.RolloutFor != nil && ep.RolloutPrefix != "" {
		s.RolloutID = ep.RolloutPrefix + "-" + c.RolloutFor(job)
	}
	bodies := c.Bodies
	if pb, ok := c.PathBodies[p]; ok {
		bodies = pb
	}
	body := bodies[job%len(bodies)]
	api := c.API
	if api == "" {
		api = "/v1/chat/completions"
	}
	if rc := c.raw[p]; rc != nil {
		s.StartNS = time.Since(base).Nanoseconds()
		defer func() { s.EndNS = time.Since(base).Nanoseconds() }()
		reply, err := rc.post(ctx, pathFor(c.prefixes[p], s.RolloutID, api), c.rawHdr, body)
		if err != nil {
			s.fail(classify(ctx, err), err)
			return
		}
		defer reply.Close()
		c.readReply(ctx, reply.Status, reply.Body, base, s)
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, NormalizeBase(ep.Base)+pathFor(c.prefixes[p], s.RolloutID, api), bytes.NewReader(body))
	if err != nil {
		s.fail(ErrConnect, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	s.StartNS = time.Since(base).Nanoseconds()
	defer func() { s.EndNS = time.Since(base).Nanoseconds() }()
	resp, err := c.Client.Do(req)
	if err != nil {
		s.fail(classify(ctx, err), err)
		return
	}
	defer closeBody(resp.Body)
	c.readReply(ctx, resp.StatusCode, resp.Body, base, s)
}

func (c *ChatWorkload) readReply(ctx context.Context, status int, body io.Reader, base time.Time, s *Sample) {
	s.Status = status
	br := bufPool.Get().(*bufio.Reader)
	arrived := &arrival{r: body, base: base}
	br.Reset(arrived)
	defer func() { br.Reset(nil); bufPool.Put(br) }()
	if status != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(br, 512))
		kind := ErrHTTP5xx
		if status < 500 {
			kind = ErrHTTP4xx
		}
		s.fail(kind, fmt.Errorf("status %d: %s", status, bytes.TrimSpace(msg)))
		return
	}
	if c.Stream {
		readStream(ctx, br, arrived, s)
		return
	}
	bp := replyPool.Get().(*[]byte)
	defer replyPool.Put(bp)
	raw, err := readAll(br, (*bp)[:0])
	*bp = raw
	if err != nil {
		s.fail(classify(ctx, err), fmt.Errorf("read reply: %w", err))
		return
	}
	if !usageInto(raw, s) {
		s.fail(ErrDecode, errors.New("reply has no usage object"))
	}
}

func (s *Sample) fail(kind ErrorKind, err error) {
	s.ErrorKind, s.Error = kind, err.Error()
}

// classify maps a transport error to a kind.
func classify(ctx context.Context, err error) ErrorKind {
	var ne net.Error
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return ErrCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return ErrTimeout
	case errors.Is(err, io.ErrUnexpectedEOF):
		return ErrStream
	}
	return ErrConnect
}

var (
	dataPrefix   = []byte("data:")
	doneMarker   = []byte("[DONE]")
	choicesKey   = []byte(`"choices":[`)
	completionK  = []byte(`"completion_tokens":`)
	promptK      = []byte(`"prompt_tokens":`)
	errorKey     = []byte(`"error":`)
	objectErrKey = []byte(`"object":"error"`)
)

// arrival reads a reply body and keeps the time (since base) its last read
// returned bytes: when the events in them reached the generator. Events
// that arrived in one read share a time, as they did on the wire, and a
// stream of 64 events costs a clock read per read, not per event.
type arrival struct {
	r    io.Reader
	base time.Time
	ns   int64
}

func (a *arrival) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.ns = time.Since(a.base).Nanoseconds()
	}
	return n, err
}

// readStream reads an SSE reply without decoding each event: an event with
// a non-empty choices list is an output chunk (vLLM bench's rule; the first
// one is the TTFT, later ones ITL samples), usage numbers are read by key.
// Each chunk is timed when the read that brought its last byte returned.
func readStream(ctx context.Context, br *bufio.Reader, arrived *arrival, s *Sample) {
	var (
		chunks  int
		lastNS  int64
		done    bool
		long    []byte
		gotUse  bool
		errText string
	)
	for !done {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if data, ok := bytes.CutPrefix(line, dataPrefix); ok {
			data = bytes.TrimSpace(data)
			// Most events are output chunks: find those with one search and
			// look for usage or errors only in the others.
			i := indexChoices(data)
			switch {
			case i >= 0 && i+len(choicesKey) < len(data) && data[i+len(choicesKey)] != ']':
				now := arrived.ns
				if chunks == 0 {
					s.FirstTokenNS = now
					s.ChunkGapsUS = make([]int64, 0, 64)
				} else {
					s.ChunkGapsUS = append(s.ChunkGapsUS, (now-lastNS)/1000)
				}
				lastNS = now
				chunks++
			case bytes.Equal(data, doneMarker):
				done = true
			case bytes.HasPrefix(data, []byte(`{"error"`)) || bytes.Contains(data, objectErrKey):
				errText = string(data)
				if j := bytes.Index(data, errorKey); j >= 0 && len(data)-j > 300 {
					errText = string(data[j : j+300])
				}
			case bytes.Contains(data, completionK):
				gotUse = usageInto(data, s) || gotUse
			}
		}
		if err != nil {
			if errText == "" && !done {
				if errors.Is(err, io.EOF) {
					s.fail(ErrStream, errors.New("stream ended without [DONE]"))
				} else {
					s.fail(classify(ctx, err), fmt.Errorf("read stream: %w", err))
				}
				return
			}
			break
		}
	}
	if errText != "" {
		s.fail(ErrStream, fmt.Errorf("stream error event: %s", errText))
		return
	}
	if !gotUse {
		s.OutputTokens, s.TokenSource = chunks, "chunks"
	}
}

// indexChoices is bytes.Index(data, choicesKey), found from its last byte:
// Index tries every quote of an event as the key's start, and an event is
// mostly quotes, while its first '[' is most often the choices list's.
// Occurrences end at distinct brackets, so the first found is Index's.
func indexChoices(data []byte) int {
	key := choicesKey[:len(choicesKey)-1] // `"choices":`
	for off := 0; ; {
		j := bytes.IndexByte(data[off:], '[')
		if j < 0 {
			return -1
		}
		j += off
		if j >= len(key) && bytes.Equal(data[j-len(key):j], key) {
			return j - len(key)
		}
		off = j + 1
	}
}

// usageInto reads prompt_tokens and completion_tokens after the last
// "usage" key of raw.
func usageInto(raw []byte, s *Sample) bool {
	i := bytes.LastIndex(raw, []byte(`"usage":`))
	if i < 0 {
		return false
	}
	u := raw[i:]
	c, okC := intAfter(u, completionK)
	p, okP := intAfter(u, promptK)
	if !okC {
		return false
	}
	s.OutputTokens, s.TokenSource = c, "usage"
	if okP {
		s.PromptTokens = p
	}
	return true
}

func intAfter(b, key []byte) (int, bool) {
	i := bytes.Index(b, key)
	if i < 0 {
		return 0, false
	}
	b = bytes.TrimLeft(b[i+len(key):], " ")
	n, j := 0, 0
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		n = n*10 + int(b[j]-'0')
	}
	return n, j > 0
}

// NewHTTPClient returns a client sized for conc concurrent connections to one
// host, without transparent gzip (it would hide the wire timing).
func NewHTTPClient(conc int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conc * 4,
		MaxIdleConnsPerHost: conc * 4,
		DisableCompression:  true,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// maxDrain bounds what closeBody reads past the reply; a longer tail costs a
// new connection instead of unbounded reading.
const maxDrain = 64 << 10

// closeBody reads the rest of a reply before closing it: the transport
// reuses only a connection whose body reached EOF, and without the drain
// every request would pay for a new connection.
func closeBody(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}
