// Package doctor explains what went wrong in a first capture run: it checks
// result rows, capture overlays and vLLM serve flags, docs pages and a
// running stack, and reports each finding with its likely cause and fix in
// plain words (docs/doctor.md). Page parsing lives in doctor/page; the
// checks here work on plain inputs so each can be tested alone.
package doctor

import "slices"

// Severity ranks a finding. Errors fail the check (exit status 1).
type Severity string

// Severities, worst first.
const (
	Error   Severity = "error"
	Warning Severity = "warning"
	Info    Severity = "info"
)

// Finding is one thing the doctor noticed.
type Finding struct {
	// Rule names the check, e.g. "rollouts/no-capture".
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	// File and Line locate it (a page, an overlay); Line 0 means none.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Subject is what it is about: a rollout id, a key path, a flag.
	Subject string `json:"subject,omitempty"`
	// Message says what was found; Cause and Fix say why and what to do.
	Message string `json:"message"`
	Cause   string `json:"cause,omitempty"`
	Fix     string `json:"fix,omitempty"`
}

// Check is one server check and its outcome (passed ones are listed too).
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Report is the result of one doctor command.
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	Kind          string `json:"kind"` // rollouts, config, page, server
	Target        string `json:"target"`
	// Findings are sorted by file, line, then severity.
	Findings  []Finding    `json:"findings"`
	Rollouts  []RolloutRow `json:"rollouts,omitempty"`
	Aggregate *Aggregate   `json:"aggregate,omitempty"`
	Checks    []Check      `json:"checks,omitempty"`
}

// NewReport starts a report.
func NewReport(kind, target string) *Report {
	return &Report{SchemaVersion: 1, Kind: kind, Target: target, Findings: []Finding{}}
}

// Add appends findings.
func (r *Report) Add(fs ...Finding) { r.Findings = append(r.Findings, fs...) }

// Count returns the number of findings of a severity.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// OK reports whether nothing was an error.
func (r *Report) OK() bool { return r.Count(Error) == 0 }

// Sort orders findings by file, line and severity, keeping rule order
// otherwise.
func (r *Report) Sort() {
	rank := map[Severity]int{Error: 0, Warning: 1, Info: 2}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		switch {
		case a.File != b.File:
			if a.File < b.File {
				return -1
			}
			return 1
		case a.Line != b.Line:
			return a.Line - b.Line
		}
		return rank[a.Severity] - rank[b.Severity]
	})
}

// Rules returns the distinct rules of findings at or above sev.
func (r *Report) Rules(sev Severity) []string {
	var out []string
	for _, f := range r.Findings {
		if (f.Severity == Error || f.Severity == sev) && !slices.Contains(out, f.Rule) {
			out = append(out, f.Rule)
		}
	}
	return out
}
