package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/capbench/capbench/fakes/gpu"
)

// Plan is what `capbench plan` found, as plain data.
type Plan struct {
	Model    string
	GPU      string // label, e.g. "L40S (44.52 GiB)"
	Config   gpu.Config
	Forecast gpu.Forecast
	// Log, LogFile and Deltas are set with --vllm-log.
	Log     *gpu.LogFacts
	LogFile string
	Deltas  []gpu.LogDelta
}

// planJSON is the versioned JSON form of a plan.
type planJSON struct {
	SchemaVersion      int            `json:"schema_version"`
	Model              string         `json:"model"`
	GPU                string         `json:"gpu"`
	GPUMemoryBytes     int64          `json:"gpu_memory_bytes"`
	Starts             bool           `json:"starts"`
	Refusal            *refusalJSON   `json:"refusal,omitempty"`
	MaxModelLen        int            `json:"max_model_len,omitempty"`
	KVCacheTokens      int64          `json:"kv_cache_tokens,omitempty"`
	NumBlocks          int64          `json:"num_gpu_blocks,omitempty"`
	AvailableKVBytes   int64          `json:"available_kv_bytes,omitempty"`
	NonKVBytes         int64          `json:"non_kv_bytes,omitempty"`
	WeightBytes        int64          `json:"weight_bytes,omitempty"`
	MaxConcurrency     float64        `json:"max_concurrency,omitempty"`
	ConcurrencyLine    string         `json:"concurrency_line,omitempty"`
	RequestTokens      int            `json:"request_tokens"`
	FitsRequest        bool           `json:"fits_request"`
	ConcurrentRequests int            `json:"concurrent_requests"`
	LargestMaxModelLen int            `json:"largest_max_model_len"`
	Log                *gpu.LogFacts  `json:"vllm_log,omitempty"`
	Deltas             []gpu.LogDelta `json:"vllm_log_deltas,omitempty"`
}

type refusalJSON struct {
	Exception string `json:"exception"`
	Message   string `json:"message"`
}

// PlanJSON writes the plan as one JSON object.
func PlanJSON(w io.Writer, p Plan) error {
	f := p.Forecast
	out := planJSON{SchemaVersion: 1, Model: p.Model, GPU: p.GPU, GPUMemoryBytes: p.Config.GPUMemoryBytes,
		Starts: f.Starts, RequestTokens: f.RequestTokens, FitsRequest: f.FitsRequest,
		ConcurrentRequests: f.ConcurrentRequests, LargestMaxModelLen: f.LargestMaxModelLen, Log: p.Log, Deltas: p.Deltas}
	if f.Refusal != nil {
		out.Refusal = &refusalJSON{Exception: f.Refusal.Exception, Message: f.Refusal.Message}
	}
	if c := f.Capacity; c != nil {
		out.MaxModelLen, out.KVCacheTokens, out.NumBlocks = c.MaxModelLen, c.KVCacheTokens, c.NumBlocks
		out.AvailableKVBytes, out.NonKVBytes, out.WeightBytes = c.AvailableKVBytes, c.NonKVBytes, c.WeightBytes
		out.MaxConcurrency, out.ConcurrencyLine = c.MaxConcurrency, c.ConcurrencyLine()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/float64(gpu.GiB)) }

// PlanText writes the plan for a terminal.
func PlanText(w io.Writer, p Plan) error {
	f := p.Forecast
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("model", p.Model)
	row("gpu", p.GPU)
	if !f.Starts {
		row("vLLM starts", "no")
	} else {
		c := f.Capacity
		row("vLLM starts", "yes")
		row("max_model_len", fmt.Sprint(c.MaxModelLen))
		row("memory", fmt.Sprintf("requested %s = weights %s + activation %s + non-torch %s + CUDA graphs %s + KV cache %s",
			gib(c.RequestedBytes), gib(c.WeightBytes), gib(c.ActivationBytes), gib(c.NonTorchBytes), gib(c.CUDAGraphBytes), gib(c.AvailableKVBytes)))
		row("KV-cache blocks", fmt.Sprintf("%d of %d tokens", c.NumBlocks, c.BlockSize))
		row("vLLM logs", c.ConcurrencyLine())
		if f.FitsRequest {
			row(fmt.Sprintf("concurrent %d-token calls", f.RequestTokens), fmt.Sprintf("%d (floor(%d blocks / %d blocks per call), at most max_num_seqs %d)",
				f.ConcurrentRequests, c.NumBlocks, c.BlocksFor(f.RequestTokens), c.MaxNumSeqs))
		} else {
			row(fmt.Sprintf("concurrent %d-token calls", f.RequestTokens), fmt.Sprintf("none: a %d-token call exceeds max_model_len %d (vLLM answers 400)", f.RequestTokens, c.MaxModelLen))
		}
	}
	if f.LargestMaxModelLen > 0 {
		row("largest --max-model-len that starts", fmt.Sprint(f.LargestMaxModelLen))
	} else {
		row("largest --max-model-len that starts", "none (no memory left for the KV cache)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f.Refusal != nil {
		fmt.Fprintf(w, "\nvLLM would refuse to start:\n%s: %s\n", f.Refusal.Exception, f.Refusal.Message)
	}
	if p.Log != nil {
		fmt.Fprintf(w, "\nvLLM log %s (%s format, line %d) vs the profile:\n", p.LogFile, p.Log.Format, p.Log.Line)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "figure\tlog\tprofile\terror")
		for _, d := range p.Deltas {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%+.1f%%\n", d.Name, trimNum(d.Log), trimNum(d.Profile), d.ErrorPct)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func trimNum(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	return strings.TrimSuffix(s, ".00")
}
