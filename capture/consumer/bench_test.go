package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
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
func writeChainRollout(tb interface {
	Helper()
	Fatal(...any)
}, dir, id string, calls, step, genLen int, rng *rand.Rand) {
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

// BenchmarkConsumeCold200x32k is what `capbench verdict` pays on a fresh
// capture: every iteration copies the never-frozen 21 MB JSONL of a 200-call
// rollout (prompts growing to 32k tokens) into a new directory (untimed),
// then opens a store, freezes (reconciling the unindexed file and writing the
// state durably), builds and decides the verdict (timed).
//
// With CAPBENCH_COLD_FIXTURE_DIR set it only writes that rollout into the
// named directory and returns, so a whole-process measurement of
// `capbench verdict` can copy it fresh before every run.
func BenchmarkConsumeCold200x32k(b *testing.B) {
	if dir := os.Getenv("CAPBENCH_COLD_FIXTURE_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		writeChainRollout(b, dir, "big-0", 200, 160, 64, rand.New(rand.NewPCG(1, 2)))
		b.Skip("wrote the cold fixture to " + dir)
	}
	in := consumer.Input{Model: "pol", Response: map[string]any{"id": fmt.Sprintf("chatcmpl-%032x", 200),
		"output": []any{map[string]any{"type": "message", "role": "assistant", "content": "turn 199"}}}}
	ctx := context.Background()
	coldLoop(b, func(fs *store.FileStore) {
		r, err := consumer.Consume(ctx, fs, "big-0", in, consumer.DefaultOptions())
		if err != nil || r.MaskSample || r.Metrics.TerminalAttribution.Chain != consumer.ChainDelivered {
			b.Fatalf("unexpected verdict: %+v %v", r, err)
		}
	})
}

// BenchmarkJudgeCold200x32k is what `capbench verdict --capture-dir` pays
// on a fresh capture of that rollout: a read-only look (no freeze) through
// store.OpenReadOnly, build and verdict, via JudgeDir.
func BenchmarkJudgeCold200x32k(b *testing.B) {
	ctx := context.Background()
	coldLoop(b, func(fs *store.FileStore) {
		ro, err := store.OpenReadOnly(fs.Dir())
		if err != nil {
			b.Fatal(err)
		}
		vs, err := consumer.JudgeDir(ctx, ro, nil, consumer.DefaultOptions(), false, nil)
		if err != nil || len(vs) != 1 {
			b.Fatal(err)
		}
	})
}

// BenchmarkFinalizeLine200x32k encodes the finalized record of that
// rollout (Result.MarshalJSON: the 20 MB rebuilt output with its running
// prompt in every carrier item), as `capbench verdict --rollouts` appends it.
func BenchmarkFinalizeLine200x32k(b *testing.B) {
	dir := b.TempDir()
	writeChainRollout(b, dir, "big-0", 200, 160, 64, rand.New(rand.NewPCG(1, 2)))
	fs, err := store.NewFileStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	res, err := consumer.Consume(context.Background(), fs, "big-0", consumer.Input{}, consumer.DefaultOptions())
	if err != nil || res.RebuiltResponse == nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		line, err := res.MarshalJSON()
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(line)))
	}
}

// processCPU is the process's user + system time so far: on a shared
// machine CPU time per op moves far less than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gymColdSeconds is NeMo Gym's trajectories_for_rollout on this rollout
// (cold first freeze, build, verdict), 0.31-0.33 s as measured on this
// machine kind; no Gym checkout is available to run it side by side.
const gymColdSeconds = 0.32

// coldLoop times run on a store opened over a fresh copy of the never-frozen
// 200x32k rollout each iteration; the copy is not timed.
func coldLoop(b *testing.B, run func(fs *store.FileStore)) {
	src := b.TempDir()
	writeChainRollout(b, src, "big-0", 200, 160, 64, rand.New(rand.NewPCG(1, 2)))
	data, err := os.ReadFile(filepath.Join(src, "big-0.tokens.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	i := 0
	var cpu time.Duration
	defer func() {
		n := float64(max(i, 1))
		b.ReportMetric(float64(cpu.Microseconds())/1e3/n, "cpu-ms/op")
		b.ReportMetric(gymColdSeconds/(b.Elapsed().Seconds()/n), "x-gym")
	}()
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(root, strconv.Itoa(i))
		i++
		if err := os.Mkdir(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "big-0.tokens.jsonl"), data, 0o600); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		before := processCPU()
		fs, err := store.NewFileStore(dir)
		if err != nil {
			b.Fatal(err)
		}
		run(fs)
		cpu += processCPU() - before
		b.StopTimer()
		_ = os.RemoveAll(dir)
		b.StartTimer()
	}
}
