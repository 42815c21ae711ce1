// Package attribution decides which captured model call produced the
// response a verifier scored (terminal attribution): independent witnesses —
// an explicit call id, a declared served response id, the response's own id,
// and the fingerprint of its model-authored content — that must agree. It
// never fails: malformed input is an abstention with a reason.
package attribution

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
)

// Method labels of the witness that named the terminal call.
const (
	MethodExplicit          = "explicit"
	MethodDeclared          = "declared"
	MethodResponseID        = "response_id"
	MethodContentCumulative = "content_cumulative"
	MethodContentOutput     = "content_output"
	// MethodNone is what the consumer reports for an unattributed rollout.
	MethodNone = "none"
)

// Reason codes accumulated in the attribution trail.
const (
	ReasonExplicitNotCaptured     = "explicit_terminal_not_captured"
	ReasonDeclaredNotCaptured     = "declared_terminal_not_captured"
	ReasonDeclaredAmbiguous       = "declared_ambiguous"
	ReasonResponseHasNoID         = "response_has_no_id"
	ReasonResponseIDNoMatch       = "response_id_no_match"
	ReasonResponseIDAmbiguous     = "response_id_ambiguous"
	ReasonNoResponseObject        = "no_response_object"
	ReasonResponseHasNoOutput     = "response_has_no_output"
	ReasonOutputUnfingerprintable = "response_output_unfingerprintable"
	ReasonNoModelAuthoredOutput   = "no_model_authored_output"
	ReasonContentAmbiguous        = "content_ambiguous"
	ReasonNoContentMatch          = "no_content_match"
	// ReasonAttributionError is the consumer's reason when attribution
	// itself failed.
	ReasonAttributionError = "attribution_error"
)

// Inputs are the evidence about the scored response.
type Inputs struct {
	// Response is the scored response object; nil or empty counts as none.
	Response map[string]any
	// ExplicitCallID names the kept call directly (gate seal or agent).
	ExplicitCallID string
	// DeclaredResponseID is the served response id the harness says it kept.
	DeclaredResponseID string
}

// Result is the joined terminal call, or the reasons no witness named one.
type Result struct {
	CallID string // "" when unattributed
	Method string // "" when unattributed
	Reason string // the trail, joined with ","
}

// Attributed reports whether a witness named a terminal call.
func (r Result) Attributed() bool { return r.CallID != "" }

type witness struct {
	method string
	entry  *record.Entry
}

// Resolve joins the scored response to one captured call. entries are the
// raw snapshot entries (before any builder filtering).
func Resolve(entries []*record.Entry, in Inputs) Result {
	var reasons []string
	byID := make(map[string]*record.Entry, len(entries))
	for _, e := range entries {
		if e != nil {
			byID[e.ModelCallID] = e // the last copy wins, as in a dict
		}
	}
	var witnesses []witness

	if in.ExplicitCallID != "" {
		if e, ok := byID[in.ExplicitCallID]; ok {
			witnesses = append(witnesses, witness{MethodExplicit, e})
		} else {
			reasons = append(reasons, ReasonExplicitNotCaptured)
		}
	}

	if in.DeclaredResponseID != "" {
		var matches []*record.Entry
		for _, e := range entries {
			if e != nil && e.ResponseID != nil && *e.ResponseID == in.DeclaredResponseID {
				matches = append(matches, e)
			}
		}
		winner := collapse(matches)
		if winner == nil {
			// A declaration is authoritative: never fall back.
			if len(matches) > 0 {
				reasons = append(reasons, ReasonDeclaredAmbiguous)
			} else {
				reasons = append(reasons, ReasonDeclaredNotCaptured)
			}
			return Result{Reason: strings.Join(reasons, ",")}
		}
		witnesses = append(witnesses, witness{MethodDeclared, winner})
	}

	if len(in.Response) > 0 {
		if id := responseIDString(in.Response["id"]); id != "" {
			var matches []*record.Entry
			for _, e := range entries {
				if e != nil && e.ResponseID != nil && *e.ResponseID != "" && *e.ResponseID == id {
					matches = append(matches, e)
				}
			}
			switch winner := collapse(matches); {
			case len(matches) == 0:
				reasons = append(reasons, ReasonResponseIDNoMatch)
			case winner == nil:
				reasons = append(reasons, ReasonResponseIDAmbiguous)
			default:
				witnesses = append(witnesses, witness{MethodResponseID, winner})
			}
		} else {
			reasons = append(reasons, ReasonResponseHasNoID)
		}
		if w, ok := contentWitness(entries, in.Response, &reasons); ok {
			witnesses = append(witnesses, w)
		}
	} else {
		reasons = append(reasons, ReasonNoResponseObject)
	}

	if len(witnesses) == 0 {
		return Result{Reason: strings.Join(reasons, ",")}
	}
	named := make([]*record.Entry, len(witnesses))
	for i, w := range witnesses {
		named[i] = w.entry
	}
	if collapse(named) == nil {
		parts := make([]string, len(witnesses))
		for i, w := range witnesses {
			parts[i] = w.method + "=" + w.entry.ModelCallID
		}
		reasons = append(reasons, "witness_disagreement["+strings.Join(parts, ";")+"]")
		return Result{Reason: strings.Join(reasons, ",")}
	}
	if len(witnesses) > 1 {
		others := make([]string, 0, len(witnesses)-1)
		for _, w := range witnesses[1:] {
			others = append(others, w.method)
		}
		reasons = append(reasons, "corroborated_by="+strings.Join(others, "+"))
	}
	return Result{CallID: witnesses[0].entry.ModelCallID, Method: witnesses[0].method, Reason: strings.Join(reasons, ",")}
}

// responseIDString renders the response's id as Python's str(id or "") does
// for the JSON types an id can have.
func responseIDString(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case bool:
		if t {
			return "True"
		}
		return ""
	case json.Number:
		if f, err := t.Float64(); err == nil && f == 0 {
			return ""
		}
		return t.String()
	case float64:
		if t == 0 {
			return ""
		}
		if t == float64(int64(t)) && !strings.ContainsAny(strconv.FormatFloat(t, 'g', -1, 64), "e") {
			return strconv.FormatFloat(t, 'f', 1, 64)
		}
		return strconv.FormatFloat(t, 'g', -1, 64)
	case int:
		if t == 0 {
			return ""
		}
		return strconv.Itoa(t)
	case []any:
		if len(t) == 0 {
			return ""
		}
	case map[string]any:
		if len(t) == 0 {
			return ""
		}
	}
	// A non-empty list or object id: any stable rendering; it cannot equal
	// a recorded served id in practice.
	return fmt.Sprint(v)
}

// sequenceIdentity identifies an entry by its full token sequence.
func sequenceIdentity(e *record.Entry) string {
	if e.Digest != nil && *e.Digest != "" && e.CumLen != nil {
		return "d:" + *e.Digest + ":" + strconv.Itoa(*e.CumLen)
	}
	var b strings.Builder
	b.WriteString("t:")
	for _, t := range e.PromptTokenIDs {
		b.WriteString(strconv.Itoa(t))
		b.WriteByte(',')
	}
	b.WriteByte('|')
	for _, t := range e.GenerationTokenIDs {
		b.WriteString(strconv.Itoa(t))
		b.WriteByte(',')
	}
	return b.String()
}

// collapse reduces candidates with one sequence identity to the smallest
// call id; candidates with different sequences are ambiguous (nil).
func collapse(candidates []*record.Entry) *record.Entry {
	switch len(candidates) {
	case 0:
		return nil
	case 1:
		return candidates[0]
	}
	first := sequenceIdentity(candidates[0])
	best := candidates[0]
	for _, c := range candidates[1:] {
		if c != candidates[0] && sequenceIdentity(c) != first {
			return nil
		}
		if c.ModelCallID < best.ModelCallID {
			best = c
		}
	}
	return best
}

// isModelAuthored mirrors the fingerprint's notion of a model-authored item.
func isModelAuthored(item map[string]any) bool {
	role, _ := item["role"].(string)
	typ, _ := item["type"].(string)
	return role == "assistant" || typ == "function_call"
}

func contentWitness(entries []*record.Entry, response map[string]any, reasons *[]string) (witness, bool) {
	output, ok := response["output"].([]any)
	if !ok || len(output) == 0 {
		*reasons = append(*reasons, ReasonResponseHasNoOutput)
		return witness{}, false
	}
	var items []any
	for _, it := range output {
		if m, ok := it.(map[string]any); ok {
			items = append(items, m)
		}
	}
	target, err := lineage.AssistantFingerprint(items)
	if err != nil {
		*reasons = append(*reasons, ReasonOutputUnfingerprintable)
		return witness{}, false
	}
	if target == "" {
		*reasons = append(*reasons, ReasonNoModelAuthoredOutput)
		return witness{}, false
	}
	// The trailing block of model-authored items is the terminal call's own
	// output in a merged transcript.
	start := len(items)
	for start > 0 && isModelAuthored(items[start-1].(map[string]any)) {
		start--
	}
	tail := ""
	if start < len(items) && start > 0 {
		if fp, err := lineage.AssistantFingerprint(items[start:]); err == nil {
			tail = fp
		}
	}

	matchOrder := []string{}
	matches := map[string]*record.Entry{}
	cumulativeHit := false
	match := func(e *record.Entry) {
		if _, seen := matches[e.ModelCallID]; !seen {
			matchOrder = append(matchOrder, e.ModelCallID)
		}
		matches[e.ModelCallID] = e
	}
	for _, e := range entries {
		if e == nil {
			continue
		}
		if c := e.ContinuationFingerprint; c != "" && c == target &&
			(e.FingerprintVersion == nil || *e.FingerprintVersion == lineage.FingerprintVersion) {
			match(e)
			cumulativeHit = true
		}
		if len(e.OutputItems) > 0 {
			own, err := lineage.AssistantFingerprint(itemsOf(e))
			if err != nil {
				continue
			}
			if own != "" && (own == target || (tail != "" && own == tail)) {
				match(e)
			}
		}
	}
	pooled := make([]*record.Entry, len(matchOrder))
	for i, id := range matchOrder {
		pooled[i] = matches[id]
	}
	if winner := collapse(pooled); winner != nil {
		if cumulativeHit {
			return witness{MethodContentCumulative, winner}, true
		}
		return witness{MethodContentOutput, winner}, true
	}
	if len(pooled) > 0 {
		*reasons = append(*reasons, ReasonContentAmbiguous)
	} else {
		*reasons = append(*reasons, ReasonNoContentMatch)
	}
	return witness{}, false
}

func itemsOf(e *record.Entry) []any {
	out := make([]any, len(e.OutputItems))
	for i, it := range e.OutputItems {
		out[i] = map[string]any(it)
	}
	return out
}
