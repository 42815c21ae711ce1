package reports_test

import (
	"strings"
	"time"
	"unicode/utf8"

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

	It("writes expectations readably: symbolic checks tight, word checks spaced, strings quoted", func() {
		r := sample()
		r.Scenarios[0].Expected.Checks = []scenarios.Check{
			scenarios.Eq("n_calls", 3),
			scenarios.Eq("terminal_attribution.chain", ""),
			scenarios.Absent("capture_incomplete"),
			scenarios.OneOf("terminal_attribution.method", "content_output", "content_cumulative"),
		}
		Expect(reports.Expected(r.Scenarios[0])).To(Equal(
			`mask=false n_calls=3 terminal_attribution.chain="" capture_incomplete absent terminal_attribution.method in [content_output content_cumulative]`))
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

var _ = Describe("long and multi-line notes", func() {
	It("cut a long note on a character boundary and keep each row on one line", func() {
		r := sample()
		// 108 ASCII bytes then multi-byte runes: a byte cut at 109 would
		// split the first "é".
		r.Scenarios[1].Mismatches = []string{strings.Repeat("x", 108) + strings.Repeat("é", 20)}
		r.Scenarios[2].SkipReason = "line one\nline\ttwo"
		var b strings.Builder
		Expect(reports.Table(&b, r)).To(Succeed())
		out := b.String()
		Expect(utf8.ValidString(out)).To(BeTrue(), out)
		Expect(out).To(ContainSubstring(strings.Repeat("x", 108) + "é…"))
		Expect(out).To(ContainSubstring("line one line two"))
		var rows []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "PASS") || strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "SKIP") {
				rows = append(rows, l)
			}
		}
		Expect(rows).To(HaveLen(3))
	})

	It("keep a Markdown detail line on one line whatever the line endings", func() {
		r := sample()
		r.Scenarios[1].Got.AgentError = "first\r\nsecond\rthird"
		var b strings.Builder
		Expect(reports.Markdown(&b, r)).To(Succeed())
		Expect(b.String()).To(ContainSubstring("- agent error: first second third\n"))
		Expect(b.String()).NotTo(ContainSubstring("\r"))
	})
})

var _ = Describe("the start time", func() {
	It("is printed in UTC, as labelled, whatever zone the result carries", func() {
		r := sample()
		r.StartedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("UTC+2", 2*3600))
		var b strings.Builder
		Expect(reports.Markdown(&b, r)).To(Succeed())
		Expect(b.String()).To(ContainSubstring("- started: 2026-01-02 01:04:05 UTC\n"))
	})
})
