package reports_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/reports"
	"github.com/capbench/capbench/scenarios"
)

func sample() *harness.RunResult {
	r := &harness.RunResult{Schema: harness.ResultSchema, Backend: "inprocess", StartedAt: time.Unix(0, 0).UTC(), WallMS: 1500,
		RolloutsFile: "out/rollouts.jsonl",
		Scenarios: []harness.ScenarioResult{
			{Name: "single-chain/stream", Row: "1", Agent: "openai-chat", Status: harness.StatusPass,
				Expected: scenarios.Expect{Checks: []scenarios.Check{scenarios.Eq("n_calls", 3)}},
				Got: harness.Got{Metrics: map[string]any{"n_calls": 3.0, "chains": 1.0,
					"terminal_attribution": map[string]any{"chain": "delivered", "method": "response_id"}}},
				Fidelity: harness.Fidelity{Checked: true, Calls: 3, Matched: 3, PrefixContiguous: true}},
			{Name: "retry-final-call", Row: "5a", Agent: "openai-chat", Status: harness.StatusFail, Description: "final retry",
				Expected:   scenarios.Expect{MaskSample: true},
				Got:        harness.Got{MaskSample: false, Metrics: map[string]any{"n_calls": 4.0}},
				Mismatches: []string{"mask_sample: want true, got false", "n_calls: want = 3, got 4"},
				Fidelity:   harness.Fidelity{Checked: true, Calls: 4, Matched: 3, Problems: []string{"call x: token 1 is 7, ledger 4"}}},
			{Name: "capture-write-failure", Status: harness.StatusSkip, SkipReason: "store faults need the proxy in this process"},
		}}
	r.Count()
	return r
}

var _ = Describe("the console table", func() {
	It("lists every scenario with expected, got and fidelity, then a summary", func() {
		var b strings.Builder
		Expect(reports.Table(&b, sample())).To(Succeed())
		out := b.String()
		Expect(out).To(ContainSubstring("STATUS"))
		Expect(out).To(MatchRegexp(`PASS\s+single-chain/stream\s+false\s+false\s+exact 3/3`))
		Expect(out).To(MatchRegexp(`FAIL\s+retry-final-call\s+true\s+false\s+BROKEN 3/4\s+\d+\s+mask_sample: want true, got false \(\+1 more\)`))
		Expect(out).To(MatchRegexp(`SKIP\s+capture-write-failure\s+false\s+-\s+n/a`))
		Expect(out).To(ContainSubstring("1 passed, 1 failed, 1 skipped in 1.5s (backend inprocess)"))
	})
})

var _ = Describe("the Markdown report", func() {
	It("has a header, one row per scenario and details for failures and skips", func() {
		var b strings.Builder
		Expect(reports.Markdown(&b, sample())).To(Succeed())
		out := b.String()
		Expect(out).To(HavePrefix("# capbench run\n"))
		Expect(out).To(ContainSubstring("schema: `capbench.run/v1`"))
		Expect(out).To(ContainSubstring("| pass | `single-chain/stream` | 1 | openai-chat | mask=false n_calls=3 |"))
		Expect(out).To(ContainSubstring(`chain="delivered" method=response_id`))
		Expect(out).To(ContainSubstring("### `retry-final-call` — fail"))
		Expect(out).To(ContainSubstring("- n_calls: want = 3, got 4"))
		Expect(out).To(ContainSubstring("Skipped: store faults need the proxy in this process"))
	})

	It("escapes table separators in values", func() {
		r := sample()
		r.Scenarios[0].Got.Metrics["error"] = "a|b"
		r.Scenarios[0].Got.Error = "a|b"
		var b strings.Builder
		Expect(reports.Markdown(&b, r)).To(Succeed())
		Expect(b.String()).To(ContainSubstring(`error="a\|b"`))
	})
})
