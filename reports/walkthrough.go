package reports

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/capbench/capbench/walkthrough"
)

// WalkthroughText writes one line per step and mistake for a terminal.
func WalkthroughText(w io.Writer, r *walkthrough.Result) error {
	fmt.Fprintf(w, "walkthrough %s (GPU: %s)\n\nsteps:\n", r.Page, orDash(r.GPU))
	for _, s := range r.Steps {
		fmt.Fprintf(w, "  %-4s %s%s: %s\n", strings.ToUpper(string(s.Status)), s.Name, lineSuffix(s.Line), oneLine(s.Detail))
	}
	fmt.Fprintln(w, "\ndocumented mistakes (each must show its symptom):")
	for _, m := range r.Mistakes {
		on := ""
		if m.OnPage {
			on = " [the page makes this mistake]"
		}
		fmt.Fprintf(w, "  %-4s %s%s: %s\n", strings.ToUpper(string(m.Status)), m.Name, on, oneLine(m.Detail))
	}
	verdict := "PASSED"
	if !r.OK() {
		verdict = "FAILED"
	}
	_, err := fmt.Fprintf(w, "\n%s: %d broken step(s), %d mistake(s) without their symptom\n", verdict, len(r.BrokenSteps()), len(r.UndetectedMistakes()))
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func lineSuffix(line int) string {
	if line <= 0 {
		return ""
	}
	return fmt.Sprintf(" (line %d)", line)
}

// WalkthroughMarkdown writes the report a docs CI job attaches.
func WalkthroughMarkdown(w io.Writer, r *walkthrough.Result) error {
	verdict := "passed"
	if !r.OK() {
		verdict = "failed"
	}
	fmt.Fprintf(w, "# Walkthrough `%s`: %s\n\nGPU: %s\n\n## Steps\n\n| step | line | result | what happened |\n|---|---|---|---|\n", r.Page, verdict, orDash(r.GPU))
	for _, s := range r.Steps {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", mdCell(s.Name), lineCell(s.Line), s.Status, mdCell(s.Detail))
	}
	fmt.Fprint(w, "\n## Documented mistakes\n\nEach mistake is applied to the page in turn; it passes when its symptom shows.\n\n| mistake | on the page | applied | expected symptom | result | seen |\n|---|---|---|---|---|---|\n")
	for _, m := range r.Mistakes {
		fmt.Fprintf(w, "| %s | %t | %s | %s | %s | %s |\n", mdCell(m.Name), m.OnPage, mdCell(m.Applied), mdCell(m.Symptom), m.Status, mdCell(m.Detail))
	}
	if len(r.Findings) > 0 {
		fmt.Fprint(w, "\n## doctor page findings\n\n| line | severity | rule | finding | fix |\n|---|---|---|---|---|\n")
		for _, f := range r.Findings {
			fmt.Fprintf(w, "| %s | %s | `%s` | %s | %s |\n", lineCell(f.Line), f.Severity, f.Rule, mdCell(f.Message), mdCell(f.Fix))
		}
	}
	return nil
}

func lineCell(l int) string {
	if l <= 0 {
		return ""
	}
	return fmt.Sprint(l)
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

func junitCaseFor(class, name string, status walkthrough.Status, detail string) junitCase {
	c := junitCase{Name: name, Classname: class}
	switch status {
	case walkthrough.Fail:
		c.Failure = &junitFailure{Message: oneLine(detail), Text: detail}
	case walkthrough.Skip:
		c.Skipped = &junitSkipped{Message: detail}
	default:
		c.SystemOut = detail
	}
	return c
}

func (s *junitSuite) count() {
	s.Tests = len(s.Cases)
	for _, c := range s.Cases {
		if c.Failure != nil {
			s.Failures++
		}
		if c.Skipped != nil {
			s.Skipped++
		}
	}
}

// WalkthroughJUnit writes JUnit XML: one suite for the page's steps, one
// for the documented mistakes.
func WalkthroughJUnit(w io.Writer, r *walkthrough.Result) error {
	steps := junitSuite{Name: "walkthrough steps: " + r.Page}
	for _, s := range r.Steps {
		name := s.Name
		if s.Line > 0 {
			name = fmt.Sprintf("%s (line %d)", s.Name, s.Line)
		}
		steps.Cases = append(steps.Cases, junitCaseFor("walkthrough.steps", name, s.Status, s.Detail))
	}
	mistakes := junitSuite{Name: "walkthrough mistakes: " + r.Page}
	for _, m := range r.Mistakes {
		detail := "expected: " + m.Symptom + "\nseen: " + m.Detail
		mistakes.Cases = append(mistakes.Cases, junitCaseFor("walkthrough.mistakes", m.Name, m.Status, detail))
	}
	steps.count()
	mistakes.count()
	all := junitSuites{Name: "capbench walkthrough", Suites: []junitSuite{steps, mistakes}}
	for _, s := range all.Suites {
		all.Tests += s.Tests
		all.Failures += s.Failures
		all.Skipped += s.Skipped
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(all); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// WalkthroughJSON writes the result as one JSON object.
func WalkthroughJSON(w io.Writer, r *walkthrough.Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WalkthroughRollouts writes the page run's rows, one JSON object a line.
func WalkthroughRollouts(w io.Writer, r *walkthrough.Result) error {
	enc := json.NewEncoder(w)
	for _, row := range r.Rows {
		if err := enc.Encode(row); err != nil {
			return err
		}
	}
	return nil
}
