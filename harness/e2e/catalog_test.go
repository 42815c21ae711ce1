package e2e_test

import (
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/env"
	. "github.com/capbench/capbench/harness/matchers"
	"github.com/capbench/capbench/scenarios"
)

func entries(backend string) []any {
	var out []any
	for _, sc := range scenarios.All() {
		labels := Label(append([]string{"fake", backend, "slow"}, sc.Tags...)...)
		out = append(out, Entry(sc.Name, sc, labels, SpecTimeout(2*time.Minute)))
	}
	return out
}

// catalogOn declares one ordered table per backend: the session (and so the
// environments, one per server configuration) is shared by its entries.
func catalogOn(backend env.Backend, before func(SpecContext)) bool {
	Describe("the scenario catalog on the "+string(backend)+" backend", Ordered, ContinueOnFailure, Label(string(backend), "slow"), func() {
		var session *harness.Session
		BeforeAll(func(ctx SpecContext) {
			before(ctx)
			var err error
			session, err = harness.NewSession(harness.Options{Backend: backend, OutDir: GinkgoT().TempDir(), Binary: binary})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(session.Close)
		}, NodeTimeout(5*time.Minute))

		DescribeTable("reaches the contract's verdict with exact token fidelity",
			append([]any{func(ctx SpecContext, sc scenarios.Scenario) {
				res := session.Scenario(ctx, sc)
				if res.Status == harness.StatusSkip {
					Skip(res.SkipReason)
				}
				Expect(res).To(MatchItsExpectation())
				if res.Fidelity.Calls > 0 {
					Expect(res).To(BeCapturedExactly())
				}
			}}, entries(string(backend))...)...,
		)
	})
	return true
}

var _ = catalogOn(env.Process, func(SpecContext) {})

var _ = catalogOn(env.Container, func(ctx SpecContext) {
	if ok, why := env.DockerUsable(ctx); !ok {
		if os.Getenv("CI") == "true" {
			Fail("CI=true but no usable container engine: " + why)
		}
		Skip("no usable container engine: " + why)
	}
})
