package harness_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/env"
	. "github.com/capbench/capbench/harness/matchers"
	"github.com/capbench/capbench/scenarios"
)

// catalogEntries turns the catalog into table entries, labelled so users
// can filter (`-ginkgo.label-filter='fake && stream'`).
func catalogEntries() []any {
	var out []any
	for _, sc := range scenarios.All() {
		labels := Label(append([]string{"fake", "inprocess"}, sc.Tags...)...)
		out = append(out, Entry(sc.Name, sc, labels, SpecTimeout(30*time.Second)))
	}
	return out
}

var _ = Describe("the scenario catalog on the in-process backend", Label("fake"), func() {
	var session *harness.Session

	BeforeEach(func() {
		var err error
		session, err = harness.NewSession(harness.Options{Backend: env.InProcess, OutDir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(session.Close)
	})

	DescribeTable("reaches the contract's verdict with exact token fidelity",
		append([]any{func(ctx SpecContext, sc scenarios.Scenario) {
			res := session.Scenario(ctx, sc)
			Expect(res).To(MatchItsExpectation())
			if res.Fidelity.Calls > 0 {
				Expect(res).To(BeCapturedExactly())
			}
		}}, catalogEntries()...)...,
	)

	It("reads naturally for a healthy chain", func(ctx SpecContext) {
		sc, err := scenarios.Lookup("single-chain/stream")
		Expect(err).NotTo(HaveOccurred())
		res := session.Scenario(ctx, sc)
		Expect(res).To(BeUnmasked())
		Expect(res).To(HaveNCalls(3))
		Expect(res).To(HaveChains(1))
		Expect(res).To(HaveRoots(1))
		Expect(res).To(HaveDeliveredFraction(1.0))
		Expect(res).To(HaveTerminalChain("delivered"))
		Expect(res).To(BeCapturedExactly())
	}, SpecTimeout(30*time.Second))
})

var _ = Describe("a deliberately broken system under test", Label("fake", "faults"), func() {
	run := func(ctx context.Context, name string, faults harness.Faults) harness.ScenarioResult {
		s, err := harness.NewSession(harness.Options{OutDir: GinkgoT().TempDir(), Faults: faults})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(s.Close)
		sc, err := scenarios.Lookup(name)
		Expect(err).NotTo(HaveOccurred())
		return s.Scenario(ctx, sc)
	}

	It("fails the scenario, naming it and the metric, when the proxy loses a call", func(ctx SpecContext) {
		res := run(ctx, "single-chain/stream", harness.Faults{DropPut: 2})
		Expect(res.Status).To(Equal(harness.StatusFail))
		m := MatchItsExpectation()
		ok, err := m.Match(res)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse())
		msg := m.FailureMessage(res)
		Expect(msg).To(ContainSubstring(`"single-chain/stream"`))
		Expect(msg).To(ContainSubstring("n_calls: want = 3, got 2"))
		Expect(msg).To(ContainSubstring("_ng_token_capture: {"))
	}, SpecTimeout(30*time.Second))

	It("fails the scenario, naming it and mask_sample, when the consumer flips a masking rule", func(ctx SpecContext) {
		res := run(ctx, "retry-final-call", harness.Faults{FlipMask: true})
		Expect(res.Status).To(Equal(harness.StatusFail))
		m := BeMasked()
		ok, err := m.Match(res)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse())
		msg := m.FailureMessage(res)
		Expect(msg).To(ContainSubstring(`"retry-final-call"`))
		Expect(msg).To(ContainSubstring("mask_sample"))
		Expect(res.Mismatches).To(ContainElement("mask_sample: want true, got false"))
	}, SpecTimeout(30*time.Second))

	It("rejects a value that is not a scenario result instead of panicking", func() {
		_, err := BeUnmasked().Match(42)
		Expect(err).To(MatchError(ContainSubstring("expects a harness.ScenarioResult")))
	})
})
