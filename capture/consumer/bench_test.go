package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// writeChainRollout writes one rollout of `calls` chained calls straight to
// <dir>/<id>.tokens.jsonl in canonical form: the root prompt has `step`
// tokens, each later prompt adds the previous generation plus tool output,
// so the last prompt has about calls*step tokens.
func writeChainRollout(tb testing.TB, dir, id string, calls, step, genLen int, rng *rand.Rand) {
	tb.Helper()
	f, err := os.Create(filepath.Join(dir, id+".tokens.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var prompt []int
	for j := 0; j < step; j++ {
		prompt = append(prompt, rng.IntN(151000))
	}
	parent := ""
	for i := 0; i < calls; i++ {
		gen := make([]int, genLen)
		lp := make([]float64, genLen)
		for j := range gen {
			gen[j] = rng.IntN(151000)
			lp[j] = -rng.Float64() * 3
		}
		cum := append(append([]int{}, prompt...), gen...)
		digest, err := record.TokenDigest(cum)
		if err != nil {
			tb.Fatal(err)
		}
		cumLen, idx := len(cum), 0
		callID := fmt.Sprintf("%032x", i+1)
		respID := "chatcmpl-" + callID
		e := &record.Entry{SchemaVersion: record.SchemaVersion, RolloutID: id, ModelCallID: callID, Model: "pol",
			PromptTokenIDs: prompt, GenerationTokenIDs: gen, GenerationLogProbs: lp,
			OutputItems:    []record.Item{{"type": "message", "role": "assistant", "content": "turn " + strconv.Itoa(i)}},
			TokenItemIndex: &idx, ResponseID: &respID, CreatedAt: float64(1_700_000_000 + i), CumLen: &cumLen, Digest: &digest}
		res := record.ResolutionRoot
		if parent != "" {
			res = record.ResolutionResolved
			p := parent
			e.ParentCallID = &p
		}
		e.ParentResolution = &res
		line, err := e.MarshalCanonical()
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			tb.Fatal(err)
		}
		parent = callID
		prompt = cum
		for j := 0; j < step-genLen; j++ {
			prompt = append(prompt, rng.IntN(151000))
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkConsume200x32k: freeze (reading the snapshot from disk), build,
// attribute and verdict one rollout of 200 calls whose prompts grow to 32k
// tokens (about 21 MB of JSONL).
func BenchmarkConsume200x32k(b *testing.B) {
	dir := b.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	writeChainRollout(b, dir, "big-0", 200, 160, 64, rng)
	fs, err := store.NewFileStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	in := consumer.Input{Model: "pol", Response: map[string]any{"id": fmt.Sprintf("chatcmpl-%032x", 200),
		"output": []any{map[string]any{"type": "message", "role": "assistant", "content": "turn 199"}}}}
	// The first freeze reconciles the unindexed file; measure steady state.
	r, err := consumer.Consume(ctx, fs, "big-0", in, consumer.DefaultOptions())
	if err != nil || r.MaskSample || r.Metrics.TerminalAttribution.Chain != consumer.ChainDelivered {
		b.Fatalf("unexpected verdict: %+v %v", r, err)
	}
	st, _ := os.Stat(filepath.Join(dir, "big-0.tokens.jsonl"))
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		r, err := consumer.Consume(ctx, fs, "big-0", in, consumer.DefaultOptions())
		if err != nil || r.MaskSample {
			b.Fatal("unexpected verdict")
		}
	}
}

// BenchmarkJudgeDir10k: a read-only verdict pass (what `capbench verdict`
// without --rollouts runs) over a directory of small rollouts (3 calls
// each). Setup runs and times one cold pass, reported as cold-ns/rollout;
// one op is then a warm pass, reported as ns/rollout. CAPBENCH_BENCH_ROLLOUTS overrides the
// number of rollouts (default 10000).
func BenchmarkJudgeDir10k(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("CAPBENCH_BENCH_ROLLOUTS")); err == nil && v > 0 {
		n = v
	}
	dir := b.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < n; i++ {
		writeChainRollout(b, dir, fmt.Sprintf("r%05d", i), 3, 40, 8, rng)
	}
	ro, err := store.OpenReadOnly(dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	if _, err := consumer.JudgeDir(ctx, ro, nil, consumer.DefaultOptions(), false, nil); err != nil {
		b.Fatal(err)
	}
	cold := time.Since(start)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := consumer.JudgeDir(ctx, ro, nil, consumer.DefaultOptions(), false, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cold.Nanoseconds())/float64(n), "cold-ns/rollout")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/rollout")
}

// BenchmarkBuild200x32k isolates the in-memory part of the consumer
// (attribution, build, projection, contiguity, metrics) on the same rollout,
// from an already read snapshot.
func BenchmarkBuild200x32k(b *testing.B) {
	dir := b.TempDir()
	writeChainRollout(b, dir, "big-0", 200, 160, 64, rand.New(rand.NewPCG(1, 2)))
	fs, err := store.NewFileStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := fs.Freeze(context.Background(), "big-0")
	if err != nil {
		b.Fatal(err)
	}
	in := consumer.Input{Model: "pol", Response: map[string]any{"id": fmt.Sprintf("chatcmpl-%032x", 200),
		"output": []any{map[string]any{"type": "message", "role": "assistant", "content": "turn 199"}}}}
	b.ReportAllocs()
	for b.Loop() {
		if r := consumer.ConsumeSnapshot(snap, in, consumer.DefaultOptions()); r.MaskSample {
			b.Fatal("unexpected verdict")
		}
	}
}
