package vllm

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/capbench/capbench/fakes/gpu"
)

// Options configures a fake server. Field names follow vLLM's flags.
type Options struct {
	// Model is the model argument of `vllm serve` (the /v1/models root).
	Model string
	// ServedModelNames are the names the API answers to; responses report the first.
	ServedModelNames []string
	// MaxModelLen is the context window; 0 means the profile's default.
	MaxModelLen          int
	EnableAutoToolChoice bool
	ToolCallParser       string
	ReasoningParser      string
	// GPUMemoryUtilization is the fraction of GPUMemory vLLM may use; 0 means 0.92.
	GPUMemoryUtilization float64
	// MaxNumSeqs caps concurrently running requests; 0 means vLLM's default
	// (256; with GPUMemory, the device's default: 1024 from 70 GiB).
	MaxNumSeqs int
	// MaxNumBatchedTokens is the per-step token budget; 0 means 2048 (with
	// GPUMemory: 8192 from 70 GiB, 16384 from 160 GiB).
	MaxNumBatchedTokens int
	// Host and Port to listen on; defaults 127.0.0.1 and 0 (ephemeral).
	Host    string
	Port    int
	APIKeys []string
	Seed    int64
	DType   string
	// KVCacheDType is auto, bfloat16, fp8, fp8_e4m3 or fp8_e5m2.
	KVCacheDType           string
	ReturnTokensAsTokenIDs bool
	// GPUMemory is the device memory in bytes; 0 disables the memory model
	// (no startup check, unlimited KV capacity).
	GPUMemory int64
	// Profile names the model geometry used by the memory model; empty means
	// it is derived from Model (Qwen3-4B-Thinking-2507 by default).
	Profile string
	// ChatTemplateVariant is "plain" (Qwen3, the default) or "thinking"
	// (Qwen3-Thinking-2507).
	ChatTemplateVariant string
	Timing              Timing
	Faults              Faults
	// Lengths is the distribution of unscripted output lengths.
	Lengths Lengths
	// MaxBodyBytes limits request bodies; 0 means 64 MiB.
	MaxBodyBytes int64
	// LedgerLimit keeps only the newest N ledger entries; 0 keeps all.
	LedgerLimit int
	// LedgerMaxBytes bounds the ledger's memory: the oldest entries are
	// dropped once the entries' prompts, generations, log-probs and text
	// take more (the newest entry is always kept). 0 means
	// DefaultLedgerMaxBytes; negative means no byte bound.
	LedgerMaxBytes int64
	Logger         *slog.Logger
}

// Timing is the latency model. The zero value means no latency at all.
type Timing struct {
	// TTFT is a fixed delay before the first token (queueing excluded).
	TTFT time.Duration
	// InterTokenLatency is the delay between tokens at batch size 1.
	InterTokenLatency time.Duration
	// PrefillTokensPerSecond adds prompt_tokens/rate to the TTFT; 0 = free prefill.
	PrefillTokensPerSecond float64
	// DecodeTokensPerSecond, when set, replaces InterTokenLatency by 1/rate.
	DecodeTokensPerSecond float64
	// BatchSlowdown makes rates fall with the number of running requests:
	// every delay is multiplied by 1 + BatchSlowdown*(running-1).
	BatchSlowdown float64
	// TimeScale multiplies every simulated delay (0.001 runs an hour in 3.6 s);
	// 0 means 1.
	TimeScale float64
}

// Faults injects failures at a rate. A request header X-Fake-Fault or a
// script turn's Fault forces one fault per request.
type Faults struct {
	// Rate is the probability (0..1) that a request gets one of Kinds.
	Rate float64
	// Kinds are the faults drawn by Rate: 500, 503, drop-mid-stream, stall,
	// no-logprobs, truncated-json, stream-error. Empty means 500 and 503.
	Kinds []string
	// Stall is how long a stalled request hangs before the server gives up
	// on it; 0 means until the client disconnects or the server closes.
	Stall time.Duration
}

// Lengths is the distribution of unscripted output lengths in tokens
// (including the final EOS). A draw above max_tokens finishes with "length".
type Lengths struct {
	// Mean and StdDev of a normal distribution; Mean 0 means 48, StdDev 0 means Mean/2.
	Mean, StdDev float64
	// Min clamps draws from below; 0 means 1.
	Min int
}

// Fault names accepted by X-Fake-Fault, Faults.Kinds and Turn.Fault.
const (
	Fault500           = "500"
	Fault503           = "503"
	FaultDropMidStream = "drop-mid-stream"
	FaultStall         = "stall"
	FaultNoLogprobs    = "no-logprobs"
	FaultTruncatedJSON = "truncated-json"
	// FaultStreamError sends vLLM's in-stream error event halfway through a
	// stream (a 500 for non-streaming requests).
	FaultStreamError = "stream-error"
)

var knownFaults = map[string]bool{
	Fault500: true, Fault503: true, FaultDropMidStream: true, FaultStall: true,
	FaultNoLogprobs: true, FaultTruncatedJSON: true, FaultStreamError: true,
}

// Default values copied from vLLM's API server on a <70 GiB device.
const (
	DefaultModel                = "Qwen/Qwen3-4B-Thinking-2507"
	DefaultGPUMemoryUtilization = 0.92
	DefaultMaxNumSeqs           = 256
	DefaultMaxNumBatchedTokens  = 2048
	defaultMaxBodyBytes         = 64 << 20
	// DefaultLedgerMaxBytes holds about 4,000 generations of a 32k-token
	// prompt (the packed ring takes about 2 bytes a token), or hundreds of
	// thousands of short ones.
	DefaultLedgerMaxBytes = 256 << 20
	maxLogprobs           = 20
	vllmVersion           = "0.29.0"
)

var knownToolParsers = []string{"deepseek_v3", "granite", "hermes", "internlm", "jamba", "llama3_json", "mistral", "pythonic", "qwen3_coder", "qwen3_xml"}

var knownReasoningParsers = []string{"deepseek_r1", "deepseek_v3", "glm45", "granite", "hunyuan_a13b", "mistral", "qwen3", "step3"}

// withDefaults returns a copy of o with defaults filled in, or vLLM's startup
// error for inconsistent flags.
func (o Options) withDefaults() (Options, error) {
	if o.Model == "" {
		o.Model = DefaultModel
	}
	if len(o.ServedModelNames) == 0 {
		o.ServedModelNames = []string{o.Model}
	}
	if o.EnableAutoToolChoice && o.ToolCallParser == "" {
		return o, errors.New("Error: --enable-auto-tool-choice requires --tool-call-parser")
	}
	if o.ToolCallParser != "" && !slices.Contains(knownToolParsers, o.ToolCallParser) {
		return o, fmt.Errorf("invalid tool call parser: %s (chose from { %s })", o.ToolCallParser, strings.Join(knownToolParsers, ","))
	}
	if o.ToolCallParser != "" && o.ToolCallParser != "hermes" {
		return o, fmt.Errorf("tool call parser %q: the fake implements only hermes", o.ToolCallParser)
	}
	if o.ReasoningParser != "" && !slices.Contains(knownReasoningParsers, o.ReasoningParser) {
		return o, fmt.Errorf("invalid reasoning parser: %s (chose from { %s })", o.ReasoningParser, strings.Join(knownReasoningParsers, ","))
	}
	if o.GPUMemoryUtilization == 0 {
		o.GPUMemoryUtilization = DefaultGPUMemoryUtilization
	}
	if o.GPUMemoryUtilization < 0 || o.GPUMemoryUtilization > 1 {
		return o, fmt.Errorf("gpu_memory_utilization must be in (0, 1], got %v", o.GPUMemoryUtilization)
	}
	seqs, batched := DefaultMaxNumSeqs, DefaultMaxNumBatchedTokens
	if o.GPUMemory > 0 {
		// vLLM's defaults grow with the device, as the planner's do.
		seqs, batched = gpu.DefaultSchedulerLimits(o.GPUMemory)
	}
	if o.MaxNumSeqs == 0 {
		o.MaxNumSeqs = seqs
	}
	if o.MaxNumBatchedTokens == 0 {
		o.MaxNumBatchedTokens = max(batched, o.MaxNumSeqs)
	}
	if o.MaxNumSeqs < 0 || o.MaxNumBatchedTokens < 0 {
		return o, fmt.Errorf("max_num_seqs and max_num_batched_tokens must be positive")
	}
	if o.MaxNumBatchedTokens < o.MaxNumSeqs {
		//lint:ignore ST1005 vLLM's exact startup text
		return o, fmt.Errorf("max_num_batched_tokens (%d) must be greater than or equal to max_num_seqs (%d).", o.MaxNumBatchedTokens, o.MaxNumSeqs)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port < 0 || o.Port > 65535 {
		return o, fmt.Errorf("port %d out of range", o.Port)
	}
	switch o.ChatTemplateVariant {
	case "":
		o.ChatTemplateVariant = "plain"
	case "plain", "thinking":
	default:
		return o, fmt.Errorf("chat template variant %q: want plain or thinking", o.ChatTemplateVariant)
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = defaultMaxBodyBytes
	}
	if o.Timing.TimeScale == 0 {
		o.Timing.TimeScale = 1
	}
	// A negative value here would not fail loudly later: it would silently
	// mean "no delay", "no body accepted" or "every output one token long".
	for _, f := range []struct {
		name string
		bad  bool
		got  any
	}{
		{"max body bytes", o.MaxBodyBytes < 0, o.MaxBodyBytes},
		{"TTFT", o.Timing.TTFT < 0, o.Timing.TTFT},
		{"inter-token latency", o.Timing.InterTokenLatency < 0, o.Timing.InterTokenLatency},
		{"prefill tokens per second", !(o.Timing.PrefillTokensPerSecond >= 0), o.Timing.PrefillTokensPerSecond},
		{"decode tokens per second", !(o.Timing.DecodeTokensPerSecond >= 0), o.Timing.DecodeTokensPerSecond},
		{"batch slowdown", !(o.Timing.BatchSlowdown >= 0), o.Timing.BatchSlowdown},
		{"time scale", !(o.Timing.TimeScale >= 0), o.Timing.TimeScale},
		{"stall", o.Faults.Stall < 0, o.Faults.Stall},
		{"output length mean", !(o.Lengths.Mean >= 0), o.Lengths.Mean},
		{"output length stddev", !(o.Lengths.StdDev >= 0), o.Lengths.StdDev},
	} {
		if f.bad {
			return o, fmt.Errorf("%s must not be negative, got %v", f.name, f.got)
		}
	}
	if !(o.Faults.Rate >= 0 && o.Faults.Rate <= 1) {
		return o, fmt.Errorf("fault rate must be in [0, 1], got %v", o.Faults.Rate)
	}
	if len(o.Faults.Kinds) == 0 {
		o.Faults.Kinds = []string{Fault500, Fault503}
	}
	for _, k := range o.Faults.Kinds {
		if !knownFaults[k] {
			return o, fmt.Errorf("unknown fault kind %q", k)
		}
	}
	if o.Lengths.Mean == 0 {
		o.Lengths.Mean = 48
	}
	if o.Lengths.StdDev == 0 {
		o.Lengths.StdDev = o.Lengths.Mean / 2
	}
	if o.Lengths.Min <= 0 {
		o.Lengths.Min = 1
	}
	if o.LedgerMaxBytes == 0 {
		o.LedgerMaxBytes = DefaultLedgerMaxBytes
	}
	if o.LedgerLimit < 0 {
		return o, fmt.Errorf("ledger limit must not be negative, got %d", o.LedgerLimit)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}
