package harness

import (
	"fmt"
	"strings"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/scenarios"
)

// Compare lists every way got disagrees with want, each naming the metric.
// An empty list means the verdict is as expected.
func Compare(want scenarios.Expect, got Got) []string {
	var out []string
	if got.MaskSample != want.MaskSample {
		out = append(out, fmt.Sprintf("mask_sample: want %t, got %t", want.MaskSample, got.MaskSample))
	}
	if want.AgentError != "" && !strings.Contains(got.AgentError, want.AgentError) {
		out = append(out, fmt.Sprintf("agent error: want it to contain %q, got %q", want.AgentError, got.AgentError))
	}
	if want.Redundant || got.Redundant {
		return append(out, compareRedundant(want, got)...)
	}
	if got.Metrics == nil {
		if len(want.Checks) > 0 {
			out = append(out, "_ng_token_capture: missing (the record was never finalized)")
		}
		return out
	}
	for _, c := range want.Checks {
		v, ok := c.Evaluate(got.Metrics)
		if ok {
			continue
		}
		if _, found := scenarios.MetricAt(got.Metrics, c.Path); !found && c.Op != scenarios.OpAbsent {
			out = append(out, fmt.Sprintf("%s: want %s, got <absent>", c.Path, strings.TrimPrefix(c.String(), c.Path+" ")))
			continue
		}
		out = append(out, fmt.Sprintf("%s: want %s, got %v", c.Path, strings.TrimPrefix(c.String(), c.Path+" "), render(v)))
	}
	return out
}

func render(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case nil:
		return "null"
	}
	return fmt.Sprint(v)
}

// compareRedundant checks a record that already carried token ids (a native
// agent; docs/consumer.md, "Delivery and retirement"): delivery must not touch
// it and must hand back a retirable redundant build.
func compareRedundant(want scenarios.Expect, got Got) []string {
	var out []string
	if got.Redundant != want.Redundant {
		out = append(out, fmt.Sprintf("redundant build: want %t, got %t", want.Redundant, got.Redundant))
	}
	if !want.Redundant {
		return out
	}
	if got.Metrics != nil {
		out = append(out, fmt.Sprintf("_ng_token_capture: want absent, got %v", got.Metrics))
	}
	if !got.Untouched {
		out = append(out, "record: want it unchanged by delivery, got a changed record")
	}
	if !got.Retired {
		out = append(out, "retirement: want the redundant build's snapshot retired, got it kept")
	}
	return out
}

// CompareExplanation checks that what `capbench explain` prints for the
// rollout's build contains the expectation's Explain text (its one-line
// cause); nothing is compared when the expectation sets none.
func CompareExplanation(want scenarios.Expect, build *consumer.Result) []string {
	if want.Explain == "" {
		return nil
	}
	if build == nil {
		return []string{fmt.Sprintf("explain: want %q, got no build to explain", want.Explain)}
	}
	var b strings.Builder
	if err := consumer.Explain(&b, build); err != nil {
		return []string{"explain: " + err.Error()}
	}
	if !strings.Contains(b.String(), want.Explain) {
		return []string{fmt.Sprintf("explain: want a line with %q, got:\n%s", want.Explain, b.String())}
	}
	return nil
}
