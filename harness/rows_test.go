package harness_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
	"github.com/capbench/capbench/scenarios/agent"
)

var _ = Describe("the first-call seal", func() {
	It("names the entry with the shortest prompt, the smaller call id on a tie", func() {
		seal := harness.Sealer(scenarios.SealFirstCall)
		Expect(seal).NotTo(BeNil())
		rec := map[string]any{}
		seal(rec, snapshotOf(
			entry("c3", []int{1, 2, 3, 4, 5}, []int{6}, []float64{-1}),
			entry("b2", []int{1, 2}, []int{3}, []float64{-1}),
			entry("a9", []int{1, 2}, []int{3}, []float64{-1}),
		))
		Expect(rec).To(HaveKeyWithValue(harness.ExplicitCallKey, "a9"))
	})

	It("leaves the record alone when nothing was captured or there is no record", func() {
		seal := harness.Sealer(scenarios.SealFirstCall)
		rec := map[string]any{"reward": 1.0}
		seal(rec, snapshotOf())
		seal(rec, nil)
		seal(nil, snapshotOf(entry("a", []int{1}, []int{2}, []float64{-1})))
		Expect(rec).To(Equal(map[string]any{"reward": 1.0}))
	})

	It("is absent when no seal is asked for", func() {
		Expect(harness.Sealer(scenarios.NoSeal)).To(BeNil())
	})
})

var _ = DescribeTable("a redundant build's expectation",
	func(want scenarios.Expect, got harness.Got, mismatches []string) {
		Expect(harness.Compare(want, got)).To(Equal(mismatches))
	},
	Entry("met: untouched, no metrics, retired", scenarios.Expect{Redundant: true},
		harness.Got{Redundant: true, Untouched: true, Retired: true}, []string(nil)),
	Entry("a rebuilt record where a redundant one was expected", scenarios.Expect{Redundant: true},
		harness.Got{Metrics: map[string]any{"n_calls": 3.0}, Retired: true},
		[]string{"redundant build: want true, got false", "_ng_token_capture: want absent, got map[n_calls:3]",
			"record: want it unchanged by delivery, got a changed record"}),
	Entry("a redundant build that was not retired", scenarios.Expect{Redundant: true},
		harness.Got{Redundant: true, Untouched: true}, []string{"retirement: want the redundant build's snapshot retired, got it kept"}),
	Entry("a redundant build nobody expected", scenarios.Expect{MaskSample: false, Checks: []scenarios.Check{scenarios.Eq("n_calls", 3)}},
		harness.Got{Redundant: true, Untouched: true, Retired: true}, []string{"redundant build: want false, got true"}),
	Entry("a mask on a record that should be untouched", scenarios.Expect{Redundant: true},
		harness.Got{MaskSample: true, Redundant: true, Retired: true},
		[]string{"mask_sample: want false, got true", "record: want it unchanged by delivery, got a changed record"}),
)

var _ = Describe("identical final retries through the real path (row 5c)", Label("fake"), func() {
	It("attributes the smaller call id of the two identical attempts and delivers it", func(ctx SpecContext) {
		sc, err := scenarios.Lookup("retry-final-identical")
		Expect(err).NotTo(HaveOccurred())
		e, err := env.Start(ctx, env.Spec{Backend: env.InProcess, Server: sc.Server, CaptureDir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(e.Close)
		Expect(e.SetScripts(ctx, sc.Scripts)).To(Succeed())

		var seen *store.Snapshot
		t := agent.Target{BaseURL: e.ProxyURL(), RolloutID: "identical-0"}
		col := &harness.Collector{Source: e.Source(), Options: consumer.DefaultOptions()}
		got, err := col.Collect(ctx, []harness.Task{{
			RolloutID: t.RolloutID,
			Run:       func(ctx context.Context) (*agent.Result, error) { return agent.Run(ctx, sc.Agent, t, sc.Plan) },
			// Keep the frozen capture for the assertion; the record is untouched.
			Seal: func(_ map[string]any, snap *store.Snapshot) { seen = snap },
		}})
		Expect(err).NotTo(HaveOccurred())
		Expect(seen).NotTo(BeNil())
		Expect(seen.Entries).To(HaveLen(4))

		// The two final attempts share the longest prompt and the same tokens.
		var finals []*record.Entry
		longest := 0
		for _, en := range seen.Entries {
			longest = max(longest, len(en.PromptTokenIDs))
		}
		for _, en := range seen.Entries {
			if len(en.PromptTokenIDs) == longest {
				finals = append(finals, en)
			}
		}
		Expect(finals).To(HaveLen(2))
		Expect(finals[0].GenerationTokenIDs).To(Equal(finals[1].GenerationTokenIDs))
		smaller := min(finals[0].ModelCallID, finals[1].ModelCallID)

		v := harness.Verdict(got[0])
		Expect(v.MaskSample).To(BeFalse())
		callID, _ := scenarios.MetricAt(v.Metrics, "terminal_attribution.call_id")
		chain, _ := scenarios.MetricAt(v.Metrics, "terminal_attribution.chain")
		Expect(callID).To(Equal(smaller))
		Expect(chain).To(Equal("delivered"))
	}, SpecTimeout(30*time.Second))
})
