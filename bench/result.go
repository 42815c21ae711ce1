package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ResultSchema is the version of the bench result format
// (docs/bench-results.md, docs/schema/bench-result.schema.json).
const ResultSchema = "capbench.bench/v1"

// SamplesFileName is the per-request samples file next to a result.
const SamplesFileName = "samples.jsonl"

// Target kinds.
const (
	TargetEmbedded = "embedded" // fake vLLM + capture proxy in-process, paired
	TargetURL      = "url"      // a running model server (vLLM, a fake)
	TargetProxy    = "proxy"    // a running capture proxy with its capture dir
)

// Workload kinds.
const (
	WorkloadChat     = "chat"
	WorkloadSessions = "sessions"
	WorkloadReplay   = "replay"
)

// GPUSpec is the embedded fake's memory and timing model.
type GPUSpec struct {
	MemoryBytes int64  `json:"memory_bytes"`
	Profile     string `json:"profile"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
	// Timing of the fake (seconds per token etc. at TimeScale).
	TTFT          time.Duration `json:"ttft_ns"`
	ITL           time.Duration `json:"itl_ns"`
	PrefillTokS   float64       `json:"prefill_tokens_per_s,omitempty"`
	BatchSlowdown float64       `json:"batch_slowdown,omitempty"`
	TimeScale     float64       `json:"time_scale,omitempty"`
	OutputMean    float64       `json:"output_mean_tokens,omitempty"`
	// Planned capacity (fakes/gpu): KV blocks and the concurrency of
	// max-length requests vLLM would log.
	KVBlocks       int64   `json:"kv_blocks,omitempty"`
	BlockSize      int     `json:"block_size,omitempty"`
	MaxConcurrency float64 `json:"max_concurrency,omitempty"`
}

// SessionSpec is the agent-shaped workload.
type SessionSpec struct {
	Sessions     int           `json:"sessions"`
	Concurrency  int           `json:"concurrency"`
	Turns        int           `json:"turns"`
	ToolTokens   int           `json:"tool_result_tokens"`
	MaxTokens    int           `json:"max_tokens"`
	ThinkTime    time.Duration `json:"think_time_ns"`
	SubAgentTurn int           `json:"subagent_turn,omitempty"`
}

// Config is everything that decides what a run measured. compare refuses
// two results whose Configs differ (Comparable).
type Config struct {
	Target   string       `json:"target"`
	Workload string       `json:"workload"`
	Chat     *ChatSpec    `json:"chat,omitempty"`
	Sessions *SessionSpec `json:"sessions,omitempty"`
	Replay   *ReplaySpec  `json:"replay,omitempty"`
	// Paths limits an embedded run to some paths (empty: direct and proxy,
	// paired).
	Paths []Path `json:"paths,omitempty"`
	// BufferedStreams runs the embedded proxy with NeMo Gym's buffered
	// streams instead of streaming pass-through.
	BufferedStreams bool     `json:"buffered_streams,omitempty"`
	Stages          []Shape  `json:"stages"`
	Requests        int      `json:"requests,omitempty"`
	Duration        float64  `json:"duration_s,omitempty"`
	Windows         Windows  `json:"windows"`
	Rounds          int      `json:"rounds,omitempty"`
	SLO             SLO      `json:"slo"`
	Seed            uint64   `json:"seed"`
	GPU             *GPUSpec `json:"gpu,omitempty"`
	// Where the load went (not part of comparability).
	URL        string `json:"url,omitempty"`
	ProxyURL   string `json:"proxy_url,omitempty"`
	CaptureDir string `json:"capture_dir,omitempty"`
}

// Comparable reports why two configurations measure different things ("" =
// comparable). URLs and directories may differ.
func (c Config) Comparable(o Config) string {
	strip := func(c Config) ([]byte, error) {
		c.URL, c.ProxyURL, c.CaptureDir = "", "", ""
		return json.Marshal(c)
	}
	a, errA := strip(c)
	b, errB := strip(o)
	if errA != nil || errB != nil {
		return "cannot encode the configurations"
	}
	if string(a) != string(b) {
		return fmt.Sprintf("configurations differ:\n  base %s\n  new  %s", a, b)
	}
	return ""
}

// Capture is what the capture path did during the run.
type Capture struct {
	Store          string  `json:"store"`
	Rollouts       int     `json:"rollouts"`
	ProxiedOK      int     `json:"proxied_ok"`
	CapturedAll    bool    `json:"captured_all"`
	Records        int     `json:"records"`
	Bytes          int64   `json:"bytes"`
	RecordsPerS    float64 `json:"records_per_s"`
	BytesPerS      float64 `json:"bytes_per_s"`
	FidelityCalls  int     `json:"fidelity_calls"`
	FidelityExact  int     `json:"fidelity_exact"`
	FidelityMethod string  `json:"fidelity_method"` // "ledger" or "structural"
	// PutLatency is the in-process proxy's store Put (append, fsync,
	// state) per captured call; absent for an external proxy.
	PutLatency *Stats `json:"put_latency,omitempty"`
	PutErrors  int    `json:"put_errors,omitempty"`
	// Problems lists the first few fidelity mismatches.
	Problems []string `json:"problems,omitempty"`
}

// CaptureSyncs is what the capture proxy's file store spent making calls
// durable during the load: its sync counters, read from the proxy's
// /metrics before and after (docs/store.md#group-commit). BusyShare near 1
// says the disk's sync rate, not the CPU, bounded the captured calls a
// second.
type CaptureSyncs struct {
	Appends         uint64  `json:"appends"`
	FileSystemSyncs uint64  `json:"file_system_syncs"`
	FileSyncs       uint64  `json:"file_syncs"`
	AppendsPerSync  float64 `json:"appends_per_sync"`
	BusyS           float64 `json:"busy_s"`
	WindowS         float64 `json:"window_s"`
	BusyShare       float64 `json:"busy_share"`
}

// SessionOutcome is one agent session, consumed at its end.
type SessionOutcome struct {
	RolloutID       string  `json:"rollout_id"`
	Calls           int     `json:"calls"`
	MaxPromptTokens int     `json:"max_prompt_tokens"`
	Masked          bool    `json:"masked"`
	MaskReason      string  `json:"mask_reason,omitempty"`
	FidelityExact   int     `json:"fidelity_exact"`
	FidelityCalls   int     `json:"fidelity_calls"`
	Error           string  `json:"error,omitempty"`
	DurationS       float64 `json:"duration_s"`
}

// Sessions summarises the agent-shaped workload.
type Sessions struct {
	Count       int              `json:"count"`
	Masked      int              `json:"masked"`
	MaskReasons map[string]int   `json:"mask_reasons,omitempty"`
	Outcomes    []SessionOutcome `json:"outcomes"`
}

// Result is one bench run. Samples live in SamplesFile (JSON Lines) next to
// the result; every summary here is computed from them.
type Result struct {
	Schema      string        `json:"schema"`
	StartedAt   time.Time     `json:"started_at"`
	Interrupted bool          `json:"interrupted"`
	Config      Config        `json:"config"`
	Stages      []StageInfo   `json:"stages"`
	Summaries   []Summary     `json:"summaries"`
	Overhead    []Overhead    `json:"overhead,omitempty"`
	Knee        *Knee         `json:"knee,omitempty"`
	Server      *ServerSeries `json:"server,omitempty"`
	Capture     *Capture      `json:"capture,omitempty"`
	// CaptureSyncs is set when the capture proxy exports its store's syncs.
	CaptureSyncs *CaptureSyncs `json:"capture_syncs,omitempty"`
	Sessions     *Sessions     `json:"sessions,omitempty"`
	SamplesFile  string        `json:"samples_file"`
	SampleCount  int           `json:"sample_count"`
	// Shard is set on the result of one shard of a sharded run (bench
	// --shard); Merge on the result capbench merge made from all of them.
	Shard *ShardInfo `json:"shard,omitempty"`
	Merge *MergeInfo `json:"merge,omitempty"`
	// Samples are loaded from SamplesFile by ReadResult (not in the JSON).
	Samples []Sample `json:"-"`
}

// Finish computes every summary from r.Samples.
func (r *Result) Finish() {
	r.Schema = ResultSchema
	r.SampleCount = len(r.Samples)
	r.Summaries = Summarize(r.Samples, r.Stages, r.Config.SLO)
	r.Overhead = PairedOverhead(r.Samples)
	r.Knee = nil
	if len(r.Stages) > 1 {
		p := PathTarget
		for _, s := range r.Summaries {
			if s.Path == PathProxy || s.Path == PathDirect {
				p = PathDirect
			}
		}
		if r.Config.Target == TargetProxy {
			p = PathProxy
		}
		r.Knee = FindKnee(r.Summaries, r.Stages, p)
	}
}

// WriteResult writes dir/result.json and dir/samples.jsonl (the samples
// first, so a result never names a missing file).
func WriteResult(dir string, r *Result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("--out %s: %w", dir, err)
	}
	sf, err := os.Create(filepath.Join(dir, SamplesFileName))
	if err != nil {
		return "", err
	}
	if err := WriteSamples(sf, r.Samples); err != nil {
		sf.Close()
		return "", err
	}
	if err := sf.Close(); err != nil {
		return "", err
	}
	r.SamplesFile = SamplesFileName
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode result: %w", err)
	}
	path := filepath.Join(dir, "result.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// ErrNotBenchResult means a file is not a bench result of a known version.
var ErrNotBenchResult = errors.New("not a capbench bench result")

// ReadResult reads a result and its samples.
func ReadResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrNotBenchResult, err)
	}
	if r.Schema != ResultSchema {
		return nil, fmt.Errorf("%s: %w (schema %q, want %q)", path, ErrNotBenchResult, r.Schema, ResultSchema)
	}
	if r.SamplesFile != "" {
		sp := r.SamplesFile
		if !filepath.IsAbs(sp) {
			sp = filepath.Join(filepath.Dir(path), sp)
		}
		if r.Samples, err = ReadSamples(sp); err != nil {
			return nil, fmt.Errorf("samples of %s: %w", path, err)
		}
	}
	return &r, nil
}
