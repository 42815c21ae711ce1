package builder

import (
	"encoding/json"
	"maps"
	"strconv"

	"github.com/capbench/capbench/capture/record"
)

// Persisted projection errors (the consumer prefixes the error type).
const (
	MsgNoSafeChain       = "capture produced no safe trainable chain"
	MsgNoGeneratedTokens = "capture produced no trainable generated tokens"
	MsgNotContiguous     = "projection is not prefix-contiguous: an output item's prompt_token_ids does not extend the tokens seen so far"
)

// Project rebuilds the main chain (or the first chain) as one Responses
// payload whose token-bearing items describe a single contiguous sequence.
func Project(rolloutID string, out *Output, model string) (map[string]any, error) {
	main := out.Main()
	if main == nil {
		return nil, valueError(MsgNoSafeChain)
	}
	output := ProjectChain(main)
	nIn, nOut, hasTokens := 0, 0, false
	first := true
	for _, item := range output {
		gen, present := tokenList(item["generation_token_ids"])
		if !present {
			continue
		}
		if len(gen) > 0 {
			hasTokens = true
		}
		if first {
			p, _ := tokenList(item["prompt_token_ids"])
			nIn = len(p)
			first = false
		}
		nOut += len(gen)
	}
	if !hasTokens {
		return nil, valueError(MsgNoGeneratedTokens)
	}
	items := make([]any, len(output))
	for i, it := range output {
		items[i] = it
	}
	return map[string]any{
		"id":     "proj-" + rolloutID,
		"model":  model,
		"object": "response",
		"output": items,
		"usage":  map[string]any{"input_tokens": nIn, "output_tokens": nOut},
	}, nil
}

// ProjectChain turns a chain into Responses output items. Every carrier item
// gets the full running prompt; all carriers share one backing array, so the
// projection costs O(tokens) memory, not O(calls × tokens).
func ProjectChain(c *Chain) []map[string]any {
	var items []map[string]any
	running := make([]int, 0, chainTokens(c))
	running = append(running, c.RootPrompt...)
	for step, link := range c.Links {
		if step > 0 {
			running = append(running, link.Interstitial...)
		}
		e := link.Entry
		prompt := running[:len(running):len(running)]
		content := make([]map[string]any, len(e.OutputItems))
		for i, it := range e.OutputItems {
			content[i] = maps.Clone(map[string]any(it))
			if content[i] == nil {
				content[i] = map[string]any{}
			}
		}
		var carriers []int
		if idx := e.TokenItemIndex; idx != nil && *idx >= 0 && *idx < len(content) {
			carriers = []int{*idx}
		} else {
			for i, it := range content {
				if v, ok := it["generation_token_ids"]; ok && v != nil {
					carriers = append(carriers, i)
				}
			}
		}
		if len(carriers) == 0 && len(content) > 0 {
			carriers = []int{len(content) - 1}
		}
		if len(content) > 0 {
			for _, i := range carriers {
				setTokens(content[i], prompt, e)
			}
			items = append(items, content...)
		} else {
			item := map[string]any{"type": "message"}
			setTokens(item, prompt, e)
			items = append(items, item)
		}
		running = append(running, e.GenerationTokenIDs...)
	}
	return items
}

func chainTokens(c *Chain) int {
	n := len(c.RootPrompt)
	for _, l := range c.Links {
		n += len(l.Interstitial) + len(l.Entry.GenerationTokenIDs)
	}
	return n
}

func setTokens(item map[string]any, prompt []int, e *record.Entry) {
	item["prompt_token_ids"] = prompt
	item["generation_token_ids"] = nonNilInts(e.GenerationTokenIDs)
	lp := e.GenerationLogProbs
	if lp == nil {
		lp = []float64{}
	}
	item["generation_log_probs"] = lp
	if !isNullRaw(e.RoutedExperts) {
		item["routed_experts"] = e.RoutedExperts
	}
}

func nonNilInts(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

func isNullRaw(r json.RawMessage) bool {
	if len(r) == 0 {
		return true
	}
	for _, b := range r {
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return string(trimSpace(r)) == "null"
	}
	return true
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// tokenList reads a token array from an item value of any decoded shape.
// present is false when the key is absent or null.
func tokenList(v any) (tokens []int, present bool) {
	switch t := v.(type) {
	case nil:
		return nil, false
	case []int:
		return t, true
	case []any:
		out := make([]int, 0, len(t))
		for _, x := range t {
			n, ok := toInt(x)
			if !ok {
				return out, true
			}
			out = append(out, n)
		}
		return out, true
	default:
		return nil, true
	}
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case float64:
		return int(n), float64(int(n)) == n
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		return int(i), err == nil
	}
	return 0, false
}

// CheckContiguity requires every token-bearing output item's prompt to
// extend everything seen so far (earlier prompts and generations). The seen
// sequence is kept as two slices (previous prompt, previous generation) so
// nothing is copied.
func CheckContiguity(resp map[string]any) error {
	output, _ := resp["output"].([]any)
	var seenPrompt, seenGen []int
	for _, raw := range output {
		item, ok := raw.(map[string]any)
		if !ok {
			continue
		}
		gen, present := tokenList(item["generation_token_ids"])
		if !present {
			continue
		}
		prompt, _ := tokenList(item["prompt_token_ids"])
		if len(prompt) < len(seenPrompt)+len(seenGen) ||
			!prefixEqual(prompt, seenPrompt) ||
			!prefixEqual(prompt[len(seenPrompt):], seenGen) {
			return assertionError(MsgNotContiguous)
		}
		seenPrompt, seenGen = prompt, gen
	}
	return nil
}

// prefixEqual reports whether a starts with b; shared memory short-circuits.
func prefixEqual(a, b []int) bool {
	if len(b) == 0 {
		return true
	}
	if len(a) < len(b) {
		return false
	}
	if &a[0] == &b[0] {
		return true
	}
	for i := range b {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
