// Package reports renders run results (package harness's plain data) as a
// console table and a Markdown report. It only reads results.
package reports

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/scenarios"
)

// Expected renders a scenario's expectation in one short line.
func Expected(s harness.ScenarioResult) string {
	parts := []string{"mask=" + fmt.Sprint(s.Expected.MaskSample)}
	for _, c := range s.Expected.Checks {
		parts = append(parts, checkText(c))
	}
	return strings.Join(parts, " ")
}

// GotLine renders the observed verdict with the metrics that matter.
func GotLine(s harness.ScenarioResult) string {
	if s.Status == harness.StatusSkip {
		return "skipped"
	}
	parts := []string{"mask=" + fmt.Sprint(s.Got.MaskSample)}
	m := s.Got.Metrics
	for _, k := range []string{"n_calls", "chains", "roots", "quarantined_calls", "delivered_fraction", "unresolved_parent_calls"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	if ta, ok := m["terminal_attribution"].(map[string]any); ok {
		parts = append(parts, fmt.Sprintf("chain=%q method=%v", ta["chain"], ta["method"]))
	}
	if v, ok := m["capture_incomplete"]; ok {
		parts = append(parts, fmt.Sprintf("capture_incomplete=%v", v))
	}
	if s.Got.Error != "" {
		parts = append(parts, fmt.Sprintf("error=%q", s.Got.Error))
	}
	return strings.Join(parts, " ")
}

// oneLine keeps a console row on one line: a note may carry an agent's
// multi-line error text, and a tab would shift the table's columns.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ").Replace(s)
}

// checkText writes symbolic checks tight ("n_calls=3", `chain=""`) and word
// checks spaced ("capture_incomplete absent", "method in [a b]").
func checkText(c scenarios.Check) string {
	switch c.Op {
	case scenarios.OpEq, scenarios.OpLess, scenarios.OpAtLeast:
		if s, ok := c.Value.(string); ok {
			return fmt.Sprintf("%s%s%q", c.Path, c.Op, s)
		}
		return fmt.Sprintf("%s%s%v", c.Path, c.Op, c.Value)
	}
	return c.String()
}

// Table writes the summary table (scenario, expected, got, fidelity).
func Table(w io.Writer, r *harness.RunResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tSCENARIO\tEXPECTED MASK\tGOT MASK\tFIDELITY\tMS\tNOTES")
	for _, s := range r.Scenarios {
		note := ""
		switch {
		case s.Status == harness.StatusSkip:
			note = s.SkipReason
		case len(s.Mismatches) > 0:
			note = s.Mismatches[0]
			if len(s.Mismatches) > 1 {
				note += fmt.Sprintf(" (+%d more)", len(s.Mismatches)-1)
			}
		default:
			note = GotLine(s)
		}
		got := fmt.Sprint(s.Got.MaskSample)
		if s.Status == harness.StatusSkip {
			got = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%.0f\t%s\n", strings.ToUpper(string(s.Status)), s.Name,
			s.Expected.MaskSample, got, s.Fidelity.Summary(), s.Timings.TotalMS, truncate(oneLine(note), 110))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped in %.1fs (backend %s)\n",
		r.Passed, r.Failed, r.Skipped, r.WallMS/1000, r.Backend)
	return err
}

// truncate shortens s to at most n runes; cutting by bytes could split a
// multi-byte character (mismatch texts quote agent output) and leave the
// report invalid UTF-8.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Markdown writes a readable report.
func Markdown(w io.Writer, r *harness.RunResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# capbench run\n\n")
	fmt.Fprintf(&b, "- schema: `%s`\n- backend: `%s`\n- started: %s\n- wall time: %.1f s\n",
		r.Schema, r.Backend, r.StartedAt.UTC().Format("2006-01-02 15:04:05 UTC"), r.WallMS/1000)
	if r.RolloutsFile != "" {
		fmt.Fprintf(&b, "- records: `%s`\n", r.RolloutsFile)
	}
	fmt.Fprintf(&b, "- result: **%d passed, %d failed, %d skipped**\n\n", r.Passed, r.Failed, r.Skipped)
	b.WriteString("| status | scenario | row | agent | expected | got | fidelity |\n|---|---|---|---|---|---|---|\n")
	for _, s := range r.Scenarios {
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s | %s | %s |\n", statusIcon(s.Status), s.Name, s.Row, s.Agent,
			mdEscape(Expected(s)), mdEscape(GotLine(s)), s.Fidelity.Summary())
	}
	failed := make([]harness.ScenarioResult, 0)
	for _, s := range r.Scenarios {
		if s.Status != harness.StatusPass {
			failed = append(failed, s)
		}
	}
	sort.SliceStable(failed, func(i, j int) bool { return failed[i].Status < failed[j].Status })
	if len(failed) > 0 {
		b.WriteString("\n## Details\n")
	}
	for _, s := range failed {
		fmt.Fprintf(&b, "\n### `%s` — %s\n\n%s\n\n", s.Name, s.Status, s.Description)
		if s.SkipReason != "" {
			fmt.Fprintf(&b, "Skipped: %s\n", s.SkipReason)
		}
		for _, m := range s.Mismatches {
			fmt.Fprintf(&b, "- %s\n", mdEscape(m))
		}
		if s.Got.AgentError != "" {
			fmt.Fprintf(&b, "- agent error: %s\n", mdEscape(s.Got.AgentError))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func statusIcon(s harness.Status) string {
	switch s {
	case harness.StatusPass:
		return "pass"
	case harness.StatusFail:
		return "**FAIL**"
	}
	return "skip"
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}
