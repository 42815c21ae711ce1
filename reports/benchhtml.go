package reports

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"slices"
	"sort"
	"sync"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/internal/stats"
)

// uPlot (MIT, npm package uplot 1.6.32) is embedded so the report opens
// offline; see assets/README.
var (
	//go:embed assets/uplot.iife.min.js
	uplotJS string
	//go:embed assets/uplot.min.css
	uplotCSS string
)

// chart is one uPlot chart: aligned columns, X first.
type chart struct {
	ID     string      `json:"id"`
	Title  string      `json:"title"`
	XLabel string      `json:"xlabel"`
	YLabel string      `json:"ylabel"`
	Series []string    `json:"series"`
	Data   [][]float64 `json:"data"`
	// Time marks an X axis in seconds since the run started.
	Time bool `json:"time,omitempty"`
}

// quantilesAt returns the X positions of the latency CDF charts
// (percentiles), a fresh slice for each chart.
func quantilesAt() []float64 {
	q := make([]float64, 0, 103)
	for p := 0.0; p < 99; p += 1 {
		q = append(q, p)
	}
	return append(q, 99, 99.5, 99.9, 100)
}

func quantile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)-1))
	return sorted[i]
}

// cdfChart plots one metric's latency at every percentile, one series per path.
func cdfChart(r *bench.Result, id, title string, get func(*bench.Sample) (float64, bool)) *chart {
	byPath := map[bench.Path][]float64{}
	for i := range r.Samples {
		s := &r.Samples[i]
		if s.Phase != bench.PhaseMeasure || !s.OK() {
			continue
		}
		if v, ok := get(s); ok {
			byPath[s.Path] = append(byPath[s.Path], v)
		}
	}
	if len(byPath) == 0 {
		return nil
	}
	qs := quantilesAt()
	c := &chart{ID: id, Title: title, XLabel: "percentile", YLabel: "ms", Data: [][]float64{qs}}
	for _, p := range []bench.Path{bench.PathDirect, bench.PathProxy, bench.PathTarget} {
		vs, ok := byPath[p]
		if !ok {
			continue
		}
		slices.Sort(vs)
		col := make([]float64, len(qs))
		for i, q := range qs {
			col[i] = quantile(vs, q)
		}
		c.Series = append(c.Series, string(p))
		c.Data = append(c.Data, col)
	}
	return c
}

// sweepCharts plot throughput and latency against the sweep axis.
func sweepCharts(r *bench.Result) []*chart {
	xs := map[float64]bool{}
	axis := "concurrency"
	vals := map[bench.Path]map[float64][]bench.Summary{}
	for _, s := range r.Summaries {
		if s.Stage >= len(r.Stages) {
			continue
		}
		sh := r.Stages[s.Stage].Shape
		x := float64(sh.Concurrency)
		if sh.Arrival != bench.Closed {
			x, axis = sh.Rate, "rate (req/s)"
		}
		xs[x] = true
		if vals[s.Path] == nil {
			vals[s.Path] = map[float64][]bench.Summary{}
		}
		vals[s.Path][x] = append(vals[s.Path][x], s)
	}
	if len(xs) < 2 {
		return nil
	}
	var xcol []float64
	for x := range xs {
		xcol = append(xcol, x)
	}
	sort.Float64s(xcol)
	tput := &chart{ID: "throughput", Title: "Output throughput vs " + axis, XLabel: axis, YLabel: "tok/s", Data: [][]float64{xcol}}
	lat := &chart{ID: "latency", Title: "E2EL p50 and TTFT p50 vs " + axis, XLabel: axis, YLabel: "ms", Data: [][]float64{xcol}}
	for _, p := range []bench.Path{bench.PathDirect, bench.PathProxy, bench.PathTarget} {
		m, ok := vals[p]
		if !ok {
			continue
		}
		med := func(f func(bench.Summary) float64) []float64 {
			col := make([]float64, len(xcol))
			for i, x := range xcol {
				var v []float64
				for _, s := range m[x] {
					v = append(v, f(s))
				}
				col[i] = stats.Median(v)
			}
			return col
		}
		tput.Series = append(tput.Series, string(p))
		tput.Data = append(tput.Data, med(func(s bench.Summary) float64 { return s.OutputThroughput }))
		lat.Series = append(lat.Series, string(p)+" E2EL p50", string(p)+" TTFT p50")
		lat.Data = append(lat.Data, med(func(s bench.Summary) float64 { return s.E2EL.P50 }), med(func(s bench.Summary) float64 { return s.TTFT.P50 }))
	}
	return []*chart{tput, lat}
}

func serverChart(r *bench.Result) *chart {
	if r.Server == nil || len(r.Server.Points) < 2 {
		return nil
	}
	c := &chart{ID: "server", Title: "Server /metrics: requests running and waiting, KV-cache usage (%)", XLabel: "s", Time: true,
		Series: []string{"running", "waiting", "KV cache %", "preemptions"}, Data: make([][]float64, 5)}
	for _, p := range r.Server.Points {
		c.Data[0] = append(c.Data[0], float64(p.TNS)/1e9)
		c.Data[1] = append(c.Data[1], p.Running)
		c.Data[2] = append(c.Data[2], p.Waiting)
		c.Data[3] = append(c.Data[3], 100*p.KVUsage)
		c.Data[4] = append(c.Data[4], p.Preemptions)
	}
	return c
}

func overheadChart(r *bench.Result) *chart {
	if len(r.Overhead) == 0 {
		return nil
	}
	c := &chart{ID: "overhead", Title: "Capture overhead: proxy/direct per pair (median, 95% CI)", XLabel: "stage", YLabel: "ratio",
		Series: []string{"E2EL ratio", "E2EL low", "E2EL high", "TTFT ratio"}, Data: make([][]float64, 5)}
	for _, o := range r.Overhead {
		c.Data[0] = append(c.Data[0], float64(o.Stage))
		c.Data[1] = append(c.Data[1], o.E2ELRatio.Value)
		c.Data[2] = append(c.Data[2], o.E2ELRatio.Low)
		c.Data[3] = append(c.Data[3], o.E2ELRatio.High)
		c.Data[4] = append(c.Data[4], o.TTFTRatio.Value)
	}
	if len(r.Overhead) == 1 { // uPlot needs two X values to draw a line
		for i := range c.Data {
			v := c.Data[i][0]
			if i == 0 {
				v++
			}
			c.Data[i] = append(c.Data[i], v)
		}
	}
	return c
}

// sessionChart plots the prompt length of every call, turn by turn.
func sessionChart(r *bench.Result) *chart {
	if r.Sessions == nil {
		return nil
	}
	byTurn := map[int][]float64{}
	maxTurn := -1
	for i := range r.Samples {
		s := &r.Samples[i]
		if s.Session != "" && s.OK() && s.PromptTokens > 0 {
			byTurn[s.Turn] = append(byTurn[s.Turn], float64(s.PromptTokens))
			maxTurn = max(maxTurn, s.Turn)
		}
	}
	if maxTurn < 1 {
		return nil
	}
	c := &chart{ID: "sessions", Title: "Agent sessions: prompt tokens per call", XLabel: "call", YLabel: "tokens",
		Series: []string{"median", "max"}, Data: make([][]float64, 3)}
	for t := 0; t <= maxTurn; t++ {
		v := byTurn[t]
		if len(v) == 0 {
			continue
		}
		c.Data[0] = append(c.Data[0], float64(t))
		c.Data[1] = append(c.Data[1], stats.Median(v))
		c.Data[2] = append(c.Data[2], slices.Max(v))
	}
	return c
}

func benchCharts(r *bench.Result) []*chart {
	var out []*chart
	add := func(cs ...*chart) {
		for _, c := range cs {
			if c != nil && len(c.Data) > 1 && len(c.Data[0]) > 0 {
				out = append(out, c)
			}
		}
	}
	add(cdfChart(r, "e2el-cdf", "E2EL by percentile", func(s *bench.Sample) (float64, bool) { return float64(s.E2ELNS()) / 1e6, true }))
	add(cdfChart(r, "ttft-cdf", "TTFT by percentile: direct vs through capture", func(s *bench.Sample) (float64, bool) {
		return float64(s.TTFTNS()) / 1e6, s.FirstTokenNS > 0
	}))
	add(cdfChart(r, "tpot-cdf", "TPOT by percentile", func(s *bench.Sample) (float64, bool) {
		t, ok := s.TPOTNS()
		return float64(t) / 1e6, ok
	}))
	add(sweepCharts(r)...)
	add(serverChart(r), overheadChart(r), sessionChart(r))
	return out
}

// benchPage is parsed at first use, not at package init: every capbench
// command links this package, and most never render HTML.
var benchPage = sync.OnceValues(func() (*template.Template, error) {
	return template.New("bench").Parse(benchPageText)
})

const benchPageText = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>capbench bench report</title>
<style>{{.CSS}}
body{font:14px system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:12px 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child,td:nth-child(2){text-align:left}
.chart{margin:18px 0}.warn{background:#fff3cd;padding:8px;border:1px solid #e0c060}ul{padding-left:18px}
</style></head><body>
<h1>capbench bench</h1>
<p>{{.Config.Target}} target, {{.Config.Workload}} workload, {{.Result.SampleCount}} samples, started {{.Result.StartedAt.Format "2006-01-02 15:04:05Z"}}{{if .SLO}}, SLO <code>{{.SLO}}</code>{{end}}</p>
{{if .Result.Interrupted}}<p class="warn">Interrupted: the run was stopped early; figures cover what completed.</p>{{end}}
<table><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>
<ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>
{{if .Sessions}}<h2>Sessions: fidelity and masking</h2><table><tr><th>rollout</th><th>calls</th><th>largest prompt</th><th>fidelity exact</th><th>masked</th><th>reason / error</th></tr>
{{range .Sessions}}<tr><td>{{.RolloutID}}</td><td>{{.Calls}}</td><td>{{.MaxPromptTokens}}</td><td>{{.FidelityExact}}/{{.FidelityCalls}}</td><td>{{.Masked}}</td><td>{{.MaskReason}}{{.Error}}</td></tr>{{end}}</table>{{end}}
{{range .Charts}}<div class="chart" id="{{.ID}}" data-points="{{len (index .Data 0)}}"><h3>{{.Title}}</h3></div>{{end}}
<script>{{.JS}}</script>
<script id="charts" type="application/json">{{.ChartsJSON}}</script>
<script>
(function () {
  var charts = JSON.parse(document.getElementById("charts").textContent);
  var colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
  charts.forEach(function (c) {
    var el = document.getElementById(c.id);
    var series = [{label: c.xlabel}];
    c.series.forEach(function (name, i) { series.push({label: name, stroke: colors[i % colors.length], width: 2}); });
    var opts = {width: 900, height: 320, scales: {x: {time: false}}, series: series,
      axes: [{label: c.xlabel}, {label: c.ylabel}]};
    el.uplot = new uPlot(opts, c.data, el);
  });
  window.capbenchCharts = charts.length;
})();
</script>
</body></html>
`

// BenchHTML writes a self-contained HTML report (uPlot embedded; no
// network needed to open it).
func BenchHTML(w io.Writer, r *bench.Result) error {
	charts := benchCharts(r)
	raw, err := json.Marshal(charts)
	if err != nil {
		return fmt.Errorf("encode charts: %w", err)
	}
	var rows [][]string
	for _, s := range r.Summaries {
		rows = append(rows, benchRow(r, s))
	}
	var sessions []bench.SessionOutcome
	if r.Sessions != nil {
		sessions = r.Sessions.Outcomes
	}
	slo := ""
	if r.Config.SLO.Any() {
		slo = r.Config.SLO.String()
	}
	page, err := benchPage()
	if err != nil {
		return fmt.Errorf("bench report template: %w", err)
	}
	return page.Execute(w, map[string]any{
		"Result": r, "Config": r.Config, "SLO": slo, "Header": benchHeader, "Rows": rows, "Notes": benchNotes(r),
		"Sessions": sessions, "Charts": charts,
		// The library, its CSS and the chart data are trusted: our own
		// embedded files and json.Marshal output.
		"JS": template.JS(uplotJS), "CSS": template.CSS(uplotCSS), "ChartsJSON": template.JS(raw),
	})
}
