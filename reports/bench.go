package reports

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/capbench/capbench/bench"
)

// stageLabel names a summary's stage for tables ("c=8", "poisson 20/s").
func stageLabel(r *bench.Result, stage int) string {
	if stage >= 0 && stage < len(r.Stages) {
		st := r.Stages[stage]
		l := st.Shape.Label()
		if st.Round > 0 {
			l += fmt.Sprintf(" (round %d)", st.Round+1)
		}
		return l
	}
	return fmt.Sprintf("stage %d", stage)
}

func msPair(s bench.Stats) string {
	if s.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f / %.1f", s.P50, s.P99)
}

// benchRow is one summary rendered as table cells.
func benchRow(r *bench.Result, s bench.Summary) []string {
	good := "-"
	if r.Config.SLO.Any() {
		good = fmt.Sprintf("%.2f", s.Goodput)
	}
	rate := fmt.Sprintf("%.1f", s.AchievedRate)
	if s.RequestedRate > 0 {
		rate = fmt.Sprintf("%.1f/%.1f", s.AchievedRate, s.RequestedRate)
	}
	return []string{stageLabel(r, s.Stage), string(s.Path), fmt.Sprintf("%d/%d", s.Completed, s.Requests),
		fmt.Sprintf("%.2f", s.RequestThroughput), fmt.Sprintf("%.0f", s.OutputThroughput), good,
		msPair(s.TTFT), msPair(s.TPOT), msPair(s.ITL), msPair(s.E2EL),
		fmt.Sprintf("%.2f", s.ScheduleDelay.P99), rate}
}

var benchHeader = []string{"stage", "path", "ok/sent", "req/s", "out tok/s", "goodput req/s",
	"TTFT ms p50/p99", "TPOT ms p50/p99", "ITL ms p50/p99", "E2EL ms p50/p99", "sched delay p99 ms", "rate achieved/requested"}

// BenchTable renders a bench result for a terminal.
func BenchTable(w io.Writer, r *bench.Result) error {
	fmt.Fprintf(w, "capbench bench: %s target, %s workload, %d samples", r.Config.Target, r.Config.Workload, r.SampleCount)
	if r.Config.SLO.Any() {
		fmt.Fprintf(w, ", SLO %s", r.Config.SLO)
	}
	fmt.Fprintln(w)
	if r.Interrupted {
		fmt.Fprintln(w, "INTERRUPTED: the run was stopped early; figures cover what completed")
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(benchHeader, "\t"))
	for _, s := range r.Summaries {
		fmt.Fprintln(tw, strings.Join(benchRow(r, s), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Summaries {
		if s.Failed > 0 {
			fmt.Fprintf(w, "errors %s %s: %s; first: %s\n", stageLabel(r, s.Stage), s.Path, errorsText(s.ErrorsByKind), oneLine(truncate(s.FirstError, 160)))
		}
	}
	for _, line := range benchNotes(r) {
		fmt.Fprintln(w, line)
	}
	return nil
}

func errorsText(m map[bench.ErrorKind]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func ci(i bench.Interval, format string) string {
	return fmt.Sprintf(format+" [%s, %s]", i.Value, fmt.Sprintf(format, i.Low), fmt.Sprintf(format, i.High))
}

// benchNotes are the capture, knee and session lines shared by every format.
func benchNotes(r *bench.Result) []string {
	var out []string
	for _, o := range r.Overhead {
		line := fmt.Sprintf("capture overhead %s: %d pairs, E2EL proxy/direct %s, added %s ms",
			stageLabel(r, o.Stage), o.Pairs, ci(o.E2ELRatio, "%.3f"), ci(o.AddedE2ELMS, "%.2f"))
		if o.TTFTRatio.N > 0 {
			line += fmt.Sprintf("; TTFT proxy/direct %s, added %s ms", ci(o.TTFTRatio, "%.3f"), ci(o.AddedTTFTMS, "%.2f"))
			if o.BufferedTTFT > 0.5 {
				line += fmt.Sprintf("; %.0f%% of proxied first chunks came at the end of the call (a buffering proxy: its TTFT is its E2EL)", 100*o.BufferedTTFT)
			}
		}
		out = append(out, line)
	}
	if c := r.Capture; c != nil {
		out = append(out, fmt.Sprintf("capture (%s store): %d records for %d proxied calls in %d rollouts (all captured: %v), %.1f records/s, %.1f KiB/s; fidelity (%s) %d/%d exact",
			c.Store, c.Records, c.ProxiedOK, c.Rollouts, c.CapturedAll, c.RecordsPerS, c.BytesPerS/1024, c.FidelityMethod, c.FidelityExact, c.FidelityCalls))
		if pl := c.PutLatency; pl != nil && pl.Count > 0 {
			out = append(out, fmt.Sprintf("  store put (append + fsync + state) ms: p50 %.2f, p99 %.2f, max %.2f over %d puts, %d failed", pl.P50, pl.P99, pl.Max, pl.Count, c.PutErrors))
		}
		for _, p := range c.Problems {
			out = append(out, "  problem: "+oneLine(p))
		}
	}
	if y := r.CaptureSyncs; y != nil {
		out = append(out, fmt.Sprintf("capture syncs: %d appends made durable by %d syncs (%d of the file system, %d of one file), %.1f appends per sync; a sync was running %.0f%% of the load's %.1f s",
			y.Appends, y.FileSystemSyncs+y.FileSyncs, y.FileSystemSyncs, y.FileSyncs, y.AppendsPerSync, 100*y.BusyShare, y.WindowS))
	}
	if k := r.Knee; k != nil {
		line := fmt.Sprintf("saturation knee (%s path): %s %g reaches %.0f%% of the best output throughput (%.0f tok/s)",
			k.Path, k.Axis, k.X, 100*k.Fraction, k.Max)
		if k.Predicted > 0 {
			line += fmt.Sprintf("; the planner fits %g requests of %d tokens in the KV cache, the knee is %+.0f%% from it",
				k.Predicted, k.TokensPerRequest, 100*(k.X-k.Predicted)/k.Predicted)
		}
		out = append(out, line)
	}
	if g := r.Config.GPU; g != nil && g.KVBlocks > 0 {
		timing := "timing model off (zero-latency fake)"
		if g.TimeScale > 0 {
			timing = fmt.Sprintf("timing model at %g× real time (TTFT %s, ITL %s, prefill %.0f tok/s)", g.TimeScale, g.TTFT, g.ITL, g.PrefillTokS)
		}
		out = append(out, fmt.Sprintf("fake GPU: %s on %.0f GiB, %d KV blocks of %d tokens, max concurrency %.2fx at max_model_len %d; %s",
			g.Profile, float64(g.MemoryBytes)/(1<<30), g.KVBlocks, g.BlockSize, g.MaxConcurrency, g.MaxModelLen, timing))
	}
	if s := r.Sessions; s != nil {
		maxPrompt, exact, calls := 0, 0, 0
		for _, o := range s.Outcomes {
			maxPrompt = max(maxPrompt, o.MaxPromptTokens)
			exact += o.FidelityExact
			calls += o.FidelityCalls
		}
		out = append(out, fmt.Sprintf("sessions: %d consumed, %d masked, largest prompt %d tokens, fidelity %d/%d calls exact",
			s.Count, s.Masked, maxPrompt, exact, calls))
		for _, reason := range sortedKeys(s.MaskReasons) {
			out = append(out, fmt.Sprintf("  masked %d× %s", s.MaskReasons[reason], reason))
		}
	}
	if sv := r.Server; sv != nil {
		out = append(out, fmt.Sprintf("server /metrics: %d scrapes of %s (%d failed)", len(sv.Points), sv.URL, sv.Errors))
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// BenchMarkdown renders a bench result as Markdown.
func BenchMarkdown(w io.Writer, r *bench.Result) error {
	fmt.Fprintf(w, "# capbench bench\n\n%s target, %s workload, %d samples, started %s", r.Config.Target, r.Config.Workload, r.SampleCount, r.StartedAt.Format("2006-01-02 15:04:05Z"))
	if r.Config.SLO.Any() {
		fmt.Fprintf(w, ", SLO `%s`", r.Config.SLO)
	}
	fmt.Fprint(w, "\n\n")
	if r.Interrupted {
		fmt.Fprint(w, "> **Interrupted**: the run was stopped early; figures cover what completed.\n\n")
	}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(benchHeader, " | "), strings.Repeat("---|", len(benchHeader)))
	for _, s := range r.Summaries {
		cells := benchRow(r, s)
		for i := range cells {
			cells[i] = mdEscape(cells[i])
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	for _, line := range benchNotes(r) {
		fmt.Fprintf(w, "- %s\n", mdEscape(strings.TrimSpace(line)))
	}
	return nil
}

// CompareMarkdown renders a comparison as a Markdown table (a CI comment).
func CompareMarkdown(w io.Writer, base, next *bench.Result, c *bench.Comparison) error {
	fmt.Fprintf(w, "## capbench compare\n\nthreshold %.0f%%; a regression is worse than the threshold with its 95%% interval entirely on the worse side.\n\n", 100*c.Threshold)
	fmt.Fprint(w, "| stage | path | metric | base | new | change [95% CI] | verdict |\n|---|---|---|---|---|---|---|\n")
	for _, ch := range c.Changes {
		verdict := "="
		switch {
		case ch.Regression:
			verdict = "**regression**"
		case ch.Improvement:
			verdict = "improvement"
		}
		pct := func(v float64) string { return fmt.Sprintf("%+.1f%%", 100*(v-1)) }
		fmt.Fprintf(w, "| %s | %s | %s (%s is better) | %.3f | %.3f | %s [%s, %s] | %s |\n", mdEscape(stageLabel(base, ch.Stage)), ch.Path, ch.Metric, ch.Direction,
			ch.Base, ch.New, pct(ch.Ratio.Value), pct(ch.Ratio.Low), pct(ch.Ratio.High), verdict)
	}
	fmt.Fprintf(w, "\n%d regression(s).\n", c.Regressions)
	return nil
}
