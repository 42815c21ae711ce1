// Package driver runs a bench: it builds the stack with harness/env (the
// code the harness uses), drives the load from package bench, scrapes the
// server's /metrics, checks what the capture path recorded and returns one
// bench.Result. It sits above bench (a kit) because it needs the harness.
package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

// Options configure a run; Config is copied into the result.
type Options struct {
	Config bench.Config
	Header http.Header
	APIKey string
	// MetricsURL overrides where /metrics is scraped ("" = the model
	// server's /metrics; "off" = no scraping).
	MetricsURL     string
	ScrapeInterval time.Duration
	// RequestTimeout bounds one request (0 = none).
	RequestTimeout time.Duration
	Observe        func(*bench.Sample)
	OnStage        func(int, bench.Shape)
	Logger         *slog.Logger
	// Shard, when Total is set, runs one shard of the chat schedule and
	// records it in the result; StartAt is the planned common start.
	Shard   bench.Shard
	StartAt time.Time
}

// DefaultGPU is the embedded default: a 48 GiB device with the
// Qwen3-4B-Thinking-2507 profile. Its timing model (TTFT 40 ms, ITL 20 ms,
// 20k prefill tokens/s) is off until TimeScale is set: a zero-latency fake
// isolates what the capture path itself costs.
func DefaultGPU() bench.GPUSpec {
	return bench.GPUSpec{
		MemoryBytes: 48 * gpu.GiB, Profile: vllm.DefaultModel, MaxModelLen: 131072,
		TTFT: 40 * time.Millisecond, ITL: 20 * time.Millisecond, PrefillTokS: 20000,
		OutputMean: 64,
	}
}

func gpuConfig(g bench.GPUSpec) (gpu.Config, error) {
	prof, err := gpu.LookupProfile(g.Profile)
	if err != nil {
		return gpu.Config{}, fmt.Errorf("--gpu-profile: %w", err)
	}
	return gpu.Config{Profile: prof, GPUMemoryBytes: g.MemoryBytes, MaxModelLen: g.MaxModelLen}, nil
}

// PlanGPU fills the planned capacity of g from fakes/gpu (the fake's own
// memory model, one implementation).
func PlanGPU(g *bench.GPUSpec) error {
	c, err := gpuConfig(*g)
	if err != nil {
		return err
	}
	capa, err := gpu.Plan(c)
	if err != nil {
		return fmt.Errorf("the fake vLLM would not start: %w", err)
	}
	g.KVBlocks, g.BlockSize, g.MaxConcurrency = capa.NumBlocks, capa.BlockSize, capa.MaxConcurrency
	return nil
}

// PredictedConcurrency is the planner's answer (gpu.Predict, what
// `capbench plan` prints) to how many requests of tokens tokens each the
// fake's KV cache holds at once: floor(num_blocks / ceil(tokens / block)).
func PredictedConcurrency(g bench.GPUSpec, tokens int) (int, error) {
	c, err := gpuConfig(g)
	if err != nil {
		return 0, err
	}
	f, err := gpu.Predict(c, tokens)
	if err != nil {
		return 0, err
	}
	return f.ConcurrentRequests, nil
}

// Run performs the bench described by o.
func Run(ctx context.Context, o Options) (*bench.Result, error) {
	cfg := o.Config
	res := &bench.Result{StartedAt: time.Now().UTC(), Config: cfg}
	conc := 1
	for _, s := range cfg.Stages {
		conc = max(conc, s.Concurrency)
	}
	if cfg.Sessions != nil {
		conc = max(conc, cfg.Sessions.Concurrency)
	}
	client := bench.NewHTTPClient(conc * 2)
	client.Timeout = o.RequestTimeout
	defer client.CloseIdleConnections()

	st, err := startStack(ctx, o)
	if err != nil {
		return nil, err
	}
	defer st.close()

	var scraper *bench.Scraper
	base := time.Now()
	if mu := st.metricsURL(o.MetricsURL); mu != "" {
		iv := o.ScrapeInterval
		if iv <= 0 {
			iv = 250 * time.Millisecond
		}
		scraper = bench.StartScraper(ctx, client, mu, iv, base)
	}
	syncsBefore, haveSyncs := readSyncs(ctx, client, st.proxy)
	var outcome *bench.LoadOutcome
	switch cfg.Workload {
	case bench.WorkloadSessions:
		outcome, res.Sessions, err = runSessions(ctx, o, st, client, base)
	case bench.WorkloadReplay:
		outcome, err = runReplay(ctx, o, st, client, res)
	default:
		outcome, err = runChat(ctx, o, st, client, base)
	}
	if scraper != nil {
		res.Server = scraper.Stop()
	}
	if err != nil {
		return nil, err
	}
	if haveSyncs {
		res.CaptureSyncs = syncsOver(ctx, client, st.proxy, syncsBefore, o.Logger)
	}
	res.Samples, res.Stages, res.Interrupted = outcome.Samples, outcome.Stages, outcome.Interrupted
	if o.Shard.Total > 0 {
		res.Shard = &bench.ShardInfo{Index: o.Shard.Index, Total: o.Shard.Total, PlannedStart: o.StartAt.UTC(),
			ActualStart: outcome.Started.UTC(), Concurrency: shardWorkers(o)}
	}
	if cfg.Workload != bench.WorkloadSessions && st.source != nil && sentThroughProxy(res.Samples) {
		// Fidelity runs after the load so it never competes with it.
		res.Capture = checkCapture(context.WithoutCancel(ctx), st, res.Samples)
	}
	res.Finish()
	if k, g := res.Knee, cfg.GPU; k != nil && g != nil {
		k.TokensPerRequest = meanTokens(res.Samples, k.Path)
		if n, err := PredictedConcurrency(*g, k.TokensPerRequest); err == nil {
			k.Predicted = float64(n)
		}
	}
	return res, nil
}

// shardWorkers is a closed-loop shard's share of the workers.
func shardWorkers(o Options) int {
	if st := o.Config.Stages; len(st) == 1 && st[0].Arrival == bench.Closed {
		return o.Shard.Share(st[0].Concurrency)
	}
	return 0
}

func sentThroughProxy(ss []bench.Sample) bool {
	for i := range ss {
		if ss[i].Path == bench.PathProxy {
			return true
		}
	}
	return false
}

// meanTokens is the mean prompt + output tokens of the measured requests.
func meanTokens(ss []bench.Sample, p bench.Path) int {
	var sum, n int
	for i := range ss {
		if s := &ss[i]; s.Path == p && s.Phase == bench.PhaseMeasure && s.OK() {
			sum += s.PromptTokens + s.OutputTokens
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

// stack is what a run sends to.
type stack struct {
	env    env.Env // embedded only
	direct string  // model server root ("" when only a proxy is given)
	proxy  string  // capture proxy root ("" when none)
	source sourceWithLedger
	store  string
	// captureDir is the capture store's directory, when known.
	captureDir string
	puts       *bench.LatencyRecorder // in-process proxy only
	closer     func() error
}

// sourceWithLedger freezes captured rollouts and, on the fake, returns its
// ground truth.
type sourceWithLedger interface {
	freeze(ctx context.Context, id string) (snapshotView, error)
	ledger(ctx context.Context) ([]env.LedgerEntry, error)
}

func (s *stack) close() {
	if s.closer != nil {
		_ = s.closer()
	}
}

func (s *stack) metricsURL(override string) string {
	switch {
	case override == "off":
		return ""
	case override != "":
		return override
	case s.direct != "":
		return bench.NormalizeBase(s.direct) + "/metrics"
	}
	return ""
}

func startStack(ctx context.Context, o Options) (*stack, error) {
	cfg := o.Config
	switch cfg.Target {
	case bench.TargetEmbedded:
		return startEmbedded(ctx, o)
	case bench.TargetURL:
		if cfg.URL == "" {
			return nil, errors.New("--url is empty")
		}
		return &stack{direct: cfg.URL}, nil
	case bench.TargetProxy:
		if cfg.ProxyURL == "" {
			return nil, errors.New("--proxy-url is empty")
		}
		st := &stack{proxy: cfg.ProxyURL, direct: cfg.URL}
		if cfg.CaptureDir != "" {
			e, err := env.Start(ctx, env.Spec{Backend: env.External, ProxyURL: cfg.ProxyURL, VLLMURL: cfg.URL, CaptureDir: cfg.CaptureDir, Logger: o.Logger})
			if err != nil {
				return nil, fmt.Errorf("--capture-dir %s: %w", cfg.CaptureDir, err)
			}
			st.env, st.closer, st.store, st.captureDir = e, e.Close, "file (external)", cfg.CaptureDir
			st.source = envSource{e}
		}
		return st, nil
	}
	return nil, fmt.Errorf("unknown target %q", cfg.Target)
}

func startEmbedded(ctx context.Context, o Options) (*stack, error) {
	cfg := o.Config
	g := DefaultGPU()
	if cfg.GPU != nil {
		g = *cfg.GPU
	}
	// Single calls are checked against the ledger after the load, so it
	// keeps every generation; sessions are checked as each ends, so the
	// newest few per concurrent session suffice (bounded memory).
	ledger := 0
	if s := cfg.Sessions; cfg.Workload == bench.WorkloadSessions && s != nil {
		ledger = max(s.Concurrency, 1) * (s.Turns + subagentCalls + 4) * 4
	}
	server := scenarios.Server{Model: g.Profile, MaxModelLen: g.MaxModelLen, EnableAutoToolChoice: true,
		ToolCallParser: "hermes", ChatTemplateVariant: "plain"}
	tune := &env.FakeTuning{Profile: g.Profile, LedgerLimit: ledger,
		Lengths: vllm.Lengths{Mean: g.OutputMean, StdDev: g.OutputMean / 8, Min: 1}}
	if g.TimeScale > 0 { // the fake reads a zero TimeScale as 1
		tune.Timing = vllm.Timing{TTFT: g.TTFT, InterTokenLatency: g.ITL, PrefillTokensPerSecond: g.PrefillTokS,
			BatchSlowdown: g.BatchSlowdown, TimeScale: g.TimeScale}
	}
	dir, tmp := cfg.CaptureDir, ""
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "capbench-bench-"); err != nil {
			return nil, fmt.Errorf("capture dir: %w", err)
		}
		tmp = dir
	}
	puts := bench.NewLatencyRecorder()
	e, err := env.Start(ctx, env.Spec{Backend: env.InProcess, Server: server, GPU: env.GPU{MemoryBytes: g.MemoryBytes}, Fake: tune,
		CaptureDir: dir, Logger: o.Logger, OnPut: puts.Record, BufferedStreams: cfg.BufferedStreams})
	if err != nil {
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
		return nil, fmt.Errorf("embedded stack: %w", err)
	}
	closer := func() error {
		err := e.Close()
		if tmp != "" {
			err = errors.Join(err, os.RemoveAll(tmp))
		}
		return err
	}
	return &stack{env: e, direct: e.VLLMURL(), proxy: e.ProxyURL(), source: envSource{e}, store: "file", captureDir: dir, puts: puts, closer: closer}, nil
}

func runChat(ctx context.Context, o Options, st *stack, client *http.Client, base time.Time) (*bench.LoadOutcome, error) {
	cfg := o.Config
	if cfg.Chat == nil {
		return nil, errors.New("chat workload without a request spec")
	}
	bodies, err := bench.BuildChatBodies(*cfg.Chat)
	if err != nil {
		return nil, err
	}
	w, err := chatWorkload(o, st, client, bodies, cfg.Chat.Stream)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	lc := bench.LoadConfig{Stages: cfg.Stages, Requests: cfg.Requests, Duration: time.Duration(cfg.Duration * float64(time.Second)),
		Windows: cfg.Windows, Rounds: cfg.Rounds, Seed: cfg.Seed, Observe: o.Observe, OnStage: o.OnStage,
		Shard: o.Shard, StartAt: o.StartAt}
	return bench.RunLoad(ctx, lc, w)
}

// runReplay sends every call of a capture directory at its recorded offset
// (divided by the speed) as /v1/completions with the recorded prompt ids and
// generation length; through capture, calls keep their rollout grouping.
func runReplay(ctx context.Context, o Options, st *stack, client *http.Client, res *bench.Result) (*bench.LoadOutcome, error) {
	spec := o.Config.Replay
	if spec == nil {
		return nil, errors.New("replay workload without a capture directory")
	}
	calls, err := bench.LoadTrace(ctx, spec.Dir)
	if err != nil {
		return nil, err
	}
	offsets, err := bench.TraceOffsets(calls, spec.Speed)
	if err != nil {
		return nil, err
	}
	bodies, err := bench.ReplayBodies(calls, *spec, true, nil)
	if err != nil {
		return nil, err
	}
	w, err := chatWorkload(o, st, client, bodies, true)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if _, viaProxy := w.Endpoints[bench.PathProxy]; viaProxy {
		if st.direct == "" {
			return nil, errors.New("--replay through a capture proxy needs --url (the model server) to turn the recorded token ids into prompt text")
		}
		texts, err := bench.Detokenize(ctx, client, st.direct, calls)
		if err != nil {
			return nil, err
		}
		pb, err := bench.ReplayBodies(calls, *spec, true, texts)
		if err != nil {
			return nil, err
		}
		w.PathBodies = map[bench.Path][][]byte{bench.PathProxy: pb}
	}
	w.API = "/v1/completions"
	w.RolloutFor = func(job int) string { return calls[job].RolloutID }
	spec.Calls = len(calls) // res.Config shares spec
	lc := bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Trace}}, Requests: len(calls), Offsets: offsets,
		Windows: o.Config.Windows, Seed: o.Config.Seed, Observe: o.Observe, OnStage: o.OnStage}
	res.Config.Stages, res.Config.Requests = lc.Stages, lc.Requests
	return bench.RunLoad(ctx, lc, w)
}

func chatWorkload(o Options, st *stack, client *http.Client, bodies [][]byte, stream bool) (*bench.ChatWorkload, error) {
	cfg := o.Config
	eps := map[bench.Path]bench.Endpoint{}
	prefix := "bench-" + strings.ReplaceAll(time.Now().UTC().Format("150405.000"), ".", "")
	switch cfg.Target {
	case bench.TargetEmbedded:
		eps[bench.PathDirect] = bench.Endpoint{Base: st.direct}
		eps[bench.PathProxy] = bench.Endpoint{Base: st.proxy, RolloutPrefix: prefix}
		if len(cfg.Paths) > 0 {
			keep := map[bench.Path]bench.Endpoint{}
			for _, p := range cfg.Paths {
				ep, ok := eps[p]
				if !ok {
					return nil, fmt.Errorf("--paths %q: want direct and/or proxy", p)
				}
				keep[p] = ep
			}
			eps = keep
		}
	case bench.TargetURL:
		eps[bench.PathTarget] = bench.Endpoint{Base: st.direct}
	case bench.TargetProxy:
		eps[bench.PathProxy] = bench.Endpoint{Base: st.proxy, RolloutPrefix: prefix}
		if st.direct != "" {
			eps[bench.PathDirect] = bench.Endpoint{Base: st.direct}
		}
	}
	return &bench.ChatWorkload{Client: client, Bodies: bodies, Stream: stream, Header: o.Header, APIKey: o.APIKey, Endpoints: eps}, nil
}
