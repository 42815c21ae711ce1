package reports

import (
	"fmt"
	"io"
	"strings"

	"github.com/capbench/capbench/scenarios"
)

// listWidth bounds a `--list` line, so the short list fits a terminal.
const listWidth = 120

// CatalogList renders the scenario catalog: one aligned line per scenario
// with its row of docs/scenarios.md and its description cut to fit, or with
// verbose the full description
// wrapped under each name with its agent, server and expectation. The rows
// are described in docs/scenarios.md.
func CatalogList(w io.Writer, scs []scenarios.Scenario, verbose bool) error {
	width, rowWidth := 0, len("ROW")
	for _, s := range scs {
		width = max(width, len(s.Name))
		rowWidth = max(rowWidth, len(s.Row))
	}
	var b strings.Builder
	if !verbose {
		fmt.Fprintf(&b, "%-*s  %-*s  %s\n", width, "SCENARIO", rowWidth, "ROW", "DESCRIPTION (rows: docs/scenarios.md)")
	}
	for _, s := range scs {
		if verbose {
			fmt.Fprintf(&b, "%s (row %s of docs/scenarios.md)\n", s.Name, orDash(string(s.Row)))
			for _, line := range wrap(s.Description, listWidth-4) {
				fmt.Fprintf(&b, "    %s\n", line)
			}
			fmt.Fprintf(&b, "    agent %s, expects mask=%v\n\n", s.Agent, s.Expect.MaskSample)
			continue
		}
		fmt.Fprintf(&b, "%-*s  %-*s  %s\n", width, s.Name, rowWidth, orDash(string(s.Row)), cut(s.Description, listWidth-width-rowWidth-4))
	}
	if !verbose {
		fmt.Fprintf(&b, "\n%d scenarios; `capbench run --list -v` prints the full descriptions.\n", len(scs))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cut shortens s to n runes at a word boundary, marking the cut with "…".
func cut(s string, n int) string {
	r := []rune(s)
	if n < 10 || len(r) <= n {
		return s
	}
	t := string(r[:n-1])
	if i := strings.LastIndexByte(t, ' '); i > n/2 {
		t = t[:i]
	}
	return strings.TrimRight(t, " ,;:") + "…"
}

// wrap breaks s into lines of at most n bytes at spaces.
func wrap(s string, n int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > n {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
