package walkthrough

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/scenarios/agent"
)

// mistake is one documented mistake: how to apply it to a correct setup
// and how its symptom shows.
type mistake struct {
	name, applied, symptom string
	// onPage reports whether the page as written already makes it.
	onPage func(w *walker, base setup) bool
	// needsFake marks mistakes that restart the model server; needsOwnProxy
	// those that switch the servers' capture off.
	needsFake, needsOwnProxy bool
	apply                    func(w *walker, s setup) setup
	detect                   func(out *outcome) (bool, string)
}

func mistakes() []mistake {
	return []mistake{
		{
			name: "no --max-model-len on a 48 GB GPU", applied: "--max-model-len removed, 48GiB GPU",
			symptom: "vLLM refuses to start: the model's default context needs more KV cache than the GPU has", needsFake: true,
			onPage: func(w *walker, b setup) bool { return b.Serve.MaxModelLen == "" },
			apply: func(_ *walker, s setup) setup {
				s.Serve.MaxModelLen, s.GPUBytes = "", 48*gpu.GiB
				return s
			},
			detect: func(out *outcome) (bool, string) {
				se := out.refusal()
				if se == nil {
					return false, fmt.Sprintf("vLLM started (%d rows)", len(out.Rows))
				}
				return errors.Is(se, gpu.ErrKVCacheTooSmall), se.Exception + ": " + se.Message
			},
		},
		{
			name: "overlay given only to gym env start", applied: "--config dropped from gym eval run --no-serve",
			symptom: "text-only rollouts: no _ng_token_capture, no mask_sample, although the model server recorded the calls",
			onPage:  func(w *walker, b setup) bool { return b.ServerCapture && !b.CollectorCapture },
			apply: func(_ *walker, s setup) setup {
				s.CollectorCapture = false
				return s
			},
			detect: func(out *outcome) (bool, string) {
				n := 0
				for _, r := range out.Rows {
					if _, m := r["mask_sample"]; hasCapture(r) || m {
						n++
					}
				}
				return len(out.Rows) > 0 && n == 0 && out.Records > 0,
					fmt.Sprintf("%d of %d rows carry capture fields; the capture directory holds %d records", n, len(out.Rows), out.Records)
			},
		},
		{
			name: "--tool-call-parser without --enable-auto-tool-choice", applied: "--enable-auto-tool-choice removed; a task that needs a Bash tool",
			symptom: "one call per rollout: the harness never runs a tool", needsFake: true,
			onPage: func(w *walker, b setup) bool { return !b.Serve.EnableAutoToolChoice },
			apply: func(_ *walker, s setup) setup {
				s.Serve.EnableAutoToolChoice, s.Tools = false, true
				if s.Serve.ToolCallParser == "" {
					s.Serve.ToolCallParser = "hermes"
				}
				return s
			},
			detect: func(out *outcome) (bool, string) {
				m := maxCalls(out.Calls)
				return len(out.Calls) > 0 && m <= 1, fmt.Sprintf("at most %d model call(s) per rollout%s", m, agentErrText(out))
			},
		},
		{
			name: "harness URL without the training-token-capture segment", applied: "a custom harness that builds /ng-rollout/<id>/v1/... itself",
			symptom: "calls are served but not captured: no records, the row says capture contains no token records",
			onPage:  func(*walker, setup) bool { return false },
			apply: func(_ *walker, s setup) setup {
				s.Agent = agent.Custom
				return s
			},
			detect: func(out *outcome) (bool, string) {
				noRecords := 0
				for _, r := range out.Rows {
					if m, ok := r["_ng_token_capture"].(map[string]any); ok {
						if e, _ := m["error"].(string); strings.Contains(e, "no token records") {
							noRecords++
						}
					}
				}
				return len(out.Rows) > 0 && out.Records == 0 && len(out.AgentErrs) == 0 && noRecords == len(out.Rows),
					fmt.Sprintf("%d records captured; %d of %d rows say \"capture contains no token records\"%s", out.Records, noRecords, len(out.Rows), agentErrText(out))
			},
		},
		{
			name: "NeMo RL env.nemo_gym nesting as the overlay", applied: "the overlay's keys nested under env.nemo_gym",
			symptom: "capture off and nothing errors: no records, no _ng_token_capture", needsOwnProxy: true,
			onPage: func(w *walker, b setup) bool {
				for _, ob := range w.st.Overlays {
					if ob.Overlay.Nested && !ob.Overlay.Capture {
						return !b.ServerCapture
					}
				}
				return false
			},
			apply: func(w *walker, s setup) setup {
				texts := w.overlayText()
				for k, v := range texts {
					texts[k] = nestUnderNemoGym(v)
				}
				s.ServerCapture, s.CollectorCapture = w.captureFlags(texts)
				return s
			},
			detect: func(out *outcome) (bool, string) {
				n := 0
				for _, r := range out.Rows {
					if hasCapture(r) {
						n++
					}
				}
				return len(out.Rows) > 0 && out.Records == 0 && n == 0 && len(out.AgentErrs) == 0,
					fmt.Sprintf("%d records, %d of %d rows with _ng_token_capture%s", out.Records, n, len(out.Rows), agentErrText(out))
			},
		},
	}
}

// nestUnderNemoGym indents a Gym overlay under env.nemo_gym, as a NeMo RL
// config holds it.
func nestUnderNemoGym(src string) string {
	var b strings.Builder
	b.WriteString("env:\n  nemo_gym:\n")
	for _, l := range strings.Split(strings.TrimRight(src, "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString("    ")
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// corrected is the page's setup with its own mistakes fixed, the base the
// mistakes are applied to one at a time.
func (w *walker) corrected() (setup, []string) {
	s := w.baseline()
	var fixes []string
	if s.Serve.Model == "" {
		s.Serve.Model = "Qwen/Qwen3-4B-Thinking-2507"
	}
	if s.GPUBytes > 0 && !w.starts(s) {
		if fix := doctor.FittingMaxModelLen(s.Serve, s.GPUBytes); fix != "" {
			s.Serve.MaxModelLen = fix
			fixes = append(fixes, "--max-model-len "+fix)
		}
	}
	if !s.Serve.EnableAutoToolChoice || s.Serve.ToolCallParser == "" {
		s.Serve.EnableAutoToolChoice = true
		if s.Serve.ToolCallParser == "" {
			s.Serve.ToolCallParser = "hermes"
		}
		fixes = append(fixes, "--enable-auto-tool-choice --tool-call-parser "+s.Serve.ToolCallParser)
	}
	if !s.ServerCapture || !s.CollectorCapture {
		s.ServerCapture, s.CollectorCapture = true, true
		fixes = append(fixes, "the capture overlay given to both gym commands")
	}
	return s, fixes
}

// starts reports whether the fake would start with s (the planner's math).
func (w *walker) starts(s setup) bool {
	prof, err := gpu.LookupProfile(s.Serve.Model)
	if err != nil {
		return true
	}
	c := gpu.Config{Profile: prof, GPUMemoryBytes: s.GPUBytes, KVCacheDType: s.Serve.KVCacheDType}
	if s.Serve.MaxModelLen != "" {
		if c.MaxModelLen, err = gpu.ParseMaxModelLen(s.Serve.MaxModelLen); err != nil {
			return false
		}
	}
	_, err = gpu.Plan(c)
	return err == nil
}

func (w *walker) mistakes(ctx context.Context) error {
	base, fixes := w.corrected()
	note := ""
	if len(fixes) > 0 {
		note = " (applied to the page with its own mistakes fixed: " + strings.Join(fixes, "; ") + ")"
	}
	for _, m := range mistakes() {
		mk := Mistake{Name: m.name, Applied: m.applied + note, Symptom: m.symptom, OnPage: m.onPage(w, w.baseline())}
		if m.needsFake && w.external() {
			mk.Status, mk.Detail = Skip, "needs the embedded default (it restarts the model server)"
			w.res.Mistakes = append(w.res.Mistakes, mk)
			continue
		}
		if m.needsOwnProxy && w.o.ProxyURL != "" {
			mk.Status, mk.Detail = Skip, "needs our proxy (--proxy-url's model server follows its own capture settings)"
			w.res.Mistakes = append(w.res.Mistakes, mk)
			continue
		}
		out, err := run(ctx, m.apply(w, base), w.work)
		if err != nil {
			return fmt.Errorf("mistake %q: %w", m.name, err)
		}
		ok, detail := m.detect(out)
		mk.Status, mk.Detail = Fail, "symptom not seen: "+detail
		if ok {
			mk.Status, mk.Detail = Pass, detail
		}
		w.res.Mistakes = append(w.res.Mistakes, mk)
	}
	return nil
}
