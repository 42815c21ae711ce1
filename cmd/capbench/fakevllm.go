package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/fakes/vllm"
)

// newFakeVLLMCmd is `capbench fake-vllm MODEL [flags]`: vLLM's serve flags
// plus fake-only flags for the memory model, timing and faults.
func newFakeVLLMCmd() *cobra.Command {
	var (
		o                         vllm.Options
		model, maxModelLen, gpuMB string
		ledgerMaxBytes            string
		apiKeys                   []string
		ignoredStr                string
		ignoredBool               bool
		ignoredInt                int
	)
	cmd := &cobra.Command{
		Use:   "fake-vllm [MODEL]",
		Short: "Run a fake vLLM OpenAI-compatible server (vLLM 0.29 wire format)",
		Long: `Run a fake vLLM server. Flags with vLLM's names keep vLLM's meaning.
Fake-only flags: --gpu-memory and --profile (KV-cache memory model),
--chat-template-variant plain|thinking (default plain: the chain-clean Qwen3
template; thinking: Qwen3-Thinking-2507, which drops earlier turns' reasoning),
--ttft, --inter-token-latency, --prefill-tokens-per-second,
--decode-tokens-per-second, --batch-slowdown, --time-scale (timing model),
--fault-rate, --fault-kinds, --stall (fault injection; a request may also send
X-Fake-Fault), --output-len-mean/--output-len-stddev (unscripted lengths).
Fake-only endpoints live under /fake/ (GET /fake/ledger[?after=SEQ], PUT
/fake/scripts/NAME) and need --api-key when one is set; --ledger-limit and
--ledger-max-bytes bound the ledger.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				model = args[0] // the positional wins, as in vLLM
			}
			o.Model = model
			if err := checkFakeFlags(cmd.Flags(), o, gpuMB); err != nil {
				return err
			}
			if maxModelLen != "" {
				n, err := gpu.ParseMaxModelLen(maxModelLen)
				if err != nil {
					return err // already "argument --max-model-len: ...", as vLLM says it
				}
				o.MaxModelLen = n
			}
			if gpuMB != "" {
				n, err := gpu.ParseBytes(gpuMB)
				if err != nil {
					return fmt.Errorf("--gpu-memory: %w", err)
				}
				o.GPUMemory = n
			}
			n, err := gpu.ParseBytes(ledgerMaxBytes)
			if err != nil {
				return fmt.Errorf("--ledger-max-bytes: %w (or 0 for no byte bound)", err)
			}
			o.LedgerMaxBytes = n
			if n == 0 {
				o.LedgerMaxBytes = -1 // the library's 0 means its default
			}
			if len(apiKeys) == 0 {
				if k := os.Getenv("VLLM_API_KEY"); k != "" {
					apiKeys = []string{k}
				}
			}
			o.APIKeys = apiKeys
			o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			warnProfile(cmd.ErrOrStderr(), o)
			srv, err := vllm.New(o)
			if err != nil {
				return fmt.Errorf("engine startup failed: %w", err)
			}
			if err := srv.Start(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fake vLLM %s serving %s at %s (max_model_len %d)\n", "0.29.0", o.Model, srv.URL(), srv.MaxModelLen())
			<-cmd.Context().Done()
			if err := srv.Close(); err != nil && !errors.Is(err, cmd.Context().Err()) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-")) // vLLM accepts snake_case too
	})
	f.StringVar(&model, "model", vllm.DefaultModel, "model name or path (the positional MODEL wins)")
	f.StringSliceVar(&o.ServedModelNames, "served-model-name", nil, "names the API answers to; responses report the first")
	f.StringVar(&maxModelLen, "max-model-len", "", "context window (accepts 1k, 1K, 25.6k, -1/auto)")
	f.BoolVar(&o.EnableAutoToolChoice, "enable-auto-tool-choice", false, "enable model-driven tool calling")
	f.StringVar(&o.ToolCallParser, "tool-call-parser", "", "tool-call parser (hermes)")
	f.StringVar(&o.ReasoningParser, "reasoning-parser", "", "reasoning parser (qwen3, deepseek_r1)")
	f.Float64Var(&o.GPUMemoryUtilization, "gpu-memory-utilization", vllm.DefaultGPUMemoryUtilization, "fraction of GPU memory vLLM may use")
	f.IntVar(&o.MaxNumSeqs, "max-num-seqs", 0, "max concurrently running requests (default 256)")
	f.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "token budget per engine step (default 2048)")
	f.StringVar(&o.Host, "host", "127.0.0.1", "bind address")
	f.IntVar(&o.Port, "port", 8000, "bind port")
	f.StringSliceVar(&apiKeys, "api-key", nil, "accepted bearer tokens (env VLLM_API_KEY)")
	f.Int64Var(&o.Seed, "seed", 0, "global seed")
	f.StringVar(&o.DType, "dtype", "auto", "model dtype (auto, half, float16, bfloat16, float, float32)")
	f.StringVar(&o.KVCacheDType, "kv-cache-dtype", "auto", "KV-cache dtype (auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2)")
	f.BoolVar(&o.ReturnTokensAsTokenIDs, "return-tokens-as-token-ids", false, `logprob tokens become "token_id:<id>"`)

	f.StringVar(&gpuMB, "gpu-memory", "", "fake: device memory, e.g. 48GiB (enables the KV-cache memory model)")
	f.StringVar(&o.Profile, "profile", "", "fake: model profile for the memory model (default from MODEL)")
	f.StringVar(&o.ChatTemplateVariant, "chat-template-variant", "plain", "fake: chat template, plain (Qwen3) or thinking (Qwen3-Thinking-2507)")
	f.DurationVar(&o.Timing.TTFT, "ttft", 0, "fake: fixed time to first token")
	f.DurationVar(&o.Timing.InterTokenLatency, "inter-token-latency", 0, "fake: delay between tokens at batch size 1")
	f.Float64Var(&o.Timing.PrefillTokensPerSecond, "prefill-tokens-per-second", 0, "fake: prefill rate (adds to TTFT)")
	f.Float64Var(&o.Timing.DecodeTokensPerSecond, "decode-tokens-per-second", 0, "fake: decode rate per request (replaces --inter-token-latency)")
	f.Float64Var(&o.Timing.BatchSlowdown, "batch-slowdown", 0, "fake: delays grow by this factor per extra running request")
	f.Float64Var(&o.Timing.TimeScale, "time-scale", 1, "fake: multiply every simulated delay (0.001 = 1000x faster)")
	f.Float64Var(&o.Faults.Rate, "fault-rate", 0, "fake: probability (0..1) that a request fails")
	f.StringSliceVar(&o.Faults.Kinds, "fault-kinds", nil, "fake: faults drawn by --fault-rate: 500,503,drop-mid-stream,stall,no-logprobs,truncated-json,stream-error")
	f.DurationVar(&o.Faults.Stall, "stall", 0, "fake: how long a stalled request hangs (0 = until the client leaves)")
	f.Float64Var(&o.Lengths.Mean, "output-len-mean", 0, "fake: mean unscripted output length in tokens (default 48)")
	f.Float64Var(&o.Lengths.StdDev, "output-len-stddev", 0, "fake: standard deviation of unscripted output lengths")
	f.Int64Var(&o.MaxBodyBytes, "max-body-bytes", 0, "fake: request body limit (default 64 MiB)")
	f.IntVar(&o.LedgerLimit, "ledger-limit", 100000, "fake: keep only the newest N ledger entries (0 = all)")
	f.StringVar(&ledgerMaxBytes, "ledger-max-bytes", "256MiB", "fake: drop the oldest ledger entries once they hold more than this (0 = no byte bound)")

	// Accepted and ignored, so real vLLM command lines work unchanged.
	for _, name := range []string{"chat-template", "default-chat-template-kwargs", "generation-config", "override-generation-config", "fingerprint-mode", "config", "trust-remote-code-revision"} {
		f.StringVar(&ignoredStr, name, "", "ignored (vLLM compatibility)")
		_ = f.MarkHidden(name)
	}
	for _, name := range []string{"enable-prefix-caching", "enforce-eager", "trust-remote-code", "enable-log-requests", "disable-log-stats", "enable-request-id-headers", "enable-force-include-usage", "exclude-tools-when-tool-choice-none", "enable-prompt-tokens-details", "disable-log-requests"} {
		f.BoolVar(&ignoredBool, name, false, "ignored (vLLM compatibility)")
		_ = f.MarkHidden(name)
	}
	for _, name := range []string{"tensor-parallel-size", "max-logprobs", "pipeline-parallel-size", "data-parallel-size"} {
		f.IntVar(&ignoredInt, name, 0, "ignored (vLLM compatibility)")
		_ = f.MarkHidden(name)
	}
	return cmd
}
