package reports

import (
	"encoding/xml"
	"fmt"
	"io"
	"time"

	"github.com/capbench/capbench/bench"
)

// benchGates are the pass/fail checks of a bench run: every --slo bound at
// p99 per stage and path, no failed requests, and (when there is capture)
// every proxied call captured exactly and no session masked.
func benchGates(r *bench.Result) []junitCase {
	var cases []junitCase
	add := func(class, name string, ok bool, why string) {
		c := junitCase{Name: name, Classname: class}
		if !ok {
			c.Failure = &junitFailure{Message: why, Text: why}
		}
		cases = append(cases, c)
	}
	slo := r.Config.SLO
	for _, s := range r.Summaries {
		class := "bench." + stageLabel(r, s.Stage) + "." + string(s.Path)
		add(class, "no failed requests", s.Failed == 0, fmt.Sprintf("%d of %d requests failed (%s): %s", s.Failed, s.Requests, errorsText(s.ErrorsByKind), s.FirstError))
		bound := func(metric string, st bench.Stats, b time.Duration) {
			if b <= 0 || st.Count == 0 {
				return
			}
			limit := float64(b) / float64(time.Millisecond)
			add(class, fmt.Sprintf("%s p99 <= %s", metric, b), st.P99 <= limit, fmt.Sprintf("%s p99 %.2f ms exceeds %s", metric, st.P99, b))
		}
		bound("TTFT", s.TTFT, slo.TTFT)
		bound("TPOT", s.TPOT, slo.TPOT)
		bound("E2EL", s.E2EL, slo.E2EL)
	}
	if c := r.Capture; c != nil {
		add("bench.capture", "every proxied call captured", c.CapturedAll, fmt.Sprintf("%d records for %d proxied calls", c.Records, c.ProxiedOK))
		add("bench.capture", "captured tokens match ("+c.FidelityMethod+")", c.FidelityExact == c.FidelityCalls, fmt.Sprintf("%d of %d calls exact", c.FidelityExact, c.FidelityCalls))
	}
	if s := r.Sessions; s != nil {
		add("bench.sessions", "no session masked", s.Masked == 0, fmt.Sprintf("%d of %d sessions masked: %v", s.Masked, s.Count, s.MaskReasons))
	}
	add("bench", "run completed", !r.Interrupted, "the run was interrupted")
	return cases
}

// BenchJUnit writes the gates as JUnit XML (the JUnit types are shared with
// the walkthrough report) and returns how many failed.
func BenchJUnit(w io.Writer, r *bench.Result) (int, error) {
	suite := junitSuite{Name: "capbench bench", Cases: benchGates(r)}
	suite.count()
	doc := junitSuites{Name: "capbench", Tests: suite.Tests, Failures: suite.Failures, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return 0, err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return 0, err
	}
	_, err := io.WriteString(w, "\n")
	return suite.Failures, err
}
