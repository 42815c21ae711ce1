package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/bench"
)

type benchFlags struct {
	url         string
	model       string
	prompt      string
	concurrency int
	requests    int
	duration    time.Duration
	maxTokens   int
	stream      bool
	apiKey      string
	headers     []string
	jsonOut     bool
	rounds      int
	captureDir  string
	progress    string
	tokenize    bool
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Closed-loop Chat Completions load; without --url, the capture proxy's overhead over an in-process fake vLLM",
		Long: `With --url, send closed-loop Chat Completions load to that server (a vLLM, a fake
vLLM or a capture proxy URL) and report throughput and latency percentiles.

Without --url, start a fake vLLM in-process, put the capture proxy in front of it
and send the same load straight to the fake and through the proxy, alternating
rounds, so the overhead of capture is a ratio measured side by side in one run.
With --capture-dir the proxy writes to a file store there (every put fsynced);
otherwise to an in-memory store.`,
		Example: `  capbench bench --concurrency 16 --requests 2000 --rounds 3
  capbench bench --capture-dir /tmp/cap --concurrency 64
  capbench bench --url http://127.0.0.1:8000 --model Qwen/Qwen3-4B-Thinking-2507 --concurrency 64 --requests 5000
  capbench bench --url http://127.0.0.1:9000/ng-rollout/load-1/training-token-capture --stream --max-tokens 256`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "", "server root URL (empty: measure capture overhead in-process)")
	fl.StringVar(&f.model, "model", "", "model name sent in each request")
	fl.StringVar(&f.prompt, "prompt", "Write a short poem about tokens.", "user message sent in each request")
	fl.IntVar(&f.concurrency, "concurrency", 16, "concurrent connections, each with one request in flight")
	fl.IntVar(&f.requests, "requests", 1000, "total requests (0 = until --duration)")
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (0 = until --requests)")
	fl.IntVar(&f.maxTokens, "max-tokens", 64, "max_tokens of each request")
	fl.BoolVar(&f.stream, "stream", false, "stream replies (measures time to first token)")
	fl.StringVar(&f.apiKey, "api-key", "", "bearer token")
	fl.StringArrayVar(&f.headers, "header", nil, "extra request header 'Name: value' (repeatable)")
	fl.BoolVar(&f.jsonOut, "json", false, "print the result as JSON")
	fl.StringVar(&f.progress, "progress", "auto", "progress bar: auto (only on a terminal), on or off")
	fl.BoolVar(&f.tokenize, "tokenize", false, "without --url: the proxy reads prompt ids from /tokenize (one more upstream call) instead of return_token_ids")
	fl.IntVar(&f.rounds, "rounds", 3, "without --url: alternating direct/proxy rounds")
	fl.StringVar(&f.captureDir, "capture-dir", "", "without --url: file-store directory for the proxy (empty: in-memory store)")
	return cmd
}

func runBench(cmd *cobra.Command, f benchFlags) error {
	if f.url == "" {
		return runOverhead(cmd, f)
	}
	hdr := http.Header{}
	for _, h := range f.headers {
		name, value, ok := cutHeader(h)
		if !ok {
			return fmt.Errorf("--header %q: want 'Name: value'", h)
		}
		hdr.Add(name, value)
	}
	do, err := bench.ChatRequest(bench.NewHTTPClient(f.concurrency), bench.ChatTarget{
		BaseURL: f.url, Model: f.model, Prompt: f.prompt, MaxTokens: f.maxTokens,
		Stream: f.stream, APIKey: f.apiKey, Header: hdr,
	})
	if err != nil {
		return err
	}
	cfg := bench.Config{Name: f.url, Concurrency: f.concurrency, Requests: f.requests, Duration: f.duration}
	bar, err := newProgressBar(f.progress, cmd.ErrOrStderr(), f.requests)
	if err != nil {
		return err
	}
	cfg.Progress = bar.observe
	res, err := bench.Run(cmd.Context(), cfg, do)
	bar.finish()
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printBench(out, res)
	if res.Requests == 0 && res.Errors > 0 {
		return fmt.Errorf("every request failed; first error: %s", res.FirstError)
	}
	return nil
}

func printBench(w io.Writer, r bench.Result) {
	fmt.Fprintf(w, "target        %s\n", r.Name)
	fmt.Fprintf(w, "concurrency   %d\n", r.Concurrency)
	fmt.Fprintf(w, "requests      %d ok, %d failed in %.2fs\n", r.Requests, r.Errors, r.Elapsed)
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error   %s\n", r.FirstError)
	}
	fmt.Fprintf(w, "throughput    %.0f req/s, %.0f generated tok/s\n", r.RequestsPerS, r.TokensPerS)
	fmt.Fprintf(w, "latency ms    p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.Max)
	if r.TTFT != nil {
		fmt.Fprintf(w, "ttft ms       p50 %.2f  p90 %.2f  p99 %.2f\n", r.TTFT.P50, r.TTFT.P90, r.TTFT.P99)
	}
}

func cutHeader(h string) (string, string, bool) {
	name, value, ok := strings.Cut(h, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", "", false
	}
	return name, strings.TrimSpace(value), true
}

func runOverhead(cmd *cobra.Command, f benchFlags) error {
	res, err := bench.Overhead(cmd.Context(), bench.OverheadConfig{
		Concurrency: f.concurrency, Requests: f.requests, Rounds: f.rounds,
		MaxTokens: f.maxTokens, Stream: f.stream, CaptureDir: f.captureDir, Tokenize: f.tokenize,
	})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(out, "capture overhead: in-process fake vLLM, %s store, concurrency %d, %d requests per round\n", res.Store, f.concurrency, f.requests)
	fmt.Fprintf(out, "%-6s %-7s %10s %10s %10s %10s\n", "round", "path", "req/s", "p50 ms", "p90 ms", "p99 ms")
	for i := range res.Direct {
		for _, r := range []bench.Result{res.Direct[i], res.Proxy[i]} {
			fmt.Fprintf(out, "%-6d %-7s %10.0f %10.3f %10.3f %10.3f\n", i+1, r.Name, r.RequestsPerS, r.Latency.P50, r.Latency.P90, r.Latency.P99)
		}
	}
	fmt.Fprintf(out, "median p50: direct %.3f ms, proxy %.3f ms, added %.3f ms; proxy/direct throughput %.2f; every proxied call captured: %v\n",
		res.DirectP50, res.ProxyP50, res.AddedP50, res.Throughput, res.CapturedAll)
	return nil
}
