package proxy

import (
	"encoding/json"
	"strings"
)

// chatAccumulator rebuilds, from a chat completion's chunks, the completion
// the engine would have answered to the same request without streaming, so
// that a streamed call is recorded exactly as a buffered one (the message
// fields follow vLLM's non-streaming ChatMessage).
type chatAccumulator struct {
	id, created, model, fingerprint, usage any
	promptIDs                              []int
	hasPrompt                              bool
	genIDs                                 []int
	hasGenIDs                              bool
	lp                                     chatLogprobs
	lpRaw                                  [][]byte
	content, reasoning                     strings.Builder
	sawContent, sawReasoning               bool
	calls                                  []*streamedCall
	finish, stopReason                     any
	chunks                                 int
}

type streamedCall struct {
	id, typ, name string
	args          strings.Builder
}

// add folds one decoded chunk in.
func (a *chatAccumulator) add(c map[string]any) {
	a.chunks++
	if a.id == nil {
		a.id, a.created, a.model = c["id"], c["created"], c["model"]
	}
	if v, ok := c["system_fingerprint"]; ok && v != nil {
		a.fingerprint = v
	}
	if v, ok := c["usage"]; ok && v != nil {
		a.usage = v
	}
	if v := c["prompt_token_ids"]; v != nil {
		if ids, err := asIntSlice(v); err == nil {
			a.promptIDs, a.hasPrompt = ids, true
		}
	}
	choices, _ := c["choices"].([]any)
	for _, ch := range choices {
		choice, ok := ch.(map[string]any)
		if !ok {
			continue
		}
		if idx, err := asInt(choice["index"]); err == nil && idx != 0 {
			continue // n is 1 on the capture path
		}
		a.addChoice(choice)
	}
}

func (a *chatAccumulator) addChoice(choice map[string]any) {
	if delta, ok := choice["delta"].(map[string]any); ok {
		if s, ok := delta["content"].(string); ok {
			a.content.WriteString(s)
			a.sawContent = true
		}
		for _, k := range []string{"reasoning", "reasoning_content"} {
			if s, ok := delta[k].(string); ok {
				a.reasoning.WriteString(s)
				a.sawReasoning = true
				break
			}
		}
		tcs, _ := delta["tool_calls"].([]any)
		for _, t := range tcs {
			a.addToolDelta(t)
		}
	}
	if lp, ok := choice["logprobs"].(*chatLogprobs); ok && lp != nil {
		a.lp.hasList = a.lp.hasList || lp.hasList
		a.lp.content = append(a.lp.content, lp.content...)
		_ = eachField(lp.raw, func(key string, val []byte) error {
			if key == "content" {
				_ = eachElem(val, func(e []byte) error { a.lpRaw = append(a.lpRaw, e); return nil })
			}
			return nil
		})
	}
	if v := choice["token_ids"]; v != nil {
		if ids, err := asIntSlice(v); err == nil {
			a.genIDs = append(a.genIDs, ids...)
			a.hasGenIDs = true
		}
	}
	if f := choice["finish_reason"]; f != nil {
		a.finish, a.stopReason = f, choice["stop_reason"]
	}
}

// addToolDelta folds one tool_calls delta: the first for an index carries
// the id and name, later ones argument fragments.
func (a *chatAccumulator) addToolDelta(t any) {
	d, ok := t.(map[string]any)
	if !ok {
		return
	}
	idx, err := asInt(d["index"])
	if err != nil || idx < 0 || idx > 1024 {
		return
	}
	for len(a.calls) <= idx {
		a.calls = append(a.calls, &streamedCall{typ: "function"})
	}
	c := a.calls[idx]
	if s, ok := d["id"].(string); ok && s != "" {
		c.id = s
	}
	if s, ok := d["type"].(string); ok && s != "" {
		c.typ = s
	}
	fn, _ := d["function"].(map[string]any)
	if s, ok := fn["name"].(string); ok && s != "" {
		c.name = s
	}
	if s, ok := fn["arguments"].(string); ok {
		c.args.WriteString(s)
	}
}

// reasoningParser reports whether the engine runs a reasoning parser: vLLM
// then counts reasoning tokens in the usage.
func (a *chatAccumulator) reasoningParser() bool {
	u, _ := a.usage.(map[string]any)
	d, _ := u["completion_tokens_details"].(map[string]any)
	_, ok := d["reasoning_tokens"]
	return ok
}

// forcedToolChoice reports a tool_choice under which vLLM answers content ""
// next to the calls (required or a named function).
func forcedToolChoice(v any) bool {
	switch x := v.(type) {
	case string:
		return x == "required"
	case map[string]any:
		return true
	}
	return false
}

// completion is the non-streaming completion equivalent to the chunks.
func (a *chatAccumulator) completion(outbound map[string]any) map[string]any {
	var content any
	text := a.content.String()
	switch {
	case len(a.calls) > 0 && forcedToolChoice(outbound["tool_choice"]):
		content = ""
	case len(a.calls) > 0 && strings.TrimSpace(text) == "":
		// vLLM's tool parser answers null for a whitespace-only preamble.
	case text == "" && (a.sawReasoning || a.reasoningParser()):
		// The reasoning parser answers null when nothing follows the reasoning.
	case a.sawContent:
		content = text
	}
	var reasoning any
	if a.sawReasoning {
		reasoning = a.reasoning.String()
	}
	msg := map[string]any{"role": "assistant", "content": content, "refusal": nil, "annotations": nil,
		"audio": nil, "function_call": nil, "reasoning": reasoning}
	if len(a.calls) > 0 {
		calls := make([]any, 0, len(a.calls))
		for _, c := range a.calls {
			calls = append(calls, map[string]any{"id": c.id, "type": c.typ,
				"function": map[string]any{"name": c.name, "arguments": c.args.String()}})
		}
		msg["tool_calls"] = calls
	}
	choice := map[string]any{"index": 0, "message": msg, "finish_reason": a.finish, "stop_reason": a.stopReason}
	if a.lp.hasList {
		lp := a.lp
		lp.raw = joinRaw(`{"content":[`, a.lpRaw, `]}`)
		choice["logprobs"] = &lp
	} else {
		choice["logprobs"] = nil
	}
	if a.hasGenIDs {
		choice["token_ids"] = a.genIDs
	}
	usage := a.usage
	if usage == nil {
		usage = map[string]any{"prompt_tokens": len(a.promptIDs), "completion_tokens": len(a.genIDs),
			"total_tokens": len(a.promptIDs) + len(a.genIDs)}
	}
	resp := map[string]any{"id": a.id, "object": "chat.completion", "created": a.created, "model": a.model,
		"choices": []any{choice}, "usage": usage, "system_fingerprint": a.fingerprint}
	if a.hasPrompt {
		resp["prompt_token_ids"] = a.promptIDs
	}
	return resp
}

func joinRaw(open string, parts [][]byte, closing string) json.RawMessage {
	n := len(open) + len(closing) + len(parts)
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	b = append(b, open...)
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, p...)
	}
	return append(b, closing...)
}
