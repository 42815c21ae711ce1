package gpu_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
	"github.com/capbench/capbench/scenarios/agent"
)

var _ = Describe("capture in front of a real vLLM", Label("gpu", "slow"), Ordered, func() {
	var e env.Env

	BeforeAll(func(ctx SpecContext) {
		sc, err := scenarios.Lookup("single-chain/stream")
		Expect(err).NotTo(HaveOccurred())
		e, err = env.Start(context.WithoutCancel(ctx), env.Spec{Backend: env.RealVLLM, Server: sc.Server, Image: image})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(e.Close)
	}, NodeTimeout(20*time.Minute))

	DescribeTable("an unscripted rollout is captured and finalized",
		func(ctx SpecContext, kind agent.Kind, stream bool) {
			sc, err := scenarios.Lookup("single-chain/stream")
			Expect(err).NotTo(HaveOccurred())
			plan := sc.Plan
			plan.Stream, plan.Model, plan.MaxTurns = stream, sc.Server.Model, 4
			id := harness.RolloutID("gpu-"+string(kind), 0)
			Expect(e.DeleteRollout(ctx, id)).To(Succeed())
			col := &harness.Collector{Source: e.Source(), Options: consumer.DefaultOptions()}
			out, err := col.Collect(ctx, []harness.Task{{RolloutID: id, Run: func(ctx context.Context) (*agent.Result, error) {
				return agent.Run(ctx, kind, agent.Target{BaseURL: e.ProxyURL(), RolloutID: id}, plan)
			}}})
			Expect(err).NotTo(HaveOccurred())
			got := harness.Verdict(out[0])
			Expect(got.AgentError).To(BeEmpty())
			Expect(got.Metrics).To(HaveKey("n_calls"))
			Expect(got.Metrics["n_calls"]).To(BeNumerically(">=", 1))
			Expect(out[0].Snapshot).NotTo(BeNil())
			Expect(out[0].Snapshot.Entries).NotTo(BeEmpty(), "the per-entry checks below must see at least one capture")
			for _, entry := range out[0].Snapshot.Entries {
				Expect(entry.PromptTokenIDs).NotTo(BeEmpty())
				Expect(entry.GenerationTokenIDs).NotTo(BeEmpty())
				Expect(entry.GenerationTokenIDs).To(HaveLen(len(entry.GenerationLogProbs)))
			}
		},
		Entry("OpenAI chat, streaming", agent.OpenAIChat, true, SpecTimeout(5*time.Minute)),
		Entry("OpenAI chat, non-streaming", agent.OpenAIChat, false, SpecTimeout(5*time.Minute)),
		Entry("Claude-Code-like Messages", agent.ClaudeCode, true, SpecTimeout(5*time.Minute)),
	)
})
