package doctor

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/itchyny/gojq"

	"github.com/capbench/capbench/doctor/page"
	"github.com/capbench/capbench/fakes/gpu"
)

// Steps are the walkthrough steps a page documents, as found on it.
type Steps struct {
	Page *page.Page
	// Serve is the first `vllm serve` command (nil when the page has none).
	Serve    *Serve
	ServeCmd *page.Command
	// GPUBytes is the GPU the page is written for (from --gpu, or prose such
	// as "a single 48 GB GPU"); 0 when unknown.
	GPUBytes int64
	GPULabel string
	// Overlays are the YAML blocks by name (or "block@LINE").
	Overlays map[string]*OverlayBlock
	// EnvStart and EvalRun are the first `gym env start` and `gym eval run`.
	EnvStart, EvalRun *page.Command
	// JQ are the page's jq checks.
	JQ []JQCheck
	// Outcome is what the page says the jq check shows.
	Outcome *Outcome
}

// OverlayBlock is a shown YAML block and what it holds.
type OverlayBlock struct {
	Name    string
	Block   *page.Block
	Overlay Overlay
}

// JQCheck is one `jq FILTER FILE` command.
type JQCheck struct {
	Filter string
	File   string
	Line   int
}

// Outcome is the documented result of the jq check: expected field values
// and fields that must be absent (or false).
type Outcome struct {
	Line   int
	Equal  map[string]any
	Absent []string
}

var (
	gpuProse   = regexp.MustCompile(`(?i)\b(\d+(?:\.\d+)?)\s*(GB|GiB)\b((?:\s+[\w-]+){0,3}?)\s+GPU`)
	kvSpan     = regexp.MustCompile(`^([\w.]+):\s*(.+)$`)
	emptySpan  = regexp.MustCompile("(?i)\\bempty\\s+`([\\w.]+)`")
	absentSpan = regexp.MustCompile("(?i)\\bno\\s+`([\\w.]+)`")
)

// ReadSteps finds a page's steps. gpuFlag (e.g. "48GiB", "L40S") overrides
// the GPU the prose names.
func ReadSteps(p *page.Page, gpuFlag string) (*Steps, []Finding, error) {
	st := &Steps{Page: p, Overlays: map[string]*OverlayBlock{}}
	var out []Finding
	if gpuFlag != "" {
		n, label, err := gpu.ParseDevice(gpuFlag)
		if err != nil {
			return nil, nil, fmt.Errorf("--gpu: %w", err)
		}
		st.GPUBytes, st.GPULabel = n, label
	} else {
		for _, para := range p.Prose {
			if m := gpuProse.FindStringSubmatch(para.Text); m != nil {
				if d, err := gpu.LookupDevice(strings.TrimSpace(m[3])); err == nil && m[3] != "" {
					st.GPUBytes, st.GPULabel = d.TotalBytes, fmt.Sprintf("%s (%.2f GiB, line %d)", d.Name, float64(d.TotalBytes)/float64(gpu.GiB), para.Line)
					break
				}
				// "48 GB" boards report 44.5–47.5 GiB; 48 GiB is the most
				// generous reading, so a refusal there holds on every one.
				n, err := gpu.ParseBytes(m[1] + "GiB")
				if err == nil {
					st.GPUBytes, st.GPULabel = n, fmt.Sprintf("%s %s GPU (line %d, read as %sGiB)", m[1], m[2], para.Line, m[1])
				}
				break
			}
		}
	}
	for i := range p.Blocks {
		b := &p.Blocks[i]
		switch {
		case b.IsShell():
			out = append(out, st.readCommands(b)...)
		case b.IsYAML():
			name := b.Name
			if name == "" {
				name = fmt.Sprintf("block@%d", b.Line)
			}
			if _, dup := st.Overlays[name]; !dup {
				st.Overlays[name] = &OverlayBlock{Name: name, Block: b}
			}
		}
	}
	st.Outcome = findOutcome(p, st.JQ)
	return st, out, nil
}

func (st *Steps) readCommands(b *page.Block) []Finding {
	var out []Finding
	for _, c := range b.Commands() {
		c := c
		switch {
		case c.Is("vllm", "serve") && st.Serve == nil:
			s, err := ParseServe(c.Args, c.ArgLines)
			if err != nil {
				out = append(out, Finding{Rule: "page/bad-command", Severity: Error, Line: c.Line, Message: err.Error()})
				continue
			}
			st.Serve, st.ServeCmd = &s, &c
		case c.Is("gym", "env", "start") && st.EnvStart == nil:
			st.EnvStart = &c
		case c.Is("gym", "eval", "run") && st.EvalRun == nil:
			st.EvalRun = &c
		case c.Is("jq"):
			if jq, ok := jqCheck(c); ok {
				st.JQ = append(st.JQ, jq)
			}
		}
	}
	return out
}

// jqCheck takes the filter (first non-option word) and the input file.
func jqCheck(c page.Command) (JQCheck, bool) {
	var words []string
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		if strings.HasPrefix(a, "-") && len(words) == 0 {
			if a == "--arg" || a == "--argjson" {
				i += 2
			}
			continue
		}
		words = append(words, a)
	}
	if len(words) == 0 {
		return JQCheck{}, false
	}
	jq := JQCheck{Filter: words[0], Line: c.Line}
	if len(words) > 1 {
		jq.File = words[len(words)-1]
	}
	return jq, true
}

// findOutcome reads the prose right after the first jq block: code spans
// such as `n_calls: 1`, "an empty `chain`", "no `mask`".
func findOutcome(p *page.Page, jqs []JQCheck) *Outcome {
	if len(jqs) == 0 {
		return nil
	}
	after := jqs[0].Line
	next := 1 << 30
	for _, b := range p.Blocks {
		if b.Line > after+1 && b.Line < next {
			next = b.Line
		}
	}
	for _, para := range p.Prose {
		if para.Line <= after || para.Line >= next {
			continue
		}
		o := &Outcome{Line: para.Line, Equal: map[string]any{}}
		for _, code := range para.Code {
			if m := kvSpan.FindStringSubmatch(code); m != nil {
				var v any
				if err := json.Unmarshal([]byte(m[2]), &v); err != nil {
					v = strings.Trim(m[2], `"'`)
				}
				o.Equal[m[1]] = v
			}
		}
		for _, m := range emptySpan.FindAllStringSubmatch(para.Text, -1) {
			o.Equal[m[1]] = ""
		}
		for _, m := range absentSpan.FindAllStringSubmatch(para.Text, -1) {
			o.Absent = append(o.Absent, m[1])
		}
		if len(o.Equal) > 0 || len(o.Absent) > 0 {
			return o
		}
	}
	return nil
}

// configs returns a gym command's --config values with their lines.
func configs(c *page.Command) ([]string, []int) {
	if c == nil {
		return nil, nil
	}
	return c.Flag("config")
}

// CheckPage runs every check on a page's steps.
func CheckPage(p *page.Page, gpuFlag string) (*Report, *Steps, error) {
	rep := NewReport("page", p.Path)
	st, fs, err := ReadSteps(p, gpuFlag)
	if err != nil {
		return nil, nil, err
	}
	rep.Add(fs...)
	if st.Serve != nil {
		rep.Add(CheckServe(*st.Serve, ServeOptions{GPUBytes: st.GPUBytes, GPULabel: st.GPULabel})...)
	} else {
		rep.Add(Finding{Rule: "page/no-vllm-serve", Severity: Info, Message: "the page has no `vllm serve` command, so the serve flags were not checked"})
	}
	envCfg, envLines := configs(st.EnvStart)
	evalCfg, _ := configs(st.EvalRun)
	given := map[string]bool{}
	for _, n := range append(slices.Clone(envCfg), evalCfg...) {
		given[baseName(n)] = true
	}
	for _, ob := range st.Overlays {
		ob.Overlay, fs = CheckOverlay([]byte(ob.Block.Text), ConfigOptions{LineOffset: ob.Block.Line - 1, ForGymCommand: given[baseName(ob.Name)]})
		if !given[baseName(ob.Name)] && ob.Overlay.Nested {
			fs = keepVLLMFindings(fs) // a NeMo RL config shown for reference
		}
		rep.Add(fs...)
	}
	rep.Add(st.checkCommands(envCfg, envLines, evalCfg)...)
	var evalOut []string
	if st.EvalRun != nil {
		evalOut, _ = st.EvalRun.Flag("output")
	}
	for _, jq := range st.JQ {
		if len(evalOut) == 1 && jq.File != "" && baseName(jq.File) != baseName(evalOut[0]) {
			rep.Add(Finding{Rule: "page/jq-other-file", Severity: Warning, Line: jq.Line, Subject: jq.File,
				Message: fmt.Sprintf("the jq check reads %s but `gym eval run` writes %s", jq.File, evalOut[0]), Fix: "check the file gym eval run --output names"})
		}
		if _, err := gojq.Parse(jq.Filter); err != nil {
			rep.Add(Finding{Rule: "page/jq-syntax", Severity: Error, Line: jq.Line, Subject: jq.Filter, Message: "the jq filter does not parse: " + err.Error(), Fix: "fix the filter"})
		} else if !strings.Contains(jq.Filter, "_ng_token_capture") && !strings.Contains(jq.Filter, "mask_sample") {
			rep.Add(Finding{Rule: "page/jq-no-capture-fields", Severity: Warning, Line: jq.Line, Subject: jq.Filter,
				Message: "the jq check shows neither _ng_token_capture nor mask_sample", Fix: "print ._ng_token_capture and .mask_sample, the fields that show whether capture worked"})
		}
	}
	for i := range rep.Findings {
		rep.Findings[i].File = p.Path
	}
	rep.Sort()
	return rep, st, nil
}

func keepVLLMFindings(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if strings.HasPrefix(f.Rule, "config/nemo-rl-") || f.Rule == "config/skip-tokenizer-init" || f.Rule == "config/yaml" {
			out = append(out, f)
		}
	}
	return out
}

func baseName(s string) string { return s[strings.LastIndex(s, "/")+1:] }

// captureOverlay returns the name of a shown overlay that turns capture on.
func (st *Steps) captureOverlay(names []string) string {
	for _, n := range names {
		for _, ob := range st.Overlays {
			if baseName(ob.Name) == baseName(n) && ob.Overlay.Capture {
				return n
			}
		}
	}
	return ""
}

func (st *Steps) shown(name string) bool {
	for _, ob := range st.Overlays {
		if baseName(ob.Name) == baseName(name) {
			return true
		}
	}
	return false
}

func (st *Steps) checkCommands(envCfg []string, envLines []int, evalCfg []string) []Finding {
	var out []Finding
	serverOverlay := st.captureOverlay(envCfg)
	if st.EvalRun != nil && st.EvalRun.Has("no-serve") && serverOverlay != "" && !slices.ContainsFunc(evalCfg, func(s string) bool { return baseName(s) == baseName(serverOverlay) }) {
		out = append(out, Finding{Rule: "page/overlay-not-given-to-collector", Severity: Error, Line: st.EvalRun.Line, Subject: serverOverlay,
			Message: fmt.Sprintf("`gym eval run --no-serve` is not given %s, which `gym env start` gets", serverOverlay),
			Cause:   "with --no-serve the collector reads capture settings from its own --config: the model server records the calls, but the rows are text-only (no _ng_token_capture, no mask_sample, nothing trainable)",
			Fix:     fmt.Sprintf("add --config %s to `gym eval run --no-serve`", serverOverlay)})
	}
	for _, cmd := range []*page.Command{st.EnvStart, st.EvalRun} {
		names, lines := configs(cmd)
		hasCapture := st.captureOverlay(names) != ""
		for i, n := range names {
			if st.shown(n) {
				continue
			}
			f := Finding{Rule: "page/overlay-not-shown", Severity: Info, Line: lines[i], Subject: n,
				Message: fmt.Sprintf("%s is named in a command but never shown (taken to be the environment's own config)", n)}
			if !hasCapture {
				f.Severity, f.Message = Error, fmt.Sprintf("%s is named in `%s` but never shown, and no shown overlay turning capture on goes to that command", n, strings.Join(cmd.Args[:min(3, len(cmd.Args))], " "))
				f.Fix = "show the overlay's content (the token_id_capture block) on the page"
			}
			out = append(out, f)
		}
	}
	if st.EnvStart != nil && serverOverlay == "" && len(st.Overlays) > 0 {
		line := st.EnvStart.Line
		if len(envLines) > 0 {
			line = envLines[0]
		}
		out = append(out, Finding{Rule: "page/no-overlay-to-servers", Severity: Error, Line: line,
			Message: "`gym env start` is given no shown overlay that turns capture on, so the model server records nothing",
			Fix:     "pass the capture overlay with --config"})
	}
	return out
}
