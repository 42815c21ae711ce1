package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Phase tags a sample with the part of a stage it belongs to. Only
// PhaseMeasure samples enter the summaries.
type Phase string

// The phases.
const (
	PhaseWarmup   Phase = "warmup"
	PhaseMeasure  Phase = "measure"
	PhaseCooldown Phase = "cooldown"
)

// Path says how a request reached the model server.
type Path string

// The paths. An embedded run sends every request both ways (paired);
// a run against a URL uses PathTarget or PathProxy.
const (
	PathDirect Path = "direct"
	PathProxy  Path = "proxy"
	PathTarget Path = "target"
)

// ErrorKind classifies a failed request.
type ErrorKind string

// The error kinds.
const (
	ErrConnect  ErrorKind = "connect"   // dial or write failed before a reply
	ErrTimeout  ErrorKind = "timeout"   // the request deadline passed
	ErrHTTP4xx  ErrorKind = "http_4xx"  // the server refused the request
	ErrHTTP5xx  ErrorKind = "http_5xx"  // the server failed
	ErrStream   ErrorKind = "stream"    // an in-stream error event, or the stream ended early
	ErrDecode   ErrorKind = "decode"    // a reply that is not what the API sends
	ErrCanceled ErrorKind = "cancelled" // the run was interrupted mid-request
)

// Sample is one request as the load generator saw it. Times are
// nanoseconds since the run started (a monotonic clock).
type Sample struct {
	Seq   int   `json:"seq"`
	Stage int   `json:"stage"`
	Phase Phase `json:"phase"`
	Path  Path  `json:"path"`
	// Pair links the direct and proxied copies of one request (paired runs).
	Pair    int    `json:"pair,omitempty"`
	Session string `json:"session,omitempty"`
	Turn    int    `json:"turn,omitempty"`
	// ScheduledNS is when the schedule meant to send it (open loop); the
	// difference to StartNS is the generator's own schedule delay.
	ScheduledNS  int64 `json:"scheduled_ns"`
	StartNS      int64 `json:"start_ns"`
	FirstTokenNS int64 `json:"first_token_ns,omitempty"`
	EndNS        int64 `json:"end_ns"`
	// ChunkGapsUS are the gaps between successive output-bearing chunks after
	// the first, in microseconds (vLLM's ITL samples).
	ChunkGapsUS  []int64 `json:"chunk_gaps_us,omitempty"`
	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	// TokenSource is "usage" (the server's count) or "chunks" (one per chunk).
	TokenSource string    `json:"token_source,omitempty"`
	Status      int       `json:"status,omitempty"`
	ErrorKind   ErrorKind `json:"error_kind,omitempty"`
	Error       string    `json:"error,omitempty"`
	RolloutID   string    `json:"rollout_id,omitempty"`
}

// OK reports a request that completed without error.
func (s *Sample) OK() bool { return s.ErrorKind == "" }

// TTFTNS is the time to the first chunk, 0 when there was none.
func (s *Sample) TTFTNS() int64 {
	if s.FirstTokenNS == 0 {
		return 0
	}
	return s.FirstTokenNS - s.StartNS
}

// E2ELNS is the time from send to the end of the reply.
func (s *Sample) E2ELNS() int64 { return s.EndNS - s.StartNS }

// TPOTNS is vLLM's time per output token, (E2EL − TTFT) / (N − 1); ok is
// false when it is undefined (fewer than two tokens or no first chunk).
func (s *Sample) TPOTNS() (ns int64, ok bool) {
	if s.OutputTokens < 2 || s.FirstTokenNS == 0 {
		return 0, false
	}
	return (s.EndNS - s.FirstTokenNS) / int64(s.OutputTokens-1), true
}

// WriteSamples writes samples as JSON Lines, one sample per line.
func WriteSamples(w io.Writer, samples []Sample) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	for i := range samples {
		if err := enc.Encode(&samples[i]); err != nil {
			return fmt.Errorf("write sample %d: %w", i, err)
		}
	}
	return bw.Flush()
}

// ReadSamples reads a JSON Lines file written by WriteSamples.
func ReadSamples(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 256<<10))
	var out []Sample
	for line := 1; ; line++ {
		var s Sample
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("%s: sample %d: %w", path, line, err)
		}
		out = append(out, s)
	}
}
