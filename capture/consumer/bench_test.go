package consumer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/internal/gympeer"
	"github.com/capbench/capbench/internal/procstat"
	"github.com/capbench/capbench/internal/stats"
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
// `capbench verdict` can copy it fresh before every run. With
// CAPBENCH_GYM_DIR, NeMo Gym's consumer runs beside it (coldLoop).
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
	coldLoop(b, false, func(fs *store.FileStore) {
		r, err := consumer.Consume(ctx, fs, "big-0", in, consumer.DefaultOptions())
		if err != nil || r.MaskSample || r.Metrics.TerminalAttribution.Chain != consumer.ChainDelivered {
			b.Fatalf("unexpected verdict: %+v %v", r, err)
		}
	})
}

// BenchmarkJudgeCold200x32k is what `capbench verdict --capture-dir` pays
// on a fresh capture of that rollout: a read-only look (no freeze) through
// store.OpenReadOnly, build and verdict, via JudgeDir. It also times the
// whole `capbench verdict --capture-dir` process (proc-ms), and with
// CAPBENCH_GYM_DIR NeMo Gym's consumer in-process and as a process beside
// both (coldLoop).
func BenchmarkJudgeCold200x32k(b *testing.B) {
	ctx := context.Background()
	coldLoop(b, true, func(fs *store.FileStore) {
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

// coldLoop times run on a store opened over a fresh copy of the never-frozen
// 200x32k rollout each iteration; the copy is not timed.
//
// With a NeMo Gym checkout in CAPBENCH_GYM_DIR (docs/gym-peer.md) every
// round also runs Gym's trajectories_for_rollout (freeze, build, verdict) on
// its own fresh copy inside a warm Python session, ours and Gym's in
// alternating order, and reports gym-ms and x-gym: the median per-round
// ratio of Gym's in-Python time to ours in-process. With wholeProcess, each
// round also runs `capbench verdict --capture-dir DIR` as a process
// (proc-ms) and, with Gym, a fresh python3 that imports Gym and consumes the
// rollout (gym-proc-ms; x-gym-proc is the per-round median ratio of the two
// process wall times). Afterwards each side consumes the directory the
// other one left, and the benchmark fails unless both keep the rollout
// with the same figures.
func coldLoop(b *testing.B, wholeProcess bool, run func(fs *store.FileStore)) {
	src := b.TempDir()
	writeChainRollout(b, src, "big-0", 200, 160, 64, rand.New(rand.NewPCG(1, 2)))
	data, err := os.ReadFile(filepath.Join(src, "big-0.tokens.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	fresh := func(name string) string {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "big-0.tokens.jsonl"), data, 0o600); err != nil {
			b.Fatal(err)
		}
		return dir
	}
	gym := startGym(b)
	var bin string
	if wholeProcess {
		bin = capbenchBinary(b)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	i := 0
	var cpu time.Duration
	var inProc, procs gympeer.Paired
	var oursProc []float64
	var oursDir, gymDir string
	var peak int64
	if wholeProcess {
		dir := fresh("peak")
		peak, _ = verdictPeak(b, bin, dir)
		_ = os.RemoveAll(dir)
	}
	var gymLast gympeer.Reply
	defer func() {
		n := float64(max(i, 1))
		b.ReportMetric(float64(cpu.Microseconds())/1e3/n, "cpu-ms/op")
		if len(oursProc) > 0 {
			b.ReportMetric(stats.Median(oursProc)*1e3, "proc-ms")
		}
		if peak > 0 {
			b.ReportMetric(float64(peak)/(1<<20), "proc-peak-MiB")
			b.ReportMetric(float64(peak)/float64(len(data)), "proc-peak/file")
		}
		if gym != nil && inProc.Rounds() > 0 {
			b.ReportMetric(inProc.Gym(), "gym-ms")
			b.ReportMetric(inProc.Ratio(), "x-gym")
		}
		if gym != nil && procs.Rounds() > 0 {
			b.ReportMetric(procs.Gym(), "gym-proc-ms")
			b.ReportMetric(procs.Ratio(), "x-gym-proc")
		}
	}()
	for b.Loop() {
		b.StopTimer()
		round := i
		i++
		if oursDir != "" {
			_ = os.RemoveAll(oursDir)
		}
		oursDir = fresh("ours-" + strconv.Itoa(round))
		var gymTime time.Duration
		gymRound := func() {
			if gym == nil {
				return
			}
			if gymDir != "" {
				_ = os.RemoveAll(gymDir)
			}
			gymDir = fresh("gym-" + strconv.Itoa(round))
			gymLast = gym.consume(b, gymDir)
			gymTime = time.Duration(gymLast.Secs() * float64(time.Second))
		}
		if !gympeer.OursFirst(round) {
			gymRound()
		}
		b.StartTimer()
		start, before := time.Now(), procstat.CPU()
		fs, err := store.NewFileStore(oursDir)
		if err != nil {
			b.Fatal(err)
		}
		run(fs)
		ours := time.Since(start)
		cpu += procstat.CPU() - before
		b.StopTimer()
		if gympeer.OursFirst(round) {
			gymRound()
		}
		if gym != nil {
			inProc.Add(ours, gymTime)
		}
		if wholeProcess {
			o, g := processRound(b, bin, gym, fresh, round)
			oursProc = append(oursProc, o.Seconds())
			if gym != nil {
				procs.Add(o, g)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	if gym != nil {
		crossCheck(b, gym, oursDir, gymDir, gymLast)
	}
	b.StartTimer()
}

// processRound runs `capbench verdict` and, with Gym, Gym's consumer in a
// fresh python3, each on its own fresh copy, in alternating order.
func processRound(b *testing.B, bin string, gym *gymSession, fresh func(string) string, round int) (ours, theirs time.Duration) {
	oursRun := func() {
		dir := fresh("proc-ours-" + strconv.Itoa(round))
		defer os.RemoveAll(dir)
		ours = verdictProcess(b, bin, dir)
	}
	gymRun := func() {
		if gym == nil {
			return
		}
		dir := fresh("proc-gym-" + strconv.Itoa(round))
		defer os.RemoveAll(dir)
		p, err := gym.peer.Once(context.Background(), gymConsume(dir))
		if err != nil {
			b.Fatal(err)
		}
		checkGymVerdict(b, p.Reply)
		theirs = p.Wall
	}
	if gympeer.OursFirst(round) {
		oursRun()
		gymRun()
	} else {
		gymRun()
		oursRun()
	}
	return ours, theirs
}

// verdictProcess is the wall time of `capbench verdict --capture-dir DIR
// --json`, which must keep the rollout.
func verdictProcess(b *testing.B, bin, dir string) time.Duration {
	var out bytes.Buffer
	cmd := exec.Command(bin, "verdict", "--capture-dir", dir, "--json")
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	var v consumer.Verdict
	if err != nil || json.Unmarshal(out.Bytes(), &v) != nil || v.MaskSample || v.Metrics == nil || v.Metrics.NCalls != 200 {
		b.Fatalf("capbench verdict: %v: %s", err, out.Bytes())
	}
	return wall
}

// verdictPeak is the peak resident memory (bytes) of one `capbench verdict
// --capture-dir DIR --json`, as GNU time reports it; ok is false without
// /usr/bin/time. (A child's own rusage cannot tell: Go starts it with vfork,
// and exec charges the parent's high-water mark to the child.)
func verdictPeak(b *testing.B, bin, dir string) (peak int64, ok bool) {
	const gnuTime = "/usr/bin/time"
	if _, err := os.Stat(gnuTime); err != nil {
		return 0, false
	}
	report := filepath.Join(b.TempDir(), "time.txt")
	out, err := exec.Command(gnuTime, "-f", "%M", "-o", report, bin, "verdict", "--capture-dir", dir, "--json").CombinedOutput()
	if err != nil {
		b.Fatalf("capbench verdict under %s: %v: %s", gnuTime, err, out)
	}
	text, err := os.ReadFile(report)
	if err != nil {
		b.Fatal(err)
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(string(text)), 10, 64)
	if err != nil {
		b.Fatalf("%s -f %%M wrote %q: %v", gnuTime, text, err)
	}
	return kb * 1024, true
}

// capbenchBinary is CAPBENCH_BIN, or capbench built once for this benchmark.
func capbenchBinary(b *testing.B) string {
	if bin := os.Getenv("CAPBENCH_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(b.TempDir(), "capbench")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/capbench/capbench/cmd/capbench").CombinedOutput()
	if err != nil {
		b.Fatalf("go build capbench (or set CAPBENCH_BIN): %v: %s", err, out)
	}
	return bin
}

// gymSession is NeMo Gym's consumer in a warm Python session.
type gymSession struct {
	peer *gympeer.Peer
	s    *gympeer.Session
}

// startGym starts the Gym peer, or says it was not run (nil).
func startGym(b *testing.B) *gymSession {
	peer, s := gympeer.ForBenchmark(b, record.SchemaVersion)
	if peer == nil {
		return nil
	}
	return &gymSession{peer: peer, s: s}
}

func gymConsume(dir string) gympeer.Request {
	return gympeer.Request{Op: gympeer.OpConsume, Dir: dir, RolloutID: "big-0", Model: "pol"}
}

func (g *gymSession) consume(b *testing.B, dir string) gympeer.Reply {
	rep, err := g.s.Do(gymConsume(dir))
	if err != nil {
		b.Fatal(err)
	}
	checkGymVerdict(b, rep)
	return rep
}

// checkGymVerdict fails unless Gym kept the whole rollout: a Gym that could
// not read the records masks it fast, which would be no measurement.
func checkGymVerdict(b *testing.B, rep gympeer.Reply) {
	if rep.MaskSample || rep.NCalls != 200 || rep.Chains != 1 || rep.BuildError != "" {
		b.Fatalf("Gym's consumer did not keep the rollout: mask_sample %v, %d calls, %d chains, error %q",
			rep.MaskSample, rep.NCalls, rep.Chains, rep.BuildError)
	}
}

// crossCheck has each side consume what the other left: Gym the directory
// ours consumed (or judged), ours the one Gym froze. Both must keep the
// rollout with Gym's figures.
func crossCheck(b *testing.B, gym *gymSession, oursDir, gymDir string, gymRep gympeer.Reply) {
	rep := gym.consume(b, oursDir)
	fs, err := store.NewFileStore(gymDir)
	if err != nil {
		b.Fatal(err)
	}
	r, err := consumer.Consume(context.Background(), fs, "big-0", consumer.Input{Model: "pol"}, consumer.DefaultOptions())
	if err != nil || r.MaskSample {
		b.Fatalf("ours on the directory Gym froze: %+v %v", r, err)
	}
	m := r.Metrics
	for _, g := range []gympeer.Reply{rep, gymRep} {
		if m.NCalls != g.NCalls || m.Chains != g.Chains || m.GeneratedTokensDelivered != g.GeneratedTokensDelivered {
			b.Fatalf("verdicts differ: ours %d calls, %d chains, %d tokens delivered; Gym's %d, %d, %d",
				m.NCalls, m.Chains, m.GeneratedTokensDelivered, g.NCalls, g.Chains, g.GeneratedTokensDelivered)
		}
	}
}
