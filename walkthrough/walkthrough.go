// Package walkthrough runs a docs walkthrough page end to end on the
// embedded default: the fake vLLM started with the page's own `vllm serve`
// flags on the page's GPU, the capture proxy with the overlay's settings, a
// Claude-Code-like agent, and the collector honouring whether the overlay
// reached `gym eval run`; then the page's jq check (gojq) against its
// documented outcome, and each documented mistake applied in turn with its
// symptom asserted (docs/walkthrough.md). Pages are read by doctor/page and
// their steps found by doctor.
package walkthrough

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/doctor/page"
	"github.com/capbench/capbench/scenarios/agent"
)

//go:embed builtin/claude-code-first-run.md
var builtinPage []byte

// BuiltinName names the embedded walkthrough page in reports.
const BuiltinName = "builtin:claude-code-first-run.md"

// Options configure a walkthrough run.
type Options struct {
	// Page is the page's path; empty runs the built-in walkthrough.
	Page string
	// GPU overrides the GPU the page names (a size or a GPU name).
	GPU string
	// VLLMURL and ProxyURL run against real servers (with CaptureDir, the
	// directory ProxyURL writes); mistakes that need a restarted server are
	// then skipped.
	VLLMURL, ProxyURL, CaptureDir string
	// Rollouts per run (default 2).
	Rollouts int
	// WorkDir holds the runs' capture directories (default: a temp dir,
	// removed afterwards).
	WorkDir string
}

// Status of a step or a mistake.
type Status string

// Statuses.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Step is one documented step and what running it showed.
type Step struct {
	Name   string `json:"name"`
	Line   int    `json:"line,omitempty"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// Mistake is one documented mistake applied to the page and whether its
// symptom showed.
type Mistake struct {
	Name string `json:"name"`
	// Applied says what was changed; OnPage is true when the page already
	// makes this mistake.
	Applied string `json:"applied"`
	OnPage  bool   `json:"on_page"`
	// Symptom is the documented symptom; Status pass means it was seen.
	Symptom string `json:"symptom"`
	Status  Status `json:"status"`
	Detail  string `json:"detail"`
}

// Result is a whole walkthrough run, as plain data for reports/.
type Result struct {
	SchemaVersion int              `json:"schema_version"`
	Page          string           `json:"page"`
	GPU           string           `json:"gpu"`
	Steps         []Step           `json:"steps"`
	Mistakes      []Mistake        `json:"mistakes"`
	Findings      []doctor.Finding `json:"doctor_findings"`
	Rows          []map[string]any `json:"-"`
	JQOutput      [][]any          `json:"jq_output,omitempty"`
}

// OK reports whether every step passed and every mistake showed its symptom.
func (r *Result) OK() bool { return len(r.BrokenSteps()) == 0 && len(r.UndetectedMistakes()) == 0 }

// BrokenSteps names the steps that failed.
func (r *Result) BrokenSteps() []string {
	var out []string
	for _, s := range r.Steps {
		if s.Status == Fail {
			out = append(out, s.Name)
		}
	}
	return out
}

// UndetectedMistakes names the mistakes whose symptom did not show.
func (r *Result) UndetectedMistakes() []string {
	var out []string
	for _, m := range r.Mistakes {
		if m.Status == Fail {
			out = append(out, m.Name)
		}
	}
	return out
}

// ErrNotRunnable means the page lacks a step the walkthrough needs.
var ErrNotRunnable = errors.New("page cannot be run")

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Run runs the walkthrough.
func Run(ctx context.Context, o Options) (*Result, error) {
	p, name, err := readPage(o.Page)
	if err != nil {
		return nil, err
	}
	if o.Rollouts <= 0 {
		o.Rollouts = 2
	}
	work := o.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "capbench-walkthrough-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(work)
	}
	rep, st, err := doctor.CheckPage(p, o.GPU)
	if err != nil {
		return nil, err
	}
	if st.Serve == nil && o.VLLMURL == "" {
		return nil, fmt.Errorf("%w: %s has no `vllm serve` command", ErrNotRunnable, name)
	}
	w := &walker{o: o, st: st, work: work, res: &Result{SchemaVersion: 1, Page: name, GPU: st.GPULabel, Findings: rep.Findings}}
	if err := w.pageRun(ctx); err != nil {
		return nil, err
	}
	if err := w.mistakes(ctx); err != nil {
		return nil, err
	}
	return w.res, nil
}

func readPage(path string) (*page.Page, string, error) {
	if path == "" {
		return page.Parse(BuiltinName, builtinPage), BuiltinName, nil
	}
	p, err := page.Read(path)
	if err != nil {
		return nil, "", err
	}
	return p, path, nil
}

// BuiltinPage returns the embedded walkthrough page.
func BuiltinPage(w io.Writer) error {
	_, err := w.Write(builtinPage)
	return err
}

type walker struct {
	o    Options
	st   *doctor.Steps
	work string
	res  *Result
}

func (w *walker) step(name string, line int, status Status, detail string) {
	w.res.Steps = append(w.res.Steps, Step{Name: name, Line: line, Status: status, Detail: detail})
}

// baseline is the page as written.
func (w *walker) baseline() setup {
	s := setup{Agent: agent.ClaudeCode, Rollouts: w.o.Rollouts, VLLMURL: w.o.VLLMURL, ProxyURL: w.o.ProxyURL, CaptureDir: w.o.CaptureDir}
	if w.st.Serve != nil {
		s.Serve = *w.st.Serve
	}
	s.GPUBytes = w.st.GPUBytes
	s.ServerCapture, s.CollectorCapture = w.captureFlags(w.overlayText())
	return s
}

func (w *walker) external() bool { return w.o.VLLMURL != "" || w.o.ProxyURL != "" }
