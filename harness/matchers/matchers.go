// Package matchers holds Gomega matchers over scenario results. They read
// naturally in specs (Expect(res).To(BeUnmasked())) and explain a failure
// with the scenario's name, the metric that disagrees and the rollout's
// full `_ng_token_capture` metrics.
package matchers

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/onsi/gomega/types"

	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/scenarios"
)

// resultMatcher is a GomegaMatcher over harness.ScenarioResult.
type resultMatcher struct {
	// check returns "" when the result matches, else what disagrees.
	check func(r harness.ScenarioResult) string
	// desc describes the expectation ("be unmasked").
	desc string
	last string
}

func (m *resultMatcher) Match(actual any) (bool, error) {
	r, err := asResult(actual)
	if err != nil {
		return false, err
	}
	m.last = m.check(r)
	return m.last == "", nil
}

func (m *resultMatcher) FailureMessage(actual any) string {
	r, _ := asResult(actual)
	return fmt.Sprintf("Expected scenario %q to %s, but %s\n%s", r.Name, m.desc, m.last, explain(r))
}

func (m *resultMatcher) NegatedFailureMessage(actual any) string {
	r, _ := asResult(actual)
	return fmt.Sprintf("Expected scenario %q not to %s, but it does\n%s", r.Name, m.desc, explain(r))
}

func asResult(actual any) (harness.ScenarioResult, error) {
	switch r := actual.(type) {
	case harness.ScenarioResult:
		return r, nil
	case *harness.ScenarioResult:
		if r == nil {
			return harness.ScenarioResult{}, fmt.Errorf("matcher got a nil *harness.ScenarioResult")
		}
		return *r, nil
	}
	return harness.ScenarioResult{}, fmt.Errorf("matcher expects a harness.ScenarioResult, got %T", actual)
}

// explain renders the evidence: rollout, mask, metrics, agent error.
func explain(r harness.ScenarioResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  rollout:     %s\n  mask_sample: %t\n", r.Got.RolloutID, r.Got.MaskSample)
	if r.Got.AgentError != "" {
		fmt.Fprintf(&b, "  agent error: %s\n", r.Got.AgentError)
	}
	if r.SkipReason != "" {
		fmt.Fprintf(&b, "  skipped:     %s\n", r.SkipReason)
	}
	metrics, _ := json.Marshal(r.Got.Metrics)
	fmt.Fprintf(&b, "  _ng_token_capture: %s\n", metrics)
	fmt.Fprintf(&b, "  fidelity:    %s", r.Fidelity.Summary())
	for _, p := range r.Fidelity.Problems {
		fmt.Fprintf(&b, "\n    - %s", p)
	}
	return b.String()
}

func metric(r harness.ScenarioResult, path string) (any, bool) {
	return scenarios.MetricAt(r.Got.Metrics, path)
}

// checkMetric builds a matcher from one metric check.
func checkMetric(c scenarios.Check) types.GomegaMatcher {
	return &resultMatcher{desc: "have " + c.String(), check: func(r harness.ScenarioResult) string {
		if got, ok := c.Evaluate(r.Got.Metrics); !ok {
			if _, found := metric(r, c.Path); !found {
				return fmt.Sprintf("metric %s is absent", c.Path)
			}
			return fmt.Sprintf("metric %s is %v", c.Path, got)
		}
		return ""
	}}
}

// BeUnmasked succeeds when the finalized record has no mask_sample.
func BeUnmasked() types.GomegaMatcher {
	return &resultMatcher{desc: "be unmasked", check: func(r harness.ScenarioResult) string {
		if r.Got.MaskSample {
			return "metric mask_sample is true"
		}
		return ""
	}}
}

// BeMasked succeeds when the finalized record has mask_sample true.
func BeMasked() types.GomegaMatcher {
	return &resultMatcher{desc: "be masked", check: func(r harness.ScenarioResult) string {
		if !r.Got.MaskSample {
			return "metric mask_sample is false"
		}
		return ""
	}}
}

// HaveNCalls checks n_calls.
func HaveNCalls(n int) types.GomegaMatcher { return checkMetric(scenarios.Eq("n_calls", n)) }

// HaveChains checks chains.
func HaveChains(n int) types.GomegaMatcher { return checkMetric(scenarios.Eq("chains", n)) }

// HaveRoots checks roots.
func HaveRoots(n int) types.GomegaMatcher { return checkMetric(scenarios.Eq("roots", n)) }

// HaveDeliveredFraction checks delivered_fraction.
func HaveDeliveredFraction(f float64) types.GomegaMatcher {
	return checkMetric(scenarios.Eq("delivered_fraction", f))
}

// HaveTerminalChain checks terminal_attribution.chain.
func HaveTerminalChain(chain string) types.GomegaMatcher {
	return checkMetric(scenarios.Eq("terminal_attribution.chain", chain))
}

// HaveMetric checks any metric path against a Check built by the scenarios
// helpers (scenarios.Eq, scenarios.Less, ...).
func HaveMetric(c scenarios.Check) types.GomegaMatcher { return checkMetric(c) }

// BeCapturedExactly succeeds when every captured call equals the fake's
// ledger bit for bit and the rebuilt response is prefix-contiguous.
func BeCapturedExactly() types.GomegaMatcher {
	return &resultMatcher{desc: "be captured exactly", check: func(r harness.ScenarioResult) string {
		f := r.Fidelity
		switch {
		case !f.Checked:
			return "fidelity was not checked: " + f.Reason
		case !f.OK():
			return fmt.Sprintf("fidelity matched %d of %d calls (prefix contiguous: %t)", f.Matched, f.Calls, f.PrefixContiguous)
		}
		return ""
	}}
}

// HaveVerdict succeeds when the result agrees with want in every respect
// (mask_sample, every metric check, the agent error).
func HaveVerdict(want scenarios.Expect) types.GomegaMatcher {
	return &resultMatcher{desc: "reach its expected verdict", check: func(r harness.ScenarioResult) string {
		if m := harness.Compare(want, r.Got); len(m) > 0 {
			return "metric " + strings.Join(m, "; metric ")
		}
		return ""
	}}
}

// MatchItsExpectation is HaveVerdict with the scenario's own expectation,
// plus a run that did not fail for another reason (environment, records).
func MatchItsExpectation() types.GomegaMatcher {
	return &resultMatcher{desc: "reach its expected verdict", check: func(r harness.ScenarioResult) string {
		if r.Status == harness.StatusSkip {
			return "it was skipped: " + r.SkipReason
		}
		if m := harness.Compare(r.Expected, r.Got); len(m) > 0 {
			return "metric " + strings.Join(m, "; metric ")
		}
		if r.Status == harness.StatusFail {
			return strings.Join(r.Mismatches, "; ")
		}
		return ""
	}}
}
