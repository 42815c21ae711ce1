package consumer

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/capbench/capbench/capture/consumer/attribution"
)

// MaskExplanation says in plain words why a result is or is not masked,
// following the mask decision table (docs/consumer.md) in order.
func MaskExplanation(r *Result) string {
	switch {
	case r.Redundant:
		return "Not masked: the record already carried token ids (native agent), so nothing was rebuilt."
	case r.Unusable || r.Error != "":
		text := "Masked: no trainable response could be built (" + r.Error + ")."
		if r.Metrics.CaptureIncomplete {
			text += " The snapshot is also incomplete: a call was lost or could not be recorded."
		}
		return text
	}
	why, baseMasked := decisionReason(r)
	switch {
	case r.Metrics.CaptureIncomplete && r.MaskSample && !baseMasked:
		return "Masked: the snapshot is incomplete (a call was lost or could not be recorded), and incomplete captures are masked; otherwise " + why + "."
	case r.Metrics.CaptureIncomplete && !r.MaskSample:
		return "Not masked: " + why + "; the snapshot is incomplete, but mask_incomplete_when_attributed is off and the attributed chain was delivered."
	case r.MaskSample:
		text := "Masked: " + why + "."
		if r.Metrics.CaptureIncomplete {
			text += " The snapshot is also incomplete."
		}
		return text
	default:
		return "Not masked: " + why + "."
	}
}

// decisionReason explains rows 2–6 of the mask decision table and says
// whether they mask.
func decisionReason(r *Result) (string, bool) {
	ta := r.Metrics.TerminalAttribution
	if ta == nil {
		return "no attribution was recorded", r.MaskSample
	}
	switch {
	case ta.Chain == ChainDelivered:
		return fmt.Sprintf("the verified response was attributed to call %s (%s) and its chain from the root is clean, so exactly that chain is delivered", deref(ta.CallID), ta.Method), false
	case ta.CallID != nil && ta.Chain == ChainBroken:
		return fmt.Sprintf("the verified response was attributed to call %s (%s), but the path from its root crosses an unproven parent link or a quarantined retry", *ta.CallID, ta.Method), true
	case ta.CallID != nil:
		return fmt.Sprintf("the verified response was attributed to call %s (%s), but that call is not among the buildable records", *ta.CallID, ta.Method), true
	case strings.Contains(ta.Reason, "declared_") || strings.Contains(ta.Reason, "[declared="):
		return "the harness declared which served response it kept, and the records do not confirm it", true
	}
	var problems []string
	if len(r.UnresolvedRetries) > 0 {
		problems = append(problems, fmt.Sprintf("a call was retried and nothing says which attempt was kept (%s)", strings.Join(r.UnresolvedRetries, ", ")))
	}
	if len(r.UnresolvedParentCalls) > 0 {
		problems = append(problems, fmt.Sprintf("%d call(s) start after an unproven parent link (%s)", len(r.UnresolvedParentCalls), strings.Join(r.UnresolvedParentCalls, ", ")))
	}
	if r.Metrics.Roots != 1 {
		problems = append(problems, fmt.Sprintf("the capture has %d roots, not 1", r.Metrics.Roots))
	}
	if r.Metrics.Chains != 1 {
		problems = append(problems, fmt.Sprintf("the capture forms %d chains, not 1", r.Metrics.Chains))
	}
	if len(problems) == 0 {
		return "no witness named the terminal call, and the capture forms exactly one clean chain, which is delivered", false
	}
	return "no witness named the terminal call, and " + strings.Join(problems, "; "), true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Explain writes a human-readable account of a result: the chains, the
// attribution trail and why the rollout is or is not masked.
func Explain(w io.Writer, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "rollout %s (builder %s)\n", r.RolloutID, r.Builder)
	if r.Snapshot != nil {
		fmt.Fprintf(&b, "snapshot %s version %d", r.Snapshot.SnapshotID, r.Snapshot.Version)
		if r.Metrics.CaptureIncomplete {
			b.WriteString(" (incomplete)")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "calls: %d\n", r.Metrics.NCalls)
	if !r.Metrics.Failed {
		fmt.Fprintf(&b, "roots: %d  chains: %d  quarantined: %d (%s)  delivered: %d of %d generated tokens (%s)\n",
			r.Metrics.Roots, r.Metrics.Chains, r.Metrics.QuarantinedCalls, PyFloat(r.Metrics.QuarantinedFraction),
			r.Metrics.GeneratedTokensDelivered, r.Metrics.GeneratedTokensCaptured, PyFloat(r.Metrics.DeliveredFraction))
	}
	if len(r.Chains) > 0 {
		b.WriteString("\nchains:\n")
		for _, c := range r.Chains {
			ids := make([]string, len(c.Links))
			gen := 0
			for i, l := range c.Links {
				ids[i] = l.Entry.ModelCallID
				gen += len(l.Entry.GenerationTokenIDs)
			}
			fmt.Fprintf(&b, "  %-9s %s  (%d calls, root prompt %d tokens, %d generated tokens)\n",
				c.ID, strings.Join(ids, " -> "), len(c.Links), len(c.RootPrompt), gen)
		}
	}
	if len(r.Quarantined) > 0 {
		fmt.Fprintf(&b, "quarantined retries: %s\n", strings.Join(r.Quarantined, ", "))
	}
	if len(r.UnresolvedRetries) > 0 {
		fmt.Fprintf(&b, "unresolved retries: %s\n", strings.Join(r.UnresolvedRetries, ", "))
	}
	if len(r.EmptyGenerationCalls) > 0 {
		fmt.Fprintf(&b, "empty generations (dropped): %s\n", strings.Join(r.EmptyGenerationCalls, ", "))
	}
	if len(r.Metrics.ParentLinkFailures) > 0 {
		parts := make([]string, 0, len(r.Metrics.ParentLinkFailures))
		for _, k := range slices.Sorted(maps.Keys(r.Metrics.ParentLinkFailures)) {
			parts = append(parts, fmt.Sprintf("%s=%d", k, r.Metrics.ParentLinkFailures[k]))
		}
		fmt.Fprintf(&b, "parent link failures: %s\n", strings.Join(parts, ", "))
	}
	if len(r.UnresolvedParentCalls) > 0 {
		fmt.Fprintf(&b, "calls after an unproven parent link: %s\n", strings.Join(r.UnresolvedParentCalls, ", "))
	}
	if ta := r.Metrics.TerminalAttribution; ta != nil {
		b.WriteString("\nattribution:\n")
		callID := "none"
		if ta.CallID != nil {
			callID = *ta.CallID
		}
		fmt.Fprintf(&b, "  method %s, call %s, terminal chain %q\n", ta.Method, callID, ta.Chain)
		for _, step := range splitTrail(ta.Reason) {
			fmt.Fprintf(&b, "  - %s: %s\n", step, describeReason(step))
		}
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "\nerror: %s\n", r.Error)
	}
	b.WriteString("\n" + MaskExplanation(r) + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// splitTrail splits a reason trail on commas outside brackets.
func splitTrail(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

var reasonWords = map[string]string{
	attribution.ReasonExplicitNotCaptured:     "the explicit terminal call id names no captured call",
	attribution.ReasonDeclaredNotCaptured:     "the declared served response id matches no record",
	attribution.ReasonDeclaredAmbiguous:       "the declared served response id matches records with different tokens",
	attribution.ReasonResponseHasNoID:         "the verified response has no id",
	attribution.ReasonResponseIDNoMatch:       "no record was served with the verified response's id",
	attribution.ReasonResponseIDAmbiguous:     "several records with different tokens were served with that id",
	attribution.ReasonNoResponseObject:        "no verified response was given",
	attribution.ReasonResponseHasNoOutput:     "the verified response has no output items",
	attribution.ReasonOutputUnfingerprintable: "the verified response's items cannot be fingerprinted",
	attribution.ReasonNoModelAuthoredOutput:   "the verified response has no model-authored items",
	attribution.ReasonContentAmbiguous:        "its model-authored content matches records with different tokens",
	attribution.ReasonNoContentMatch:          "its model-authored content matches no record",
	attribution.ReasonAttributionError:        "attribution failed unexpectedly",
}

func describeReason(step string) string {
	if w, ok := reasonWords[step]; ok {
		return w
	}
	switch {
	case strings.HasPrefix(step, "witness_disagreement["):
		return "witnesses named calls with different tokens, so none is trusted"
	case strings.HasPrefix(step, "corroborated_by="):
		return "other witnesses agreed"
	}
	return "unrecognised reason"
}
