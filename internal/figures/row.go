package figures

import (
	"fmt"
	"regexp"
	"strings"
	"text/template"
)

// Kind says what a run is and how its output is read.
type Kind int

const (
	// GoTest runs `go test ARGS` in the checkout; its stdout's benchmark
	// lines are the metrics (Data.Med and friends).
	GoTest Kind = iota + 1
	// CapbenchBench runs `capbench bench ARGS --progress off --out DIR` in a
	// fresh temp dir; DIR/result.json is Data.Result.
	CapbenchBench
	// CapbenchChaos runs `capbench chaos ARGS --json` in a fresh temp dir;
	// its stdout is Data.Chaos.
	CapbenchChaos
	// CapbenchShards starts `capbench fake-vllm FAKE`, runs the bench
	// schedule ARGS against it once as one process (Data.Single) and once as
	// Shards processes started together (--shard I/N --start-at T), and
	// merges those with `capbench merge` (Data.Result).
	CapbenchShards
)

// Run is one command the table quotes. Rows that quote the same command
// share one Run (the same ID): it runs once.
type Run struct {
	// ID names the run's folder of raw outputs; empty: the row's name
	// (with "-2", "-3" for a row's later runs).
	ID   string
	Kind Kind
	// Args follow "go" (GoTest) or "capbench" (the others), exactly as a
	// user would type them; the hidden flags the kind adds are not here.
	// For CapbenchShards they follow `capbench bench --url URL`.
	Args []string
	// Fake and Shards are CapbenchShards' fake-vllm arguments (after
	// `capbench fake-vllm`, without --host/--port) and process count.
	Fake   []string
	Shards int
}

// Row is one line of the README's figures table (docs/figures.md).
type Row struct {
	// Name selects the row (--rows) and names its raw outputs.
	Name string
	// What is the "what" cell (Markdown).
	What string
	// Command overrides the command cell (Markdown); empty: each run's
	// command as a code span, joined by "; ".
	Command string
	// Runs are what the figure is measured by, in order.
	Runs []Run
	// Figure is a text/template over Data producing the figure cell.
	Figure string
	// Static is the figure cell of a row that is not rerun (no Runs): it
	// must say that the row's peer or setup was not rerun, and why.
	Static string
}

var rowName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// check validates one row and resolves its run IDs.
func (r *Row) check() error {
	if !rowName.MatchString(r.Name) {
		return fmt.Errorf("row name %q: use lower-case letters, digits and dashes", r.Name)
	}
	if strings.TrimSpace(r.What) == "" {
		return fmt.Errorf("row %s: What is empty", r.Name)
	}
	switch {
	case len(r.Runs) == 0 && r.Static == "":
		return fmt.Errorf("row %s: neither Runs nor Static", r.Name)
	case len(r.Runs) == 0 && r.Command == "":
		return fmt.Errorf("row %s: a static row needs a Command text", r.Name)
	case len(r.Runs) > 0 && r.Static != "":
		return fmt.Errorf("row %s: both Runs and Static", r.Name)
	case len(r.Runs) > 0 && r.Figure == "":
		return fmt.Errorf("row %s: Runs but no Figure template", r.Name)
	}
	for i := range r.Runs {
		run := &r.Runs[i]
		if run.ID == "" {
			run.ID = r.Name
			if i > 0 {
				run.ID = fmt.Sprintf("%s-%d", r.Name, i+1)
			}
		}
		if !rowName.MatchString(run.ID) {
			return fmt.Errorf("row %s: run ID %q: use lower-case letters, digits and dashes", r.Name, run.ID)
		}
		if run.Kind < GoTest || run.Kind > CapbenchShards {
			return fmt.Errorf("row %s: run %s has no Kind", r.Name, run.ID)
		}
		if run.Kind == CapbenchShards && run.Shards < 2 {
			return fmt.Errorf("row %s: run %s: Shards must be at least 2", r.Name, run.ID)
		}
	}
	if r.Figure != "" {
		if _, err := r.template(); err != nil {
			return fmt.Errorf("row %s: %w", r.Name, err)
		}
	}
	return nil
}

func (r *Row) template() (*template.Template, error) {
	return template.New(r.Name).Funcs(funcs).Option("missingkey=error").Parse(r.Figure)
}

// commandCell is the command column's text.
func (r *Row) commandCell() string {
	if r.Command != "" {
		return r.Command
	}
	var parts []string
	for _, run := range r.Runs {
		parts = append(parts, "`"+run.Shown()+"`")
	}
	return strings.Join(parts, "; ")
}

// Shown is the command as the table prints it.
func (run Run) Shown() string {
	switch run.Kind {
	case GoTest:
		return shellJoin(append([]string{"go"}, run.Args...))
	case CapbenchShards:
		return "capbench bench --url … " + shellJoin(run.Args)
	}
	return shellJoin(append([]string{"capbench"}, run.Args...))
}

// shellJoin quotes what a POSIX shell would otherwise expand or split.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;!#~^") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// CommandText is the command cell without Markdown, for --list.
func (r Row) CommandText() string {
	return strings.ReplaceAll(r.commandCell(), "`", "")
}
