package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/bench/driver"
	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/reports"
)

type benchFlags struct {
	url, proxyURL, captureDir, workload, model string
	promptTokens, maxTokens                    string
	stream                                     bool
	bodyFields, headers                        []string
	apiKey                                     string
	arrival                                    string
	concurrency                                int
	rate, burstiness                           float64
	sweep                                      string
	rounds, requests                           int
	duration                                   time.Duration
	warmupRequests, cooldownRequests           int
	warmup, cooldown                           time.Duration
	slo                                        string
	seed                                       uint64
	paths                                      string
	bufferedStreams                            bool
	gpuMemory, gpuProfile                      string
	maxModelLen                                int
	fakeTTFT, fakeITL                          time.Duration
	prefillRate, batchSlowdown, timeScale      float64
	outputMean                                 float64
	sessions, turns, toolTokens, subagentTurn  int
	thinkTime                                  time.Duration
	replay                                     string
	replaySpeed                                float64
	out, htmlOut, mdOut, junitOut              string
	jsonOut                                    bool
	progress                                   string
	progressEvery                              time.Duration
	metricsURL                                 string
	scrapeEvery, requestTimeout                time.Duration
	shard, startAt                             string
	shards                                     int
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a model server or the capture path: closed/open loops, sweeps, agent sessions",
		Long: `Send load and keep one sample per request (docs/bench-results.md defines the
result format and every metric; vLLM's names and definitions).

Targets:
  (default)     an embedded fake vLLM with a GPU memory and timing model (48 GiB,
                Qwen3-4B-Thinking-2507) behind the capture proxy, built with the
                harness's environment code; every request goes direct and through
                capture, interleaved, so the capture overhead is a paired ratio
  --url         a running model server (vLLM, a fake vLLM)
  --proxy-url   a running capture proxy (ours or another) with its --capture-dir;
                --url, when also given, is the model server behind it

Shapes: --arrival closed (--concurrency N) or constant/poisson/gamma (--rate R,
--burstiness B for gamma, --concurrency caps requests in flight); --sweep
concurrency=1,2,4 or rate=5,10,20 runs one stage per value and finds the knee.
Workloads: chat (single calls, --prompt-tokens and --max-tokens take 256,
uniform:100-400 or normal:512,128), sessions (Claude-Code-shaped rollouts
through capture, consumed at their end with fidelity checked) and replay
(--replay DIR: every call of a capture directory re-sent at its recorded time,
with its prompt token ids and generation length).

With --out DIR, result.json and samples.jsonl are written there; an
interrupted run (Ctrl-C) says so and still writes what it has.

Sharded: --shard I/N (or, in a Kubernetes Indexed Job, JOB_COMPLETION_INDEX
with --shards N or CAPBENCH_SHARDS) runs job k of the schedule when k mod N = I,
from one --start-at; capbench merge combines the shards' results
(docs/bench-results.md, docs/k8s.md).`,
		Example: `  capbench bench --requests 400 --concurrency 8 --slo ttft=2s,tpot=50ms --out /tmp/b1 --html /tmp/b1/report.html
  capbench bench --sweep concurrency=2,4,6,8,10,12 --prompt-tokens 26700 --max-tokens 256 --paths direct --time-scale 0.3 --requests 44
  capbench bench --workload sessions --sessions 8 --concurrency 4
  capbench bench --replay /tmp/b1-capture --replay-speed 2
  capbench bench --url http://127.0.0.1:8000 --model Qwen/Qwen3-4B-Thinking-2507 --arrival poisson --rate 20 --duration 60s --body-field ignore_eos=true
  capbench bench --proxy-url http://127.0.0.1:9000 --capture-dir /tmp/cap --url http://127.0.0.1:8000 --concurrency 16 --requests 2000
  capbench bench --url http://127.0.0.1:8000 --arrival poisson --rate 40 --requests 4000 --shard 0/4 --start-at 2026-12-01T18:00:00Z --out /tmp/shard-0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "", "model server root (a trailing /v1 is fine); empty: the embedded fake")
	fl.StringVar(&f.proxyURL, "proxy-url", "", "a running capture proxy's root (needs --capture-dir)")
	fl.StringVar(&f.captureDir, "capture-dir", "", "the capture store directory (embedded: where to put it; default a temp dir)")
	fl.StringVar(&f.workload, "workload", bench.WorkloadChat, "chat (single calls), sessions (agent-shaped rollouts) or replay (see --replay)")
	fl.StringVar(&f.model, "model", "", "model name sent (default: the fake's profile)")
	fl.StringVar(&f.promptTokens, "prompt-tokens", "128", "prompt length: N, uniform:MIN-MAX or normal:MEAN,STD")
	fl.StringVar(&f.maxTokens, "max-tokens", "64", "max_tokens per request (chat: a distribution as --prompt-tokens; sessions: a number, default 32000)")
	fl.BoolVar(&f.stream, "stream", true, "stream replies (TTFT, ITL and TPOT need it)")
	fl.StringArrayVar(&f.bodyFields, "body-field", nil, "extra request body field key=JSON (e.g. ignore_eos=true, temperature=0); repeatable")
	fl.StringArrayVar(&f.headers, "header", nil, "extra request header 'Name: value' (repeatable)")
	fl.StringVar(&f.apiKey, "api-key", "", "bearer token")
	fl.StringVar(&f.arrival, "arrival", "closed", "closed, constant, poisson or gamma")
	fl.IntVar(&f.concurrency, "concurrency", 8, "closed loop: requests (or sessions) in flight; open loop: cap on in flight (0 = none)")
	fl.Float64Var(&f.rate, "rate", 0, "open loop: requests per second")
	fl.Float64Var(&f.burstiness, "burstiness", 1, "gamma arrivals: shape (1 = Poisson, <1 burstier)")
	fl.StringVar(&f.sweep, "sweep", "", "one stage per value: concurrency=1,2,4 or rate=5,10,20")
	fl.IntVar(&f.rounds, "rounds", 1, "repeat the stage list, alternating its order (knee from the median per point)")
	fl.IntVar(&f.requests, "requests", 200, "requests per stage (0 = until --duration); paired runs send each both ways")
	fl.DurationVar(&f.duration, "duration", 0, "stop every stage after this long (0 = until --requests)")
	fl.IntVar(&f.warmupRequests, "warmup-requests", 0, "exclude the first N requests of every stage (tagged warmup)")
	fl.IntVar(&f.cooldownRequests, "cooldown-requests", 0, "exclude the last N requests of every stage (tagged cooldown)")
	fl.DurationVar(&f.warmup, "warmup", 0, "exclude requests started in the first D of every stage")
	fl.DurationVar(&f.cooldown, "cooldown", 0, "exclude requests started in the last D of every stage")
	fl.StringVar(&f.slo, "slo", "", "goodput SLOs, all must hold: ttft=2s,tpot=50ms[,e2el=30s]")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of request bodies and arrival times")
	fl.StringVar(&f.paths, "paths", "", "embedded: direct, proxy or direct,proxy (default both, paired)")
	fl.StringVar(&f.gpuMemory, "gpu-memory", "48GiB", "embedded: the fake's GPU memory (48GiB) or a GPU name (L40S, H100, ...)")
	fl.StringVar(&f.gpuProfile, "gpu-profile", "", "embedded: model profile (default Qwen/Qwen3-4B-Thinking-2507)")
	fl.IntVar(&f.maxModelLen, "max-model-len", 0, "embedded: --max-model-len of the fake (default 131072)")
	fl.DurationVar(&f.fakeTTFT, "fake-ttft", 0, "embedded: fixed TTFT before scaling (default 40ms)")
	fl.DurationVar(&f.fakeITL, "fake-itl", 0, "embedded: inter-token latency before scaling (default 20ms)")
	fl.Float64Var(&f.prefillRate, "prefill-rate", 0, "embedded: prefill tokens per second (default 20000)")
	fl.Float64Var(&f.batchSlowdown, "batch-slowdown", 0, "embedded: every delay × (1 + this × (running-1))")
	fl.BoolVar(&f.bufferedStreams, "buffered-streams", false, "embedded: the proxy buffers streamed replies as NeMo Gym's model server does (TTFT through capture = E2EL)")
	fl.Float64Var(&f.timeScale, "time-scale", 0, "embedded: turn the fake's timing model on at this fraction of real time (0 = off: a zero-latency fake, the capture path's own cost)")
	fl.Float64Var(&f.outputMean, "output-mean", 0, "embedded: mean generated tokens of the fake (default 64; max_tokens caps it)")
	fl.IntVar(&f.sessions, "sessions", 8, "sessions workload: rollouts to run")
	fl.IntVar(&f.turns, "turns", 17, "sessions workload: model calls of the main conversation")
	fl.IntVar(&f.toolTokens, "tool-tokens", 2000, "sessions workload: tokens each tool result adds to the prompt")
	fl.IntVar(&f.subagentTurn, "subagent-turn", 3, "sessions workload: the main call that spawns a sub-agent (0 = none)")
	fl.DurationVar(&f.thinkTime, "think-time", 20*time.Millisecond, "sessions workload: pause before every call after the first")
	fl.StringVar(&f.replay, "replay", "", "replay workload: a capture directory whose calls are re-sent at their recorded times")
	fl.Float64Var(&f.replaySpeed, "replay-speed", 1, "replay workload: divide the recorded offsets by this")
	fl.StringVar(&f.out, "out", "", "directory for result.json and samples.jsonl")
	fl.StringVar(&f.htmlOut, "html", "", "write the self-contained HTML report to this file")
	fl.StringVar(&f.mdOut, "md", "", "write the Markdown report to this file")
	fl.StringVar(&f.junitOut, "junit", "", "write the SLO and capture gates as JUnit XML to this file (exit non-zero when one fails)")
	fl.BoolVar(&f.jsonOut, "json", false, "print the result JSON instead of the table")
	fl.StringVar(&f.progress, "progress", "auto", "auto (bars on a terminal, plain lines otherwise), bars, lines or off")
	fl.DurationVar(&f.progressEvery, "progress-every", 5*time.Second, "interval of plain progress lines")
	fl.StringVar(&f.metricsURL, "metrics-url", "", "scrape this /metrics URL (default: the model server's; off = none)")
	fl.DurationVar(&f.scrapeEvery, "scrape-every", 250*time.Millisecond, "scrape interval of /metrics")
	fl.DurationVar(&f.requestTimeout, "request-timeout", 10*time.Minute, "give up on one request after this long")
	fl.StringVar(&f.shard, "shard", "", "run shard I of N (0-based, e.g. 0/4) of the schedule; merge the shards with capbench merge")
	fl.IntVar(&f.shards, "shards", 0, "the shard total when the index comes from JOB_COMPLETION_INDEX (or set CAPBENCH_SHARDS)")
	fl.StringVar(&f.startAt, "start-at", "", "wait until this RFC3339 time and count the schedule from it (every shard of a run gets the same)")
	return cmd
}

// benchOptions turns flags into driver options, naming the flag at fault.
func benchOptions(f benchFlags) (driver.Options, error) {
	var o driver.Options
	c := &o.Config
	switch {
	case f.proxyURL != "":
		c.Target, c.ProxyURL, c.URL, c.CaptureDir = bench.TargetProxy, f.proxyURL, f.url, f.captureDir
		if f.captureDir == "" {
			return o, errors.New("--proxy-url needs --capture-dir (the proxy's capture store) to count and check what it captured")
		}
	case f.url != "":
		c.Target, c.URL = bench.TargetURL, f.url
		if f.captureDir != "" {
			return o, errors.New("--capture-dir needs --proxy-url (or no --url for the embedded stack)")
		}
	default:
		c.Target, c.CaptureDir = bench.TargetEmbedded, f.captureDir
		g := driver.DefaultGPU()
		n, err := gpu.ParseBytes(f.gpuMemory)
		if err != nil {
			d, derr := gpu.LookupDevice(f.gpuMemory)
			if derr != nil {
				return o, fmt.Errorf("--gpu-memory: %w; or a GPU name: %w", err, derr)
			}
			n = d.TotalBytes
		}
		g.MemoryBytes = n
		setIf(&g.Profile, f.gpuProfile)
		if f.maxModelLen > 0 {
			g.MaxModelLen = f.maxModelLen
		}
		setDur(&g.TTFT, f.fakeTTFT)
		setDur(&g.ITL, f.fakeITL)
		setF(&g.PrefillTokS, f.prefillRate)
		setF(&g.BatchSlowdown, f.batchSlowdown)
		setF(&g.TimeScale, f.timeScale)
		setF(&g.OutputMean, f.outputMean)
		if err := driver.PlanGPU(&g); err != nil {
			return o, err
		}
		c.GPU = &g
		if f.paths != "" {
			for _, p := range strings.Split(f.paths, ",") {
				c.Paths = append(c.Paths, bench.Path(strings.TrimSpace(p)))
			}
		}
	}
	if f.paths != "" && c.Target != bench.TargetEmbedded {
		return o, errors.New("--paths applies to the embedded stack only")
	}
	if f.bufferedStreams && c.Target != bench.TargetEmbedded {
		return o, errors.New("--buffered-streams applies to the embedded stack only (start your own proxy with capbench proxy --buffered-streams)")
	}
	c.BufferedStreams = f.bufferedStreams
	model := f.model
	if model == "" {
		model = "Qwen/Qwen3-4B-Thinking-2507"
		if c.GPU != nil {
			model = c.GPU.Profile
		}
	}
	base := bench.Shape{Arrival: bench.Arrival(f.arrival), Concurrency: f.concurrency, Rate: f.rate}
	if base.Arrival == bench.Gamma {
		base.Burstiness = f.burstiness
	}
	c.Stages = []bench.Shape{base}
	if f.sweep != "" {
		st, err := bench.ParseSweep(f.sweep, base)
		if err != nil {
			return o, err
		}
		c.Stages = st
	} else if err := base.Validate(); err != nil {
		return o, err
	}
	if f.rounds < 1 {
		return o, fmt.Errorf("--rounds must be at least 1, got %d", f.rounds)
	}
	c.Requests, c.Duration, c.Rounds, c.Seed = f.requests, f.duration.Seconds(), f.rounds, f.seed
	c.Windows = bench.Windows{WarmupRequests: f.warmupRequests, CooldownRequests: f.cooldownRequests, Warmup: f.warmup, Cooldown: f.cooldown}
	slo, err := bench.ParseSLO(f.slo)
	if err != nil {
		return o, err
	}
	c.SLO = slo
	if f.replay != "" {
		f.workload = bench.WorkloadReplay
	}
	switch f.workload {
	case bench.WorkloadReplay:
		if f.replay == "" {
			return o, errors.New("--workload replay needs --replay DIR (a capture directory)")
		}
		c.Workload = bench.WorkloadReplay
		extra, err := parseBodyFields(f.bodyFields)
		if err != nil {
			return o, err
		}
		if !(f.replaySpeed > 0) {
			return o, fmt.Errorf("--replay-speed must be positive, got %v", f.replaySpeed)
		}
		c.Replay = &bench.ReplaySpec{Dir: f.replay, Speed: f.replaySpeed, Extra: extra, Model: f.model}
	case bench.WorkloadChat:
		c.Workload = bench.WorkloadChat
		spec := &bench.ChatSpec{Model: model, Stream: f.stream, Seed: f.seed}
		if spec.Prompt, err = bench.ParseDist("--prompt-tokens", f.promptTokens); err != nil {
			return o, err
		}
		if spec.Output, err = bench.ParseDist("--max-tokens", f.maxTokens); err != nil {
			return o, err
		}
		if spec.Extra, err = parseBodyFields(f.bodyFields); err != nil {
			return o, err
		}
		c.Chat = spec
	case bench.WorkloadSessions:
		c.Workload = bench.WorkloadSessions
		s := driver.DefaultSessions()
		s.Sessions, s.Concurrency, s.Turns, s.ToolTokens, s.ThinkTime, s.SubAgentTurn = f.sessions, f.concurrency, f.turns, f.toolTokens, f.thinkTime, f.subagentTurn
		if f.maxTokens != "64" {
			if _, err := fmt.Sscanf(f.maxTokens, "%d", &s.MaxTokens); err != nil {
				return o, fmt.Errorf("--max-tokens %q: the sessions workload takes one number", f.maxTokens)
			}
		}
		c.Sessions = &s
		c.Stages = []bench.Shape{{Arrival: bench.Closed, Concurrency: f.concurrency}}
	default:
		return o, fmt.Errorf("--workload %q: want chat, sessions or replay", f.workload)
	}
	hdr := http.Header{}
	for _, h := range f.headers {
		name, value, ok := cutHeader(h)
		if !ok {
			return o, fmt.Errorf("--header %q: want 'Name: value'", h)
		}
		hdr.Add(name, value)
	}
	o.Header, o.APIKey, o.MetricsURL, o.ScrapeInterval, o.RequestTimeout = hdr, f.apiKey, f.metricsURL, f.scrapeEvery, f.requestTimeout
	return o, shardOptions(f, &o, os.Getenv)
}

// shardOptions reads --shard/--shards/JOB_COMPLETION_INDEX and --start-at.
func shardOptions(f benchFlags, o *driver.Options, getenv func(string) string) error {
	if f.startAt != "" {
		t, err := time.Parse(time.RFC3339Nano, f.startAt)
		if err != nil {
			return fmt.Errorf("--start-at %q: want an RFC3339 time such as 2026-12-01T18:00:00Z", f.startAt)
		}
		o.StartAt = t
	}
	sh, err := bench.ShardFromEnv(f.shard, f.shards, getenv)
	if err != nil || sh.Total == 0 {
		return err
	}
	c := o.Config
	switch {
	case c.Workload == bench.WorkloadReplay:
		return errors.New("--shard splits the chat and sessions workloads, not a replay")
	case c.Target == bench.TargetEmbedded:
		return errors.New("--shard needs a shared server (--url or --proxy-url): every shard would start its own embedded stack")
	case c.Workload == bench.WorkloadSessions && c.Sessions.Sessions < sh.Total:
		return fmt.Errorf("--shard %s: --sessions %d over %d shards leaves a shard without a session", sh, c.Sessions.Sessions, sh.Total)
	}
	o.Shard = sh
	// The schedule checks (one stage, a worker per shard) live in
	// bench.LoadConfig.Validate.
	return bench.LoadConfig{Stages: c.Stages, Requests: c.Requests, Duration: time.Duration(c.Duration * float64(time.Second)),
		Windows: c.Windows, Rounds: c.Rounds, Shard: sh}.Validate()
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func setDur(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

func setF(dst *float64, v float64) {
	if v > 0 {
		*dst = v
	}
}

// parseBodyFields reads key=JSON pairs; a value that is not JSON is a string.
func parseBodyFields(fields []string) (map[string]any, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	out := map[string]any{}
	for _, kv := range fields {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("--body-field %q: want key=value (value as JSON, e.g. ignore_eos=true)", kv)
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		out[strings.TrimSpace(k)] = val
	}
	return out, nil
}

func cutHeader(h string) (string, string, bool) {
	name, value, ok := strings.Cut(h, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", "", false
	}
	return name, strings.TrimSpace(value), true
}

func runBench(cmd *cobra.Command, f benchFlags) error {
	o, err := benchOptions(f)
	if err != nil {
		return err
	}
	total := 0
	if o.Config.Requests > 0 {
		paths := 1
		if o.Config.Target == bench.TargetEmbedded && len(o.Config.Paths) != 1 {
			paths = 2
		}
		total = o.Config.Requests * len(o.Config.Stages) * max(o.Config.Rounds, 1) * paths
	}
	if o.Config.Workload == bench.WorkloadSessions {
		total = 0
	}
	if o.Shard.Sharded() {
		total = o.Shard.Jobs(total)
	}
	pr, err := newBenchProgress(f.progress, cmd.ErrOrStderr(), total, f.progressEvery)
	if err != nil {
		return err
	}
	o.Observe, o.OnStage = pr.observe, pr.stage
	res, err := driver.Run(cmd.Context(), o)
	pr.finish()
	if err != nil {
		return err
	}
	return writeBench(cmd, f, res)
}

// writeBench writes every requested output, then reports what went wrong.
func writeBench(cmd *cobra.Command, f benchFlags, res *bench.Result) error {
	var errs []error
	if f.out != "" {
		path, err := bench.WriteResult(f.out, res)
		if err != nil {
			errs = append(errs, fmt.Errorf("--out: %w", err))
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "result: %s (samples: %s)\n", path, filepath.Join(f.out, bench.SamplesFileName))
		}
	}
	failedGates, err := writeReports(res, f.htmlOut, f.mdOut, f.junitOut)
	errs = append(errs, err)
	out := cmd.OutOrStdout()
	if f.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		errs = append(errs, enc.Encode(res))
	} else {
		errs = append(errs, reports.BenchTable(out, res))
	}
	if res.SampleCount == 0 {
		errs = append(errs, errors.New("no request was sent"))
	} else if ok := countOK(res); ok == 0 {
		errs = append(errs, fmt.Errorf("every request failed; first error: %s", firstError(res)))
	}
	if failedGates > 0 {
		errs = append(errs, fmt.Errorf("%d bench gate(s) failed (see %s)", failedGates, f.junitOut))
	}
	if res.Interrupted {
		errs = append(errs, errors.New("interrupted: the results cover what completed before the stop"))
	}
	return errors.Join(errs...)
}

func countOK(r *bench.Result) int {
	n := 0
	for i := range r.Samples {
		if r.Samples[i].OK() {
			n++
		}
	}
	return n
}

func firstError(r *bench.Result) string {
	for i := range r.Samples {
		if e := r.Samples[i].Error; e != "" {
			return e
		}
	}
	return ""
}

// writeReports writes the HTML, Markdown and JUnit files asked for and
// returns the number of failed gates.
func writeReports(res *bench.Result, htmlPath, mdPath, junitPath string) (int, error) {
	var errs []error
	write := func(flag, path string, fn func(f *os.File) error) {
		if path == "" {
			return
		}
		f, err := os.Create(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", flag, err))
			return
		}
		err = fn(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", flag, path, err))
		}
	}
	write("--html", htmlPath, func(f *os.File) error { return reports.BenchHTML(f, res) })
	write("--md", mdPath, func(f *os.File) error { return reports.BenchMarkdown(f, res) })
	failed := 0
	write("--junit", junitPath, func(f *os.File) error {
		n, err := reports.BenchJUnit(f, res)
		failed = n
		return err
	})
	return failed, errors.Join(errs...)
}
