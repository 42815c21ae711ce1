package figures

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/template"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/harness/chaos"
	"github.com/capbench/capbench/internal/pyfmt"
)

// Data is what a row's Figure template sees: the metrics of its GoTest runs
// (.Med, .Min, .Max, .Span), the result of its capbench bench run (.Result,
// .Summary, .Overhead) and of its chaos run (.Scenario).
type Data struct {
	Bench  BenchSet
	Result *bench.Result // capbench bench; for shards, the merged result
	Single *bench.Result // shards: the one-process run of the same schedule
	Chaos  *chaos.Result
}

// Med, Min, Max: one Go benchmark metric over the runs (-count).
func (d Data) Med(name, unit string) (float64, error) { return d.Bench.Med(name, unit) }
func (d Data) Min(name, unit string) (float64, error) { return d.Bench.Min(name, unit) }
func (d Data) Max(name, unit string) (float64, error) { return d.Bench.Max(name, unit) }

// Has reports whether the output has the metric: for figures whose peer
// runs only when configured (NeMo Gym's, with CAPBENCH_GYM_DIR), so the
// template can say, in words, that the peer was not rerun.
func (d Data) Has(name, unit string) bool {
	_, err := d.Bench.values(name, unit)
	return err == nil
}

// Span is "min–max" of one Go benchmark metric at digits decimals, or one
// number when both print the same (a single run).
func (d Data) Span(name, unit string, digits int) (string, error) {
	lo, err := d.Bench.Min(name, unit)
	if err != nil {
		return "", err
	}
	hi, _ := d.Bench.Max(name, unit)
	a, err := fixed(digits, lo)
	if err != nil {
		return "", err
	}
	b, err := fixed(digits, hi)
	if err != nil {
		return "", err
	}
	if a == b {
		return a, nil
	}
	return a + "–" + b, nil
}

var errNoResult = errors.New("the row has no capbench bench run")

// Summary is the bench summary of one path ("direct", "proxy", "target")
// at the first stage.
func (d Data) Summary(path string) (bench.Summary, error) { return d.SummaryAt(0, path) }

// SummaryAt is the bench summary of one path at one stage (a sweep's step).
func (d Data) SummaryAt(stage int, path string) (bench.Summary, error) {
	if d.Result == nil {
		return bench.Summary{}, errNoResult
	}
	var have []string
	for _, s := range d.Result.Summaries {
		if s.Stage == stage && string(s.Path) == path {
			return s, nil
		}
		have = append(have, fmt.Sprintf("%d/%s", s.Stage, s.Path))
	}
	return bench.Summary{}, fmt.Errorf("bench result has no summary for stage %d path %q (it has: %s)", stage, path, strings.Join(have, ", "))
}

// Overhead is the paired capture overhead of the first stage.
func (d Data) Overhead() (bench.Overhead, error) {
	if d.Result == nil {
		return bench.Overhead{}, errNoResult
	}
	if len(d.Result.Overhead) == 0 {
		return bench.Overhead{}, errors.New("bench result has no paired overhead (was it run with both paths?)")
	}
	return d.Result.Overhead[0], nil
}

// Scenario is the row of the chaos result whose scenario text starts with
// prefix ("kill -9", "slow-client flood"); chaos names scenarios by what
// they do, and the count in the text follows the flags.
func (d Data) Scenario(prefix string) (chaos.Row, error) {
	if d.Chaos == nil {
		return chaos.Row{}, errors.New("the row has no chaos run")
	}
	var have []string
	var found []chaos.Row
	for _, r := range d.Chaos.Rows {
		if strings.HasPrefix(r.Scenario, prefix) {
			found = append(found, r)
		}
		have = append(have, fmt.Sprintf("%q", r.Scenario))
	}
	switch {
	case len(found) == 0:
		return chaos.Row{}, fmt.Errorf("chaos result has no scenario starting %q (it has: %s)", prefix, strings.Join(have, ", "))
	case len(found) > 1:
		return chaos.Row{}, fmt.Errorf("more than one chaos scenario starts %q (it has: %s)", prefix, strings.Join(have, ", "))
	case found[0].Skipped != "":
		return chaos.Row{}, fmt.Errorf("chaos scenario %q was skipped: %s", found[0].Scenario, found[0].Skipped)
	}
	return found[0], nil
}

// funcs are the template's number helpers; each takes the value last, so
// `{{.Med "X" "ns/op" | f 1}}` reads left to right.
var funcs = template.FuncMap{
	"f":     fixed,
	"comma": comma,
	"k":     kilo,
	"mib":   mib,
	"add":   func(a, b float64) float64 { return a + b },
	"sub":   func(a, b float64) float64 { return a - b },
	"mul":   func(a, b float64) float64 { return a * b },
	"div": func(a, b float64) (float64, error) {
		if b == 0 {
			return 0, errors.New("division by zero")
		}
		return a / b, nil
	},
	"float": toFloat,
}

// fixed prints v with digits decimals.
func fixed(digits int, v any) (string, error) {
	x, err := toFloat(v)
	if err != nil {
		return "", err
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "", fmt.Errorf("value %v is not a number", x)
	}
	return strconv.FormatFloat(x, 'f', digits, 64), nil
}

// comma prints an integer with thousands separators: 55521 → "55,521".
func comma(v any) (string, error) {
	x, err := toFloat(v)
	if err != nil {
		return "", err
	}
	return pyfmt.Thousands(int64(math.Round(x))), nil
}

// kilo prints thousands with digits decimals: 3140 → "3.1k"; under 1000
// the plain number.
func kilo(digits int, v any) (string, error) {
	x, err := toFloat(v)
	if err != nil {
		return "", err
	}
	if math.Abs(x) < 1000 {
		return fixed(0, x)
	}
	s, err := fixed(digits, x/1000)
	return s + "k", err
}

// mib prints bytes as MiB with one decimal.
func mib(v any) (string, error) {
	x, err := toFloat(v)
	if err != nil {
		return "", err
	}
	return fixed(1, x/(1<<20))
}

func toFloat(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case int:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case uint64:
		return float64(x), nil
	default:
		return 0, fmt.Errorf("%v (%T) is not a number", v, v)
	}
}

// OverheadSpan is "lo–hi" of one paired-overhead value over every stage
// (rounds of --rounds, steps of a sweep): field is a JSON name of
// bench.Overhead (e2el_ratio, ttft_ratio, added_e2el_ms, added_ttft_ms).
func (d Data) OverheadSpan(field string, digits int) (string, error) {
	if d.Result == nil {
		return "", errNoResult
	}
	if len(d.Result.Overhead) == 0 {
		return "", errors.New("bench result has no paired overhead (was it run with both paths?)")
	}
	var vs []float64
	for _, o := range d.Result.Overhead {
		switch field {
		case "e2el_ratio":
			vs = append(vs, o.E2ELRatio.Value)
		case "ttft_ratio":
			vs = append(vs, o.TTFTRatio.Value)
		case "added_e2el_ms":
			vs = append(vs, o.AddedE2ELMS.Value)
		case "added_ttft_ms":
			vs = append(vs, o.AddedTTFTMS.Value)
		default:
			return "", fmt.Errorf("OverheadSpan: unknown field %q (e2el_ratio, ttft_ratio, added_e2el_ms, added_ttft_ms)", field)
		}
	}
	return Data{Bench: BenchSet{"overhead": {field: vs}}}.Span("overhead", field, digits)
}

// KneeAt is the sweep's output throughput (tok/s) at one point of its axis.
func (d Data) KneeAt(x float64) (float64, error) {
	if d.Result == nil {
		return 0, errNoResult
	}
	if d.Result.Knee == nil {
		return 0, errors.New("bench result has no knee (was it a --sweep?)")
	}
	for _, p := range d.Result.Knee.Points {
		if p.X == x {
			return p.OutputThroughput, nil
		}
	}
	return 0, fmt.Errorf("the sweep has no point %g", x)
}

// SessionTotals adds up a sessions workload's outcomes.
type SessionTotals struct {
	Sessions, Calls, MaxPromptTokens, Masked, Exact, Checked, Errors int
}

// Sessions is the totals of the sessions workload.
func (d Data) Sessions() (SessionTotals, error) {
	if d.Result == nil {
		return SessionTotals{}, errNoResult
	}
	s := d.Result.Sessions
	if s == nil {
		return SessionTotals{}, errors.New("bench result has no sessions (was it --workload sessions?)")
	}
	t := SessionTotals{Sessions: s.Count, Masked: s.Masked}
	for _, o := range s.Outcomes {
		t.Calls += o.Calls
		t.MaxPromptTokens = max(t.MaxPromptTokens, o.MaxPromptTokens)
		t.Exact += o.FidelityExact
		t.Checked += o.FidelityCalls
		if o.Error != "" {
			t.Errors++
		}
	}
	return t, nil
}
