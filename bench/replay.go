package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"time"

	"github.com/capbench/capbench/capture/store"
)

// TraceCall is one recorded model call to replay.
type TraceCall struct {
	RolloutID string        `json:"rollout_id"`
	Offset    time.Duration `json:"offset_ns"`
	Prompt    []int         `json:"-"`
	MaxTokens int           `json:"max_tokens"`
	Model     string        `json:"model"`
}

// ReplaySpec describes a replay of a capture directory.
type ReplaySpec struct {
	// Dir is the capture directory read (never written).
	Dir string `json:"dir"`
	// Speed divides every recorded offset (2 = twice as fast).
	Speed float64 `json:"speed"`
	Calls int     `json:"calls"`
	// Extra body fields (ignore_eos makes the server generate the recorded
	// length).
	Extra map[string]any `json:"extra_body,omitempty"`
	Model string         `json:"model,omitempty"`
}

// LoadTrace reads every captured call of a capture directory in the
// order it was recorded, with its offset from the first call.
func LoadTrace(ctx context.Context, dir string) ([]TraceCall, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--replay %s: not a capture directory (%v)", dir, err)
	}
	fs, err := store.NewFileStore(dir)
	if err != nil {
		return nil, fmt.Errorf("--replay %s: %w", dir, err)
	}
	defer fs.Close()
	ids, err := fs.Rollouts(ctx)
	if err != nil {
		return nil, fmt.Errorf("--replay %s: %w", dir, err)
	}
	var calls []TraceCall
	var at []float64
	for _, id := range ids {
		entries, err := fs.ReadEntries(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("--replay %s: rollout %s: %w", dir, id, err)
		}
		for _, e := range entries {
			if e.PromptIsDelta || len(e.PromptTokenIDs) == 0 {
				continue // a delta record's prompt is not the whole prompt
			}
			calls = append(calls, TraceCall{RolloutID: id, Prompt: e.PromptTokenIDs, MaxTokens: max(len(e.GenerationTokenIDs), 1), Model: e.Model})
			at = append(at, e.CreatedAt)
		}
	}
	if len(calls) == 0 {
		return nil, fmt.Errorf("--replay %s: no captured calls with full prompts", dir)
	}
	idx := make([]int, len(calls))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return at[idx[a]] < at[idx[b]] })
	out := make([]TraceCall, len(calls))
	for i, j := range idx {
		out[i] = calls[j]
		out[i].Offset = time.Duration((at[j] - at[idx[0]]) * float64(time.Second))
	}
	return out, nil
}

// ReplayBodies encodes one /v1/completions body per call: the recorded
// prompt token ids (or, when texts is given, the prompt text; a capture
// proxy takes only text prompts) and the recorded generation length as
// max_tokens.
func ReplayBodies(calls []TraceCall, spec ReplaySpec, stream bool, texts []string) ([][]byte, error) {
	out := make([][]byte, len(calls))
	for i, c := range calls {
		body := map[string]any{}
		for k, v := range spec.Extra {
			body[k] = v
		}
		model := c.Model
		if spec.Model != "" {
			model = spec.Model
		}
		body["model"], body["prompt"], body["max_tokens"], body["stream"] = model, c.Prompt, c.MaxTokens, stream
		if texts != nil {
			body["prompt"] = texts[i]
		}
		if stream {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode replay body %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}

// TraceOffsets are the send times of a replay at speed.
func TraceOffsets(calls []TraceCall, speed float64) ([]time.Duration, error) {
	if !(speed > 0) {
		return nil, errors.New("--replay-speed must be positive")
	}
	out := make([]time.Duration, len(calls))
	for i, c := range calls {
		out[i] = time.Duration(float64(c.Offset) / speed)
	}
	return out, nil
}

// Detokenize turns every call's prompt ids into text with the model
// server's /detokenize (vLLM's route), so the ids re-tokenize the same.
func Detokenize(ctx context.Context, client *http.Client, server string, calls []TraceCall) ([]string, error) {
	out := make([]string, len(calls))
	for i, c := range calls {
		body, _ := json.Marshal(map[string]any{"model": c.Model, "tokens": c.Prompt})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, NormalizeBase(server)+"/detokenize", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("detokenize call %d: %w", i, err)
		}
		var got struct {
			Prompt *string `json:"prompt"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		closeBody(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || got.Prompt == nil {
			return nil, fmt.Errorf("detokenize call %d: %s answered %d without a prompt (%v)", i, server, resp.StatusCode, err)
		}
		out[i] = *got.Prompt
	}
	return out, nil
}
