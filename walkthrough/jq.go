package walkthrough

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/itchyny/gojq"

	"github.com/capbench/capbench/doctor"
)

// defaultOutcome is the healthy row of docs/walkthrough.md, used when the
// page's prose states no outcome, on the fields a jq check would print.
func defaultOutcome() *doctor.Outcome {
	return &doctor.Outcome{Equal: map[string]any{
		"_ng_token_capture.n_calls": 1.0, "_ng_token_capture.chains": 1.0,
		"_ng_token_capture.terminal_attribution.chain": "", "_ng_token_capture.delivered_fraction": 1.0,
	}, Absent: []string{"mask_sample"}}
}

// evalJQ runs a jq filter on every row with gojq and returns each row's
// outputs.
func evalJQ(filter string, rows []map[string]any) ([][]any, error) {
	q, err := gojq.Parse(filter)
	if err != nil {
		return nil, fmt.Errorf("jq filter %q: %w", filter, err)
	}
	code, err := gojq.Compile(q)
	if err != nil {
		return nil, fmt.Errorf("jq filter %q: %w", filter, err)
	}
	var out [][]any
	for _, r := range rows {
		plain, err := plainJSON(r)
		if err != nil {
			return nil, err
		}
		var vs []any
		it := code.Run(plain)
		for {
			v, ok := it.Next()
			if !ok {
				break
			}
			if err, isErr := v.(error); isErr {
				return nil, fmt.Errorf("jq filter %q: %w", filter, err)
			}
			vs = append(vs, v)
		}
		out = append(out, vs)
	}
	return out, nil
}

// plainJSON round-trips a record so gojq sees only JSON types.
func plainJSON(r map[string]any) (any, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var v any
	return v, json.Unmarshal(b, &v)
}

// lookup reads a dotted path from a jq output object.
func lookup(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func sameValue(want, got any) bool {
	wf, ok1 := toFloat(want)
	gf, ok2 := toFloat(got)
	if ok1 && ok2 {
		return wf == gf
	}
	return fmt.Sprint(want) == fmt.Sprint(got) && (want == nil) == (got == nil)
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// checkOutcome compares one jq output with the documented outcome and
// returns what differs.
func checkOutcome(o *doctor.Outcome, v any) []string {
	var bad []string
	keys := make([]string, 0, len(o.Equal))
	for k := range o.Equal {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		got, ok := lookup(v, k)
		if !ok || !sameValue(o.Equal[k], got) {
			bad = append(bad, fmt.Sprintf("%s is %s, want %s", k, show(got, ok), show(o.Equal[k], true)))
		}
	}
	for _, k := range o.Absent {
		if got, ok := lookup(v, k); ok && got != nil && got != false {
			bad = append(bad, fmt.Sprintf("%s is %s, want absent or false", k, show(got, true)))
		}
	}
	return bad
}

func show(v any, ok bool) string {
	if !ok {
		return "missing"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
