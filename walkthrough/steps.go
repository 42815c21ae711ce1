package walkthrough

import (
	"context"
	"fmt"
	"strings"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/doctor/page"
)

// overlayText returns the shown YAML blocks by name.
func (w *walker) overlayText() map[string]string {
	out := map[string]string{}
	for name, ob := range w.st.Overlays {
		out[name] = ob.Block.Text
	}
	return out
}

func baseName(s string) string { return s[strings.LastIndex(s, "/")+1:] }

// captureFlags says, for the given overlay contents, whether the servers
// capture (an overlay given to `gym env start` turns capture on and opts
// the agent in) and whether the collector finalizes (one reached `gym eval
// run`). `gym eval run` without --no-serve starts the servers itself.
func (w *walker) captureFlags(texts map[string]string) (server, collector bool) {
	on := func(cmd *page.Command) bool {
		if cmd == nil {
			return false
		}
		names, _ := cmd.Flag("config")
		for _, n := range names {
			for shown, text := range texts {
				if baseName(shown) != baseName(n) {
					continue
				}
				ov, _ := doctor.CheckOverlay([]byte(text), doctor.ConfigOptions{ForGymCommand: true})
				if ov.Capture && ov.OptedIn {
					return true
				}
			}
		}
		return false
	}
	collector = on(w.st.EvalRun)
	server = on(w.st.EnvStart)
	if w.st.EvalRun != nil && !w.st.EvalRun.Has("no-serve") {
		server = server || collector
	}
	if w.o.ProxyURL != "" {
		server = true // someone else's model server: its own settings decide
	}
	return server, collector
}

func (w *walker) serveLine() int {
	if w.st.ServeCmd != nil {
		return w.st.ServeCmd.Line
	}
	return 0
}

// pageRun runs the page as written and records each step.
func (w *walker) pageRun(ctx context.Context) error {
	base := w.baseline()
	out, err := run(ctx, base, w.work)
	if err != nil {
		return err
	}
	if se := out.refusal(); se != nil {
		fix := doctor.FittingMaxModelLen(base.Serve, base.GPUBytes)
		detail := fmt.Sprintf("vLLM refuses to start on %s: %s: %s", w.gpuLabel(), se.Exception, se.Message)
		if fix == "" {
			w.step("Serve the policy (vllm serve)", w.serveLine(), Fail, detail)
			return nil
		}
		w.step("Serve the policy (vllm serve)", w.serveLine(), Fail, detail+fmt.Sprintf(" (the later steps run with --max-model-len %s)", fix))
		base.Serve.MaxModelLen = fix
		if out, err = run(ctx, base, w.work); err != nil {
			return err
		}
	} else if w.external() {
		w.step("Serve the policy (vllm serve)", w.serveLine(), Pass, "running servers: "+w.o.VLLMURL+" "+w.o.ProxyURL)
	} else {
		w.step("Serve the policy (vllm serve)", w.serveLine(), Pass, fmt.Sprintf("the fake vLLM started with the page's flags on %s", w.gpuLabel()))
	}
	w.res.Rows = out.Rows
	if err := w.toolStep(ctx, base); err != nil {
		return err
	}
	w.overlayStep()
	w.serversStep(base, out)
	w.collectStep(base, out)
	return w.jqStep(out)
}

func (w *walker) gpuLabel() string {
	if w.st.GPULabel != "" {
		return w.st.GPULabel
	}
	return "no GPU memory model (the page names no GPU)"
}

func (w *walker) toolStep(ctx context.Context, base setup) error {
	name := "Tool calling (a Bash tool round trip)"
	if w.external() {
		w.step(name, w.serveLine(), Skip, "needs the scripted fake vLLM")
		return nil
	}
	t := base
	t.Tools, t.Rollouts = true, 1
	out, err := run(ctx, t, w.work)
	if err != nil {
		return err
	}
	if maxCalls(out.Calls) >= 2 && len(out.AgentErrs) == 0 {
		w.step(name, w.serveLine(), Pass, fmt.Sprintf("the harness ran the tool: %d model calls", maxCalls(out.Calls)))
		return nil
	}
	w.step(name, w.serveLine(), Fail, "one call per rollout, the harness never ran a tool"+agentErrText(out))
	return nil
}

func maxCalls(calls []int) int {
	m := 0
	for _, c := range calls {
		m = max(m, c)
	}
	return m
}

func agentErrText(out *outcome) string {
	if len(out.AgentErrs) == 0 {
		return ""
	}
	return ": " + out.AgentErrs[0]
}

func (w *walker) overlayStep() {
	name := "Capture overlay"
	if len(w.st.Overlays) == 0 {
		w.step(name, 0, Fail, "the page shows no overlay")
		return
	}
	line := 1 << 30
	for _, ob := range w.st.Overlays {
		line = min(line, ob.Block.Line)
	}
	var bad []string
	for _, f := range w.res.Findings {
		if f.Severity == doctor.Error && strings.HasPrefix(f.Rule, "config/") {
			bad = append(bad, fmt.Sprintf("line %d: %s", f.Line, f.Message))
		}
	}
	if len(bad) > 0 {
		w.step(name, line, Fail, strings.Join(bad, "; "))
		return
	}
	w.step(name, line, Pass, "valid for Gym's startup validation")
}

func cmdLine(c *page.Command) int {
	if c == nil {
		return 0
	}
	return c.Line
}

func (w *walker) serversStep(base setup, out *outcome) {
	name := "Start the servers (gym env start)"
	switch {
	case !base.ServerCapture:
		w.step(name, cmdLine(w.st.EnvStart), Fail, fmt.Sprintf("the servers capture nothing: no overlay given to them turns capture on for the agent (%d records)", out.Records))
	case out.Records == 0:
		w.step(name, cmdLine(w.st.EnvStart), Fail, "the servers were given the overlay but recorded no calls"+agentErrText(out))
	default:
		w.step(name, cmdLine(w.st.EnvStart), Pass, fmt.Sprintf("the model server recorded %d call(s)", out.Records))
	}
}

func hasCapture(r map[string]any) bool { _, ok := r["_ng_token_capture"]; return ok }

func (w *walker) collectStep(base setup, out *outcome) {
	name := "Collect rollouts (gym eval run)"
	with := 0
	for _, r := range out.Rows {
		if hasCapture(r) {
			with++
		}
	}
	switch {
	case len(out.Rows) == 0:
		w.step(name, cmdLine(w.st.EvalRun), Fail, "no rows were written")
	case !base.CollectorCapture:
		w.step(name, cmdLine(w.st.EvalRun), Fail, fmt.Sprintf("text-only rollouts: %d of %d rows lack _ng_token_capture (the collector was not given the overlay; the model server holds %d records)", len(out.Rows)-with, len(out.Rows), out.Records))
	case with < len(out.Rows):
		w.step(name, cmdLine(w.st.EvalRun), Fail, fmt.Sprintf("%d of %d rows lack _ng_token_capture", len(out.Rows)-with, len(out.Rows)))
	default:
		w.step(name, cmdLine(w.st.EvalRun), Pass, fmt.Sprintf("%d rows finalized with _ng_token_capture", len(out.Rows)))
	}
}

func (w *walker) jqStep(out *outcome) error {
	name := "Check the rows (jq)"
	if len(w.st.JQ) == 0 {
		w.step(name, 0, Fail, "the page has no jq check")
		return nil
	}
	jq := w.st.JQ[0]
	outcome, documented := w.st.Outcome, "the page's documented outcome"
	if outcome == nil {
		outcome, documented = defaultOutcome(), "the walkthrough's healthy row (the page states none)"
	}
	vals, err := evalJQ(jq.Filter, out.Rows)
	if err != nil {
		w.step(name, jq.Line, Fail, err.Error())
		return nil
	}
	w.res.JQOutput = vals
	var bad []string
	for i, vs := range vals {
		if len(vs) == 0 {
			bad = append(bad, fmt.Sprintf("row %d: the filter printed nothing", i+1))
		}
		for _, v := range vs {
			if diff := checkOutcome(outcome, v); len(diff) > 0 {
				bad = append(bad, fmt.Sprintf("row %d: %s", i+1, strings.Join(diff, ", ")))
			}
		}
	}
	if len(out.Rows) == 0 {
		bad = append(bad, "no rows")
	}
	if len(bad) > 0 {
		w.step(name, jq.Line, Fail, "not "+documented+": "+strings.Join(bad, "; "))
		return nil
	}
	w.step(name, jq.Line, Pass, fmt.Sprintf("every row (%d) matches %s", len(out.Rows), documented))
	return nil
}
