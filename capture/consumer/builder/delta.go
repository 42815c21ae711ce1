package builder

import "github.com/capbench/capbench/capture/record"

// materialiseDeltas replaces every `prompt_is_delta` record by a copy that
// holds its full prompt. A record whose ancestry cannot be walked back to a
// full-prompt anchor (missing parent, cycle, depth over maxDeltaDepth) or
// whose rebuilt sequence does not hash to its stamped digest is reported in
// the failed set instead. Each record is materialised once (memoised), so the
// work is linear in the number of tokens even for long delta chains.
func materialiseDeltas(entries []*record.Entry, byID map[string]*record.Entry) ([]*record.Entry, map[string]struct{}) {
	failed := map[string]struct{}{}
	hasDelta := false
	for _, e := range entries {
		if e.PromptIsDelta {
			hasDelta = true
			break
		}
	}
	if !hasDelta {
		return entries, failed
	}
	// cumulative holds the full prompt ++ generation of materialised delta
	// records; broken marks records whose ancestry cannot be walked.
	cumulative := map[*record.Entry][]int{}
	broken := map[*record.Entry]bool{}
	fullPrompt := map[*record.Entry][]int{}

	materialise := func(e *record.Entry) bool {
		// Walk up to the nearest anchor: a non-delta record or an already
		// materialised (or known broken) delta record.
		var hops []*record.Entry
		seen := map[*record.Entry]bool{}
		cur := e
		for {
			if !cur.PromptIsDelta {
				break
			}
			if _, ok := cumulative[cur]; ok {
				break
			}
			if broken[cur] || seen[cur] || len(hops) >= maxDeltaDepth {
				for _, h := range hops {
					broken[h] = true
				}
				return false
			}
			seen[cur] = true
			hops = append(hops, cur)
			if cur.ParentCallID == nil {
				for _, h := range hops {
					broken[h] = true
				}
				return false
			}
			parent, ok := byID[*cur.ParentCallID]
			if !ok {
				for _, h := range hops {
					broken[h] = true
				}
				return false
			}
			cur = parent
		}
		var running []int
		if c, ok := cumulative[cur]; ok {
			running = c
		} else {
			running = make([]int, 0, len(cur.PromptTokenIDs)+len(cur.GenerationTokenIDs))
			running = append(running, cur.PromptTokenIDs...)
			running = append(running, cur.GenerationTokenIDs...)
		}
		for i := len(hops) - 1; i >= 0; i-- {
			h := hops[i]
			prompt := make([]int, 0, len(running)+len(h.PromptTokenIDs)+len(h.GenerationTokenIDs))
			prompt = append(prompt, running...)
			prompt = append(prompt, h.PromptTokenIDs...)
			fullPrompt[h] = prompt[:len(prompt):len(prompt)]
			running = append(prompt, h.GenerationTokenIDs...)
			cumulative[h] = running
		}
		return true
	}

	out := make([]*record.Entry, 0, len(entries))
	for _, e := range entries {
		if !e.PromptIsDelta {
			out = append(out, e)
			continue
		}
		if !materialise(e) {
			failed[e.ModelCallID] = struct{}{}
			out = append(out, e)
			continue
		}
		if e.Digest != nil && *e.Digest != "" {
			d, err := record.TokenDigest(cumulative[e])
			if err != nil || d != *e.Digest {
				failed[e.ModelCallID] = struct{}{}
				out = append(out, e)
				continue
			}
		}
		copied := *e
		copied.PromptTokenIDs = fullPrompt[e]
		copied.PromptIsDelta = false
		out = append(out, &copied)
	}
	return out, failed
}
