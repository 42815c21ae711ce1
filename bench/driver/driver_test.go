package driver_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/bench/driver"
	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

func mustProfile(name string) gpu.Profile {
	p, err := gpu.LookupProfile(name)
	Expect(err).NotTo(HaveOccurred())
	return p
}

func embeddedChat(stages []bench.Shape, requests int) driver.Options {
	g := driver.DefaultGPU()
	Expect(driver.PlanGPU(&g)).To(Succeed())
	return driver.Options{Config: bench.Config{
		Target: bench.TargetEmbedded, Workload: bench.WorkloadChat, GPU: &g,
		Chat:   &bench.ChatSpec{Model: g.Profile, Prompt: bench.Dist{Kind: "fixed", A: 64}, Output: bench.Dist{Kind: "fixed", A: 32}, Stream: true, Seed: 1},
		Stages: stages, Requests: requests, Windows: bench.Windows{WarmupRequests: 2}, Seed: 1,
		SLO: bench.SLO{TTFT: 2 * time.Second, TPOT: 50 * time.Millisecond},
	}, ScrapeInterval: 20 * time.Millisecond}
}

var _ = Describe("the embedded default", func() {
	It("sends every job direct and through capture, and measures the overhead as paired ratios", func(ctx SpecContext) {
		res, err := driver.Run(ctx, embeddedChat([]bench.Shape{{Arrival: bench.Closed, Concurrency: 4}}, 40))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Samples).To(HaveLen(80))
		Expect(res.Summaries).To(HaveLen(2))
		for _, s := range res.Summaries {
			Expect(s.Failed).To(BeZero(), s.FirstError)
			Expect(s.Completed).To(Equal(38))
			Expect(s.Excluded).To(HaveKeyWithValue(bench.PhaseWarmup, 2))
			Expect(s.TTFT.Count).To(Equal(38))
			Expect(s.ITL.Count).To(BeNumerically(">", 38))
			Expect(s.OutputTokens).To(BeNumerically(">", 0))
		}
		Expect(res.Overhead).To(HaveLen(1))
		Expect(res.Overhead[0].Pairs).To(Equal(38))
		Expect(res.Overhead[0].E2ELRatio.Value).To(BeNumerically(">", 0))
		Expect(res.Capture).NotTo(BeNil())
		Expect(res.Capture.CapturedAll).To(BeTrue(), "%v", res.Capture.Problems)
		Expect(res.Capture.FidelityMethod).To(Equal("ledger"))
		Expect(res.Capture.FidelityExact).To(Equal(res.Capture.FidelityCalls))
		Expect(res.Capture.FidelityCalls).To(Equal(40))
		Expect(res.Capture.PutLatency).NotTo(BeNil())
		Expect(res.Capture.PutLatency.Count).To(Equal(40))
		Expect(res.Capture.PutLatency.P50).To(BeNumerically(">", 0))
		// Every record is synced, and each streamed call's intent with it
		// beside the engine call (docs/store.md#intents-made-durable-once).
		y := res.CaptureSyncs
		Expect(y).NotTo(BeNil(), "the embedded proxy's file store exports its syncs")
		Expect(y.Appends).To(Equal(uint64(80)))
		Expect(y.FileSystemSyncs + y.FileSyncs).To(BeNumerically(">=", 1))
		Expect(y.AppendsPerSync).To(BeNumerically("~", float64(y.Appends)/float64(y.FileSystemSyncs+y.FileSyncs), 1e-9))
		Expect(y.BusyS).To(BeNumerically(">", 0))
		Expect(y.BusyShare).To(BeNumerically("~", y.BusyS/y.WindowS, 1e-9))
		Expect(res.Server).NotTo(BeNil())
		Expect(res.Server.Points).NotTo(BeEmpty())
		Expect(res.Server.Errors).To(BeZero(), res.Server.LastError)
	}, SpecTimeout(2*time.Minute))

	It("runs agent-shaped sessions to 32k-token prompts and consumes each with fidelity checked", func(ctx SpecContext) {
		o := embeddedChat(nil, 0)
		s := driver.DefaultSessions()
		s.Sessions, s.Concurrency = 2, 2
		o.Config.Workload, o.Config.Chat, o.Config.Sessions = bench.WorkloadSessions, nil, &s
		o.Config.Stages = []bench.Shape{{Arrival: bench.Closed, Concurrency: 2}}
		res, err := driver.Run(ctx, o)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Sessions.Count).To(Equal(2))
		for _, oc := range res.Sessions.Outcomes {
			Expect(oc.Error).To(BeEmpty())
			Expect(oc.Masked).To(BeFalse(), oc.MaskReason)
			Expect(oc.MaxPromptTokens).To(BeNumerically(">=", 32768))
			Expect(oc.FidelityCalls).To(Equal(oc.Calls))
			Expect(oc.FidelityExact).To(Equal(oc.Calls))
			Expect(oc.Calls).To(Equal(s.Turns + 2))
		}
		Expect(res.Summaries).To(HaveLen(1))
		Expect(res.Summaries[0].MaxPromptTokens).To(BeNumerically(">=", 32768))
	}, SpecTimeout(3*time.Minute))
})

var _ = Describe("a concurrency sweep on the 48 GiB Qwen3-4B-Thinking profile", func() {
	It("finds the throughput knee within 15% of the concurrency the KV-cache plan predicts", func(ctx SpecContext) {
		g := driver.DefaultGPU()
		g.TimeScale = 0.3
		Expect(driver.PlanGPU(&g)).To(Succeed())
		var stages []bench.Shape
		for _, c := range []int{6, 7, 8, 9, 10} {
			stages = append(stages, bench.Shape{Arrival: bench.Closed, Concurrency: c})
		}
		o := driver.Options{Config: bench.Config{
			Target: bench.TargetEmbedded, Workload: bench.WorkloadChat, GPU: &g, Paths: []bench.Path{bench.PathDirect},
			Chat:   &bench.ChatSpec{Model: g.Profile, Prompt: bench.Dist{Kind: "fixed", A: 26700}, Output: bench.Dist{Kind: "fixed", A: 256}, Stream: true, Variants: 8, Seed: 3},
			Stages: stages, Requests: 44, Windows: bench.Windows{WarmupRequests: 6, CooldownRequests: 6}, Seed: 3,
		}, MetricsURL: "off"}
		res, err := driver.Run(ctx, o)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Knee).NotTo(BeNil())
		var tokens, n float64
		for _, s := range res.Summaries {
			Expect(s.Failed).To(BeZero(), s.FirstError)
			tokens += float64(s.PromptTokens + s.OutputTokens)
			n += float64(s.Completed)
		}
		By("asking the planner (fakes/gpu.Predict, what capbench plan prints) for that request size")
		f, err := gpu.Predict(gpu.Config{Profile: mustProfile(g.Profile), GPUMemoryBytes: g.MemoryBytes, MaxModelLen: g.MaxModelLen}, int(tokens/n))
		Expect(err).NotTo(HaveOccurred())
		predicted := float64(f.ConcurrentRequests)
		Expect(predicted).To(BeNumerically(">", 1))
		Expect(res.Knee.Predicted).To(Equal(predicted))
		AddReportEntry("knee", map[string]any{"measured": res.Knee.X, "predicted": predicted, "points": res.Knee.Points})
		Expect(res.Knee.X).To(BeNumerically("~", predicted, 0.15*predicted))
	}, SpecTimeout(3*time.Minute))
})

var _ = Describe("replay of a capture directory", func() {
	It("sends every recorded call at its offset with its prompt and length, and captures it again", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		o := embeddedChat([]bench.Shape{{Arrival: bench.Closed, Concurrency: 2}}, 10)
		o.Config.CaptureDir, o.Config.Windows = dir, bench.Windows{}
		rec, err := driver.Run(ctx, o)
		Expect(err).NotTo(HaveOccurred())
		Expect(rec.Capture.Records).To(Equal(10))

		g := driver.DefaultGPU()
		Expect(driver.PlanGPU(&g)).To(Succeed())
		res, err := driver.Run(ctx, driver.Options{Config: bench.Config{
			Target: bench.TargetEmbedded, Workload: bench.WorkloadReplay, GPU: &g, Seed: 1,
			Replay: &bench.ReplaySpec{Dir: dir, Speed: 2},
		}, MetricsURL: "off"})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Config.Replay.Calls).To(Equal(10))
		want := map[int]int{}
		for _, s := range rec.Samples {
			if s.Path == bench.PathProxy {
				want[s.PromptTokens]++
			}
		}
		got := map[int]int{}
		for _, s := range res.Samples {
			Expect(s.OK()).To(BeTrue(), s.Error)
			if s.Path == bench.PathDirect { // the server's usage: the recorded prompt length
				got[s.PromptTokens]++
			}
		}
		Expect(res.Samples).To(HaveLen(20))
		Expect(got).To(Equal(want))
		Expect(res.Capture.CapturedAll).To(BeTrue(), "%v", res.Capture.Problems)
		Expect(res.Capture.Records).To(Equal(10))
		Expect(res.Capture.FidelityExact).To(Equal(res.Capture.FidelityCalls))
	}, SpecTimeout(2*time.Minute))

	It("refuses a directory with nothing to replay", func(ctx SpecContext) {
		g := driver.DefaultGPU()
		Expect(driver.PlanGPU(&g)).To(Succeed())
		_, err := driver.Run(ctx, driver.Options{Config: bench.Config{Target: bench.TargetEmbedded, Workload: bench.WorkloadReplay, GPU: &g,
			Replay: &bench.ReplaySpec{Dir: GinkgoT().TempDir(), Speed: 1}}, MetricsURL: "off"})
		Expect(err).To(MatchError(ContainSubstring("no captured calls")))
	})
})

var _ = Describe("a running capture proxy with its capture directory", func() {
	It("sends through it, then checks what it captured against the fake's ledger", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		e, err := env.Start(ctx, env.Spec{Backend: env.InProcess, CaptureDir: dir})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(e.Close)
		res, err := driver.Run(ctx, driver.Options{Config: bench.Config{
			Target: bench.TargetProxy, Workload: bench.WorkloadChat, ProxyURL: e.ProxyURL() + "/v1", URL: e.VLLMURL(), CaptureDir: dir,
			Chat:   &bench.ChatSpec{Model: scenarios.DefaultModel, Prompt: bench.Dist{Kind: "fixed", A: 20}, Output: bench.Dist{Kind: "fixed", A: 16}, Stream: true},
			Stages: []bench.Shape{{Arrival: bench.Poisson, Rate: 100, Concurrency: 4}}, Requests: 12, Seed: 2,
		}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Summaries).To(HaveLen(2)) // the proxy and, with --url, the server direct
		Expect(res.Capture.CapturedAll).To(BeTrue(), "%v", res.Capture.Problems)
		Expect(res.Capture.Records).To(Equal(12))
		Expect(res.Capture.FidelityMethod).To(Equal("ledger"))
		Expect(res.Capture.FidelityExact).To(Equal(12))
		Expect(res.Server.Points).NotTo(BeEmpty())
		// Its /metrics, under the base URL pasted with /v1: each streamed
		// call synced its intent and its record.
		Expect(res.CaptureSyncs).NotTo(BeNil())
		Expect(res.CaptureSyncs.Appends).To(Equal(uint64(24)))
	}, SpecTimeout(time.Minute))

	It("checks by token counts when the server keeps no ledger", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		e, err := env.Start(ctx, env.Spec{Backend: env.InProcess, CaptureDir: dir})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(e.Close)
		res, err := driver.Run(ctx, driver.Options{Config: bench.Config{
			Target: bench.TargetProxy, Workload: bench.WorkloadChat, ProxyURL: e.ProxyURL(), CaptureDir: dir,
			Chat:   &bench.ChatSpec{Model: scenarios.DefaultModel, Prompt: bench.Dist{Kind: "fixed", A: 20}, Output: bench.Dist{Kind: "fixed", A: 16}, Stream: true},
			Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 2}}, Requests: 6, Seed: 2,
		}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Capture.FidelityMethod).To(Equal("structural"))
		Expect(res.Capture.FidelityExact).To(Equal(6), "%v", res.Capture.Problems)
	}, SpecTimeout(time.Minute))
})

var _ = Describe("compare on real runs", func() {
	It("finds no regression between two runs of the same configuration", func(ctx SpecContext) {
		run := func() *bench.Result {
			g := driver.DefaultGPU()
			g.TimeScale = 2 // latencies of ~100 ms and up: timer noise stays small
			Expect(driver.PlanGPU(&g)).To(Succeed())
			res, err := driver.Run(ctx, driver.Options{Config: bench.Config{
				Target: bench.TargetEmbedded, Workload: bench.WorkloadChat, GPU: &g, Seed: 5, Requests: 24,
				Chat:   &bench.ChatSpec{Model: g.Profile, Prompt: bench.Dist{Kind: "fixed", A: 50}, Output: bench.Dist{Kind: "fixed", A: 12}, Stream: true},
				Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 8}}, Windows: bench.Windows{WarmupRequests: 4},
			}, MetricsURL: "off"})
			Expect(err).NotTo(HaveOccurred())
			return res
		}
		a, b := run(), run()
		c, err := bench.Compare(a, b, 0.1)
		Expect(err).NotTo(HaveOccurred())
		var regressed []string
		for _, ch := range c.Changes {
			if ch.Regression {
				regressed = append(regressed, fmt.Sprintf("%s %s %+v", ch.Path, ch.Metric, ch.Ratio))
			}
		}
		Expect(regressed).To(BeEmpty())
		Expect(len(c.Changes)).To(BeNumerically(">=", 8))
	}, SpecTimeout(2*time.Minute))
})
