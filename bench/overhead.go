package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
)

// OverheadSchema names the JSON form of OverheadResult.
const OverheadSchema = "capbench.overhead/v1"

// OverheadConfig describes a capture-overhead run: the same load sent straight
// to an in-process fake vLLM and through the capture proxy in front of it,
// alternating rounds so both see the same machine conditions.
type OverheadConfig struct {
	Concurrency int
	Requests    int // per round and path
	Rounds      int
	MaxTokens   int
	Stream      bool
	// Tokenize makes the proxy read prompt ids from vLLM's /tokenize (one more
	// upstream request per call, NeMo Gym's default) instead of asking for
	// them in the reply with return_token_ids.
	Tokenize bool
	// CaptureDir, when set, puts a file store there (fsync on every put);
	// otherwise the proxy writes to an in-memory store.
	CaptureDir string
	Logger     *slog.Logger
}

// OverheadResult holds every round of both paths and the medians' ratio.
type OverheadResult struct {
	Schema      string   `json:"schema"`
	Store       string   `json:"store"`
	Direct      []Result `json:"direct"`
	Proxy       []Result `json:"proxy"`
	DirectP50   float64  `json:"direct_p50_ms"`
	ProxyP50    float64  `json:"proxy_p50_ms"`
	AddedP50    float64  `json:"added_p50_ms"`
	Throughput  float64  `json:"proxy_to_direct_throughput"`
	CapturedAll bool     `json:"captured_all"`
}

// Overhead runs the comparison. Every proxied request uses its own rollout id
// so the store sees independent rollouts, as in a training run.
func Overhead(ctx context.Context, cfg OverheadConfig) (*OverheadResult, error) {
	if cfg.Rounds < 1 {
		return nil, fmt.Errorf("bench: Rounds must be at least 1, got %d", cfg.Rounds)
	}
	if cfg.Requests < 1 {
		return nil, fmt.Errorf("bench: Requests must be at least 1, got %d", cfg.Requests)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	fake, err := vllm.New(vllm.Options{LedgerLimit: 1, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("bench: start fake vLLM: %w", err)
	}
	if err := fake.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench: start fake vLLM: %w", err)
	}
	defer fake.Close()

	var (
		st            proxy.Store
		storeName     = "memory"
		countRollouts func() (int, error)
	)
	if cfg.CaptureDir != "" {
		if err := os.MkdirAll(cfg.CaptureDir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: capture dir: %w", err)
		}
		// Captured-all compares the store's rollout count with the requests
		// sent, so rollouts left by an earlier run would make it meaningless.
		entries, err := os.ReadDir(cfg.CaptureDir)
		if err != nil {
			return nil, fmt.Errorf("bench: capture dir: %w", err)
		}
		if len(entries) > 0 {
			return nil, fmt.Errorf("bench: capture dir %s is not empty (%d entries); give an empty or new directory so every rollout counted is one this run sent", cfg.CaptureDir, len(entries))
		}
		fs, err := store.NewFileStore(cfg.CaptureDir)
		if err != nil {
			return nil, fmt.Errorf("bench: file store: %w", err)
		}
		defer fs.Close()
		st, storeName = fs, "file"
		countRollouts = func() (int, error) {
			ids, err := fs.Rollouts(ctx)
			return len(ids), err
		}
	} else {
		ms := store.NewMemoryStore()
		st = ms
		countRollouts = func() (int, error) {
			ids, err := ms.Rollouts(ctx)
			return len(ids), err
		}
	}
	px, err := proxy.New(proxy.Options{Upstream: fake.URL(), Store: st, Logger: logger, RequestTokenIDs: !cfg.Tokenize})
	if err != nil {
		return nil, fmt.Errorf("bench: proxy: %w", err)
	}
	if err := px.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench: proxy: %w", err)
	}
	defer px.Close()

	client := NewHTTPClient(cfg.Concurrency)
	direct, err := ChatRequest(client, ChatTarget{BaseURL: fake.URL(), MaxTokens: cfg.MaxTokens, Stream: cfg.Stream, Prompt: "Say something."})
	if err != nil {
		return nil, err
	}
	var seq atomic.Int64
	proxyRoot := strings.TrimRight(px.URL(), "/")
	proxied, err := ChatRequest(client, ChatTarget{
		BaseURL: proxyRoot, MaxTokens: cfg.MaxTokens, Stream: cfg.Stream, Prompt: "Say something.",
		BaseURLFor: func() string {
			return fmt.Sprintf("%s/ng-rollout/ovh-%d/training-token-capture", proxyRoot, seq.Add(1))
		},
	})
	if err != nil {
		return nil, err
	}

	res := &OverheadResult{Schema: OverheadSchema, Store: storeName}
	run := func(name string, do Do) (Result, error) {
		r, err := Run(ctx, Config{Name: name, Concurrency: cfg.Concurrency, Requests: cfg.Requests}, do)
		if err == nil && r.Errors > 0 {
			err = fmt.Errorf("bench: %s: %d of %d requests failed, first: %s", name, r.Errors, r.Errors+r.Requests, r.FirstError)
		}
		return r, err
	}
	// Warm both paths (connections, lazy tables) before measuring.
	if _, err := run("warm-direct", direct); err != nil {
		return nil, err
	}
	if _, err := run("warm-proxy", proxied); err != nil {
		return nil, err
	}
	warm := int(seq.Load())
	for i := 0; i < cfg.Rounds; i++ {
		d, err := run("direct", direct)
		if err != nil {
			return nil, err
		}
		p, err := run("proxy", proxied)
		if err != nil {
			return nil, err
		}
		res.Direct = append(res.Direct, d)
		res.Proxy = append(res.Proxy, p)
	}
	n, err := countRollouts()
	if err != nil {
		return nil, fmt.Errorf("bench: count captured rollouts: %w", err)
	}
	sent := warm + cfg.Rounds*cfg.Requests
	res.CapturedAll = n == sent
	res.DirectP50 = medianOf(res.Direct, func(r Result) float64 { return r.Latency.P50 })
	res.ProxyP50 = medianOf(res.Proxy, func(r Result) float64 { return r.Latency.P50 })
	res.AddedP50 = res.ProxyP50 - res.DirectP50
	if d := medianOf(res.Direct, func(r Result) float64 { return r.RequestsPerS }); d > 0 {
		res.Throughput = medianOf(res.Proxy, func(r Result) float64 { return r.RequestsPerS }) / d
	}
	if !res.CapturedAll {
		return res, fmt.Errorf("bench: the store holds %d rollouts but %d requests went through the proxy, each with its own rollout id", n, sent)
	}
	return res, nil
}

func medianOf(rs []Result, f func(Result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	sort.Float64s(vs)
	m := len(vs) / 2
	if len(vs)%2 == 1 {
		return vs[m]
	}
	return (vs[m-1] + vs[m]) / 2
}
