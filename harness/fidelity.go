package harness

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/harness/env"
)

// Fidelity says whether the captured tokens equal what the model generated.
type Fidelity struct {
	// Checked is false when there was nothing to compare (no ledger: a real
	// vLLM; or no snapshot); Reason says why.
	Checked bool   `json:"checked"`
	Reason  string `json:"reason,omitempty"`
	// Calls is the number of captured calls compared; Matched of them equal
	// a ledger generation bit for bit.
	Calls   int `json:"calls"`
	Matched int `json:"matched"`
	// PrefixContiguous: every token-carrying item of the rebuilt response
	// extends the previous one's prompt + generation.
	PrefixContiguous bool     `json:"prefix_contiguous"`
	Problems         []string `json:"problems,omitempty"`
}

// OK reports a checked, fully matching capture.
func (f Fidelity) OK() bool {
	return f.Checked && f.Matched == f.Calls && f.PrefixContiguous && len(f.Problems) == 0
}

// Summary is a one-word rendering for tables.
func (f Fidelity) Summary() string {
	switch {
	case !f.Checked:
		return "n/a"
	case f.OK():
		return fmt.Sprintf("exact %d/%d", f.Matched, f.Calls)
	default:
		return fmt.Sprintf("BROKEN %d/%d", f.Matched, f.Calls)
	}
}

func promptKey(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(strconv.Itoa(id))
		b.WriteByte(',')
	}
	return b.String()
}

// CheckFidelity compares every captured call of snap with the fake's ledger
// (matched by prompt ids, each ledger generation to at most one call; token
// ids equal and log-probs equal bit for bit)
// and checks that the rebuilt response is prefix-contiguous.
func CheckFidelity(snap *store.Snapshot, ledger []env.LedgerEntry, rebuilt map[string]any) Fidelity {
	f := Fidelity{Checked: true, PrefixContiguous: true}
	if snap == nil {
		return Fidelity{Reason: "no snapshot was frozen"}
	}
	byPrompt := map[string][]env.LedgerEntry{}
	var oldest uint64
	for _, l := range ledger {
		k := promptKey(l.PromptTokenIDs)
		byPrompt[k] = append(byPrompt[k], l)
		if l.Seq > 0 && (oldest == 0 || l.Seq < oldest) {
			oldest = l.Seq
		}
	}
	// The fake's ledger is a bounded ring; the harness reads it after each
	// scenario, so a scenario's generations are still there unless one
	// scenario alone outgrew the bound. Say so rather than blame the proxy.
	dropped := ""
	if oldest > 1 {
		dropped = fmt.Sprintf("; the fake's bounded ledger had dropped its %d oldest generations, so this one may be among them "+
			"(raise the fake's --ledger-max-bytes or --ledger-limit)", oldest-1)
	}
	usedByPrompt := map[string][]bool{}
	for _, e := range snap.Entries {
		f.Calls++
		if e.PromptIsDelta {
			f.Problems = append(f.Problems, fmt.Sprintf("call %s: delta record, prompt not comparable", e.ModelCallID))
			continue
		}
		key := promptKey(e.PromptTokenIDs)
		cands := byPrompt[key]
		// Each ledger generation backs at most one captured call, so a
		// duplicated record cannot pass as exact.
		used := usedByPrompt[key]
		if used == nil {
			used = make([]bool, len(cands))
			usedByPrompt[key] = used
		}
		if len(cands) == 0 {
			f.Problems = append(f.Problems, fmt.Sprintf("call %s: no ledger generation has this %d-token prompt%s", e.ModelCallID, len(e.PromptTokenIDs), dropped))
			continue
		}
		var why string
		matched := false
		for i, l := range cands {
			if used[i] {
				continue
			}
			if d := diffGeneration(e.GenerationTokenIDs, e.GenerationLogProbs, l); d == "" {
				matched = true
				used[i] = true
				break
			} else if why == "" {
				why = d
			}
		}
		switch {
		case matched:
			f.Matched++
		case why == "":
			// Every equal generation already backs another captured call:
			// the proxy recorded one generation twice.
			f.Problems = append(f.Problems, fmt.Sprintf("call %s: its generation is already matched by another captured call (recorded twice?)", e.ModelCallID))
		default:
			f.Problems = append(f.Problems, fmt.Sprintf("call %s: %s", e.ModelCallID, why))
		}
	}
	if rebuilt != nil {
		if p := prefixContiguity(rebuilt); p != "" {
			f.PrefixContiguous = false
			f.Problems = append(f.Problems, p)
		}
	}
	return f
}

func diffGeneration(ids []int, lps []float64, l env.LedgerEntry) string {
	if len(ids) != len(l.GeneratedTokenIDs) {
		return fmt.Sprintf("generation has %d tokens, ledger %d", len(ids), len(l.GeneratedTokenIDs))
	}
	for i := range ids {
		if ids[i] != l.GeneratedTokenIDs[i] {
			return fmt.Sprintf("token %d is %d, ledger %d", i, ids[i], l.GeneratedTokenIDs[i])
		}
	}
	if len(lps) != len(l.LogProbs) {
		return fmt.Sprintf("%d log-probs, ledger %d", len(lps), len(l.LogProbs))
	}
	for i := range lps {
		if math.Float64bits(lps[i]) != math.Float64bits(l.LogProbs[i]) {
			return fmt.Sprintf("log-prob %d is %v, ledger %v (not bit-equal)", i, lps[i], l.LogProbs[i])
		}
	}
	return ""
}

// prefixContiguity checks the projection: each token-carrying output item's
// prompt starts with the previous carrier's prompt + generation.
func prefixContiguity(rebuilt map[string]any) string {
	items, _ := rebuilt["output"].([]any)
	var prev []int
	for i, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		gen, okG := intSlice(m["generation_token_ids"])
		prompt, okP := intSlice(m["prompt_token_ids"])
		if !okG || !okP {
			continue
		}
		if prev != nil {
			if len(prompt) < len(prev) {
				return fmt.Sprintf("rebuilt item %d: prompt (%d tokens) is shorter than the previous prompt+generation (%d)", i, len(prompt), len(prev))
			}
			for j := range prev {
				if prompt[j] != prev[j] {
					return fmt.Sprintf("rebuilt item %d: prompt differs from the previous prompt+generation at token %d", i, j)
				}
			}
		}
		prev = append(append([]int{}, prompt...), gen...)
	}
	return ""
}

func intSlice(v any) ([]int, bool) {
	switch s := v.(type) {
	case []int:
		return s, true
	case []any:
		out := make([]int, len(s))
		for i, x := range s {
			switch n := x.(type) {
			case float64:
				out[i] = int(n)
			case int:
				out[i] = n
			case json.Number:
				v, err := n.Int64()
				if err != nil {
					return nil, false
				}
				out[i] = int(v)
			default:
				return nil, false
			}
		}
		return out, true
	}
	return nil, false
}
