package driver_test

import (
	"sort"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/bench/driver"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

var _ = Describe("agent sessions on shards", func() {
	It("split by session index over one capture proxy, merged into every session once", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		e, err := env.Start(ctx, env.Spec{Backend: env.InProcess, CaptureDir: dir,
			Server: scenarios.Server{Model: scenarios.DefaultModel, EnableAutoToolChoice: true, ToolCallParser: "hermes", ChatTemplateVariant: "plain"}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(e.Close)
		spec := driver.DefaultSessions()
		spec.Sessions, spec.Concurrency, spec.Turns, spec.ToolTokens, spec.ThinkTime, spec.SubAgentTurn = 5, 3, 4, 50, 0, 1
		cfg := bench.Config{Target: bench.TargetProxy, Workload: bench.WorkloadSessions, ProxyURL: e.ProxyURL(), URL: e.VLLMURL(), CaptureDir: dir,
			Sessions: &spec, Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 3}}}
		start := time.Now().Add(200 * time.Millisecond)
		const shards = 2
		rs := make([]*bench.Result, shards)
		var wg sync.WaitGroup
		for i := range shards {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				res, err := driver.Run(ctx, driver.Options{Config: cfg, Shard: bench.Shard{Index: i, Total: shards}, StartAt: start, MetricsURL: "off"})
				Expect(err).NotTo(HaveOccurred())
				rs[i] = res
			}()
		}
		wg.Wait()
		Expect(rs[0].Sessions.Count).To(Equal(3), "sessions 0, 2, 4")
		Expect(rs[1].Sessions.Count).To(Equal(2), "sessions 1, 3")
		Expect(rs[0].Shard.Concurrency + rs[1].Shard.Concurrency).To(Equal(3))
		m, err := bench.MergeShards(rs, []string{"s0", "s1"}, time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(m.Sessions.Count).To(Equal(5))
		var ids []string
		for _, oc := range m.Sessions.Outcomes {
			Expect(oc.Error).To(BeEmpty())
			Expect(oc.Masked).To(BeFalse(), oc.MaskReason)
			Expect(oc.FidelityExact).To(Equal(oc.Calls))
			ids = append(ids, oc.RolloutID)
		}
		sort.Strings(ids)
		prefix := "bench-s" + start.UTC().Format("150405") + "-"
		Expect(ids).To(Equal([]string{prefix + "0", prefix + "1", prefix + "2", prefix + "3", prefix + "4"}))
		Expect(m.SampleCount).To(Equal(rs[0].SampleCount + rs[1].SampleCount))
		Expect(m.SampleCount).To(Equal(5 * (spec.Turns + 2)))
	}, SpecTimeout(2*time.Minute))
})
