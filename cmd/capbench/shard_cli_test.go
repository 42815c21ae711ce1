package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/deploy/k8s"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

// The simulation of a Kubernetes Indexed Job of load shards: N processes of
// the built binary, each with the environment a pod of the Job gets
// (JOB_COMPLETION_INDEX, CAPBENCH_SHARDS), against one fake vLLM, merged and
// checked against one process running the same schedule.
var _ = Describe("sharded bench processes, merged", Ordered, func() {
	const shards = 3
	var bin, fakeURL string

	BeforeAll(func(ctx SpecContext) {
		if testing.Short() {
			Skip("-short: the shard simulation builds the binary and runs it as separate processes")
		}
		b, err := env.BuildBinary(ctx, GinkgoT().TempDir(), false)
		Expect(err).NotTo(HaveOccurred())
		bin = b
		fake, err := vllm.New(vllm.Options{
			Model: scenarios.DefaultModel, Seed: 1, Host: "127.0.0.1",
			Timing:  vllm.Timing{TTFT: 20 * time.Millisecond, InterTokenLatency: 2 * time.Millisecond},
			Lengths: vllm.Lengths{Mean: 16, StdDev: 0.001, Min: 16},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(fake.Start(context.WithoutCancel(ctx))).To(Succeed())
		DeferCleanup(fake.Close)
		fakeURL = fake.URL()
	}, NodeTimeout(5*time.Minute))

	// runBin runs the binary with extra environment and returns its output.
	runBin := func(ctx context.Context, env []string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
		return cmd
	}

	// sharded runs the schedule as shards processes and merges them.
	sharded := func(ctx context.Context, schedule []string) (*bench.Result, []*bench.Result) {
		dir := GinkgoT().TempDir()
		at := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
		var cmds []*exec.Cmd
		var outs []string
		for i := range shards {
			out := filepath.Join(dir, "shard-"+strconv.Itoa(i))
			args := append([]string{"bench", "--url", fakeURL, "--start-at", at, "--out", out, "--progress", "off", "--metrics-url", "off"}, schedule...)
			cmd := runBin(ctx, []string{"JOB_COMPLETION_INDEX=" + strconv.Itoa(i), "CAPBENCH_SHARDS=" + strconv.Itoa(shards)}, args...)
			Expect(cmd.Start()).To(Succeed())
			cmds, outs = append(cmds, cmd), append(outs, out)
		}
		for i, c := range cmds {
			Expect(c.Wait()).To(Succeed(), "shard %d", i)
		}
		var parts []*bench.Result
		for _, o := range outs {
			r, err := readBenchResult(o)
			Expect(err).NotTo(HaveOccurred())
			parts = append(parts, r)
		}
		merged := filepath.Join(dir, "merged")
		Expect(runBin(ctx, nil, append([]string{"merge", "--out", merged}, outs...)...).Run()).To(Succeed())
		m, err := readBenchResult(merged)
		Expect(err).NotTo(HaveOccurred())
		return m, parts
	}

	single := func(ctx context.Context, schedule []string) *bench.Result {
		out := filepath.Join(GinkgoT().TempDir(), "single")
		args := append([]string{"bench", "--url", fakeURL, "--out", out, "--progress", "off", "--metrics-url", "off"}, schedule...)
		Expect(runBin(ctx, nil, args...).Run()).To(Succeed())
		r, err := readBenchResult(out)
		Expect(err).NotTo(HaveOccurred())
		return r
	}

	schedOffsets := func(r *bench.Result) []string {
		var a []string
		for _, s := range r.Samples {
			a = append(a, fmt.Sprintf("%04d@%d", s.Pair, s.ScheduledNS))
		}
		sort.Strings(a)
		return a
	}

	within := func(got, want, rel float64, what string) {
		ExpectWithOffset(1, got).To(BeNumerically("~", want, want*rel), "%s: merged %.2f ms vs single %.2f ms", what, got, want)
	}

	It("an open loop: the merged arrivals are the single process's schedule, exactly", func(ctx SpecContext) {
		schedule := []string{"--arrival", "poisson", "--rate", "60", "--concurrency", "0", "--requests", "60", "--seed", "5", "--max-tokens", "16"}
		one := single(ctx, schedule)
		m, parts := sharded(ctx, schedule)
		for i, p := range parts {
			Expect(p.Shard).NotTo(BeNil())
			Expect(p.Shard.Index).To(Equal(i))
			Expect(p.Shard.PlannedStart.IsZero()).To(BeFalse())
			Expect(p.Shard.ActualStart).To(BeTemporally(">=", p.Shard.PlannedStart))
			Expect(p.Samples).To(HaveLen(20))
		}
		Expect(m.SampleCount).To(Equal(one.SampleCount))
		Expect(m.SampleCount).To(Equal(60))
		Expect(schedOffsets(m)).To(Equal(schedOffsets(one)), "arrival k of the one seeded schedule, at the same offset")
		Expect(m.Merge.Problems).To(BeEmpty())
		Expect(m.Config.Comparable(one.Config)).To(BeEmpty())
		Expect(m.Summaries).To(HaveLen(1))
		ms, os1 := m.Summaries[0], one.Summaries[0]
		Expect(ms.Completed).To(Equal(os1.Completed))
		within(ms.TTFT.P50, os1.TTFT.P50, 0.5, "TTFT p50")
		within(ms.E2EL.P50, os1.E2EL.P50, 0.5, "E2EL p50")
		within(ms.RequestThroughput, os1.RequestThroughput, 0.35, "request throughput (req/s)")
	}, SpecTimeout(3*time.Minute))

	It("a closed loop: workers and jobs split, the union is the single process's jobs", func(ctx SpecContext) {
		schedule := []string{"--arrival", "closed", "--concurrency", "7", "--requests", "42", "--max-tokens", "16"}
		one := single(ctx, schedule)
		m, parts := sharded(ctx, schedule)
		workers := 0
		for _, p := range parts {
			workers += p.Shard.Concurrency
		}
		Expect(workers).To(Equal(7))
		Expect(m.SampleCount).To(Equal(one.SampleCount))
		jobs := map[int]bool{}
		for _, s := range m.Samples {
			jobs[s.Pair] = true
		}
		Expect(jobs).To(HaveLen(42))
		ms, os1 := m.Summaries[0], one.Summaries[0]
		within(ms.E2EL.P50, os1.E2EL.P50, 0.5, "E2EL p50")
		within(ms.RequestThroughput, os1.RequestThroughput, 0.5, "request throughput (req/s)")
	}, SpecTimeout(3*time.Minute))

	It("runs the deploy/k8s Jobs' own arguments and environment, shards then merge", func(ctx SpecContext) {
		objs, err := k8s.Objects()
		Expect(err).NotTo(HaveOccurred())
		var shardJob, mergeJob *batchv1.Job
		for _, o := range objs {
			if j, ok := o.Obj.(*batchv1.Job); ok && j.Name == "capbench-bench" {
				shardJob = j
			} else if ok && j.Name == "capbench-merge" {
				mergeJob = j
			}
		}
		Expect(shardJob).NotTo(BeNil())
		Expect(mergeJob).NotTo(BeNil())
		results := GinkgoT().TempDir()
		// The cluster's names and sizes, swapped for this machine's: the
		// fake for the vllm Service, a temp dir for the volume, a shorter run.
		local := map[string]string{"http://vllm:8000": fakeURL, "4000": "24", "40": "200"}
		podArgs := func(c corev1.Container, env map[string]string) []string {
			var out []string
			for _, a := range c.Args {
				if v, ok := local[a]; ok {
					a = v
				}
				for k, v := range env {
					a = strings.ReplaceAll(a, "$("+k+")", v)
				}
				out = append(out, strings.Replace(a, "/results", results, 1))
			}
			return out
		}
		c := shardJob.Spec.Template.Spec.Containers[0]
		start := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
		var cmds []*exec.Cmd
		for i := range int(*shardJob.Spec.Completions) {
			env := map[string]string{"JOB_COMPLETION_INDEX": strconv.Itoa(i), "START_AT": start}
			for _, e := range c.Env {
				if e.Value != "" && e.Name != "START_AT" {
					env[e.Name] = e.Value
				}
			}
			var kv []string
			for k, v := range env {
				kv = append(kv, k+"="+v)
			}
			cmd := runBin(ctx, kv, podArgs(c, env)...)
			Expect(cmd.Start()).To(Succeed())
			cmds = append(cmds, cmd)
		}
		for i, cmd := range cmds {
			Expect(cmd.Wait()).To(Succeed(), "shard %d", i)
		}
		Expect(runBin(ctx, nil, podArgs(mergeJob.Spec.Template.Spec.Containers[0], nil)...).Run()).To(Succeed())
		m, err := readBenchResult(filepath.Join(results, "merged"))
		Expect(err).NotTo(HaveOccurred())
		Expect(m.SampleCount).To(Equal(24))
		Expect(m.Merge.Shards).To(HaveLen(int(*shardJob.Spec.Completions)))
		Expect(filepath.Join(results, "merged", "report.md")).To(BeAnExistingFile())
	}, SpecTimeout(3*time.Minute))

	DescribeTable("refuses shard flags it cannot honour, naming them",
		func(ctx SpecContext, env []string, args []string, want string) {
			_, err := capbenchEnv(ctx, env, append([]string{"bench", "--progress", "off"}, args...)...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("the embedded stack", nil, []string{"--shard", "0/2"}, "--shard needs a shared server (--url or --proxy-url)"),
		Entry("a replay", nil, []string{"--shard", "0/2", "--url", "http://127.0.0.1:1", "--replay", "/nonexistent"}, "--shard splits the chat and sessions workloads, not a replay"),
		Entry("fewer sessions than shards", nil, []string{"--shard", "0/3", "--proxy-url", "http://127.0.0.1:1", "--capture-dir", "/nonexistent", "--workload", "sessions", "--sessions", "2"},
			"--sessions 2 over 3 shards leaves a shard without a session"),
		Entry("a sweep", nil, []string{"--shard", "0/2", "--url", "http://127.0.0.1:1", "--sweep", "concurrency=2,4"}, "--shard 0/2 runs one stage"),
		Entry("a Job index without a total", []string{"JOB_COMPLETION_INDEX=1"}, []string{"--url", "http://127.0.0.1:1"}, "give the shard total with --shards N or CAPBENCH_SHARDS"),
		Entry("a bad --start-at", nil, []string{"--url", "http://127.0.0.1:1", "--start-at", "soon"}, `--start-at "soon": want an RFC3339 time`),
		Entry("more shards than workers", nil, []string{"--shard", "0/3", "--url", "http://127.0.0.1:1", "--concurrency", "2"}, "leaves shard 0 without a worker"),
	)

	DescribeTable("merge refuses what is not one sharded run",
		func(ctx SpecContext, args []string, want string) {
			_, err := capbench(ctx, append([]string{"merge"}, args...)...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("no --out", []string{"a/result.json"}, "--out DIR is required"),
		Entry("a missing file", []string{"--out", "/tmp/never-written-capbench-merge", "/nonexistent/result.json"}, "/nonexistent/result.json: no such file"),
	)
})

// capbenchEnv runs the CLI in-process with the environment set for the call.
func capbenchEnv(ctx context.Context, env []string, args ...string) (string, error) {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		GinkgoT().Setenv(k, v)
	}
	return capbench(ctx, args...)
}

var _ = Describe("capbench merge with a late shard", func() {
	It("writes the merged result, names the late shard and exits non-zero", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		planned := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		var args []string
		for i := range 2 {
			r := &bench.Result{
				Config: bench.Config{Target: bench.TargetURL, Workload: bench.WorkloadChat, URL: "http://127.0.0.1:1",
					Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 2}}, Requests: 4, Seed: 1},
				Stages: []bench.StageInfo{{Shape: bench.Shape{Arrival: bench.Closed, Concurrency: 2}, StartNS: 0, EndNS: 2e7, Jobs: 2}},
				Shard:  &bench.ShardInfo{Index: i, Total: 2, PlannedStart: planned, ActualStart: planned.Add(time.Duration(i) * 3 * time.Second), Concurrency: 1},
			}
			for k := i; k < 4; k += 2 {
				r.Samples = append(r.Samples, bench.Sample{Path: bench.PathTarget, Pair: k, StartNS: int64(k) * 1e6, FirstTokenNS: int64(k)*1e6 + 5e6,
					EndNS: int64(k)*1e6 + 9e6, OutputTokens: 4, PromptTokens: 8})
			}
			r.Finish()
			out := filepath.Join(dir, "shard-"+strconv.Itoa(i))
			_, err := bench.WriteResult(out, r)
			Expect(err).NotTo(HaveOccurred())
			args = append(args, out)
		}
		merged := filepath.Join(dir, "merged")
		_, err := capbench(ctx, append([]string{"merge", "--out", merged, "--late-tolerance", "1s"}, args...)...)
		Expect(err).To(MatchError(ContainSubstring("1 shard problem(s)")))
		m, rerr := readBenchResult(merged)
		Expect(rerr).NotTo(HaveOccurred())
		Expect(m.Samples).To(HaveLen(4))
		Expect(m.Merge.Problems).To(ConsistOf(ContainSubstring("shard 1/2 (" + args[1] + ") started 3000.0 ms late (tolerance 1000.0 ms)")))
	})
})
