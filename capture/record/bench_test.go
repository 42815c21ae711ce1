package record_test

import (
	"encoding/json"
	"math/rand"
	"testing"

	"github.com/capbench/capbench/capture/record"
)

// entry32k builds a record of the size the perf notes talk about: a
// 32k-token prompt, 512 generated tokens with float32-style log-probs, and a
// chat output item with a tool call.
func entry32k() *record.Entry {
	r := rand.New(rand.NewSource(32768))
	prompt := make([]int, 32768)
	for i := range prompt {
		prompt[i] = r.Intn(151643)
	}
	gen := make([]int, 512)
	lps := make([]float64, len(gen))
	for i := range gen {
		gen[i] = r.Intn(151643)
		lps[i] = float64(float32(-r.ExpFloat64()))
	}
	idx, rid, parent, digest, cum, fv := 0, "resp_0123456789abcdef0123456789abcdef", "parent-call", "", len(prompt)+len(gen), 3
	res := record.ResolutionResolved
	d, _ := record.TokenDigest(append(append([]int{}, prompt...), gen...))
	digest = d
	return &record.Entry{
		SchemaVersion: record.SchemaVersion, RolloutID: "bench-0", ModelCallID: "0123456789abcdef0123456789abcdef",
		Model: "Qwen/Qwen3-8B", PromptTokenIDs: prompt, GenerationTokenIDs: gen, GenerationLogProbs: lps,
		OutputItems: []record.Item{{"type": "message", "role": "assistant", "content": "Running the tests now.",
			"tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "bash", "arguments": `{"cmd": "pytest -q"}`}}}}},
		TokenItemIndex: &idx, ResponseID: &rid, CreatedAt: 1795943061.8463006,
		ParentCallID: &parent, CumLen: &cum, Digest: &digest, ParentResolution: &res,
		ContinuationFingerprint: "ad585ce07f4ce440e5a34cc138729f9c60304770b794d20f53c8c36710d2a4d6", ContinuationContextLen: 7,
		ContinuationContextDigest: "5b80373c92adfb831257049f29374005eeb2ebcb22c77f3ee540b09627aa6ba6", FingerprintVersion: &fv,
	}
}

func line32k(b *testing.B) []byte {
	b.Helper()
	line, err := entry32k().MarshalCanonical()
	if err != nil {
		b.Fatal(err)
	}
	return line
}

func BenchmarkParseLine32k(b *testing.B) {
	line := line32k(b)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := record.ParseLine(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseLine32kEncodingJSON is the reflection-based baseline the
// dedicated scanner replaces (same line, plain struct, no validation).
func BenchmarkParseLine32kEncodingJSON(b *testing.B) {
	type plain struct {
		PromptTokenIDs     []int            `json:"prompt_token_ids"`
		GenerationTokenIDs []int            `json:"generation_token_ids"`
		GenerationLogProbs []float64        `json:"generation_log_probs"`
		OutputItems        []map[string]any `json:"output_items"`
		RolloutID          string           `json:"rollout_id"`
		ModelCallID        string           `json:"model_call_id"`
	}
	line := line32k(b)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		var p plain
		if err := json.Unmarshal(line, &p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshalCanonical32k encodes the 32k-token record with its
// prompt ids formatted, and with the canonical text they were read from
// (record.TokenText, as the capture proxy hands over the engine's reply),
// side by side.
func BenchmarkMarshalCanonical32k(b *testing.B) {
	line := line32k(b)
	for _, withText := range []bool{false, true} {
		name := "format"
		e := entry32k()
		if withText {
			name = "prompt-text"
			text, err := record.Canonical(e.PromptTokenIDs)
			if err != nil {
				b.Fatal(err)
			}
			_, tt, ok := record.ParseTokenIDs(text)
			if !ok {
				b.Fatal("the prompt ids do not parse")
			}
			e.UsePromptText(tt)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.MarshalCanonical(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkTokenDigest32k(b *testing.B) {
	e := entry32k()
	cum := e.Cumulative()
	b.SetBytes(int64(8 * len(cum)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := record.TokenDigest(cum); err != nil {
			b.Fatal(err)
		}
	}
}
