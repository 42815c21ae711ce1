package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/capbench/capbench/capture/lineage"
)

// responsesFromChat converts a chat completion into a Responses object the
// way the Python engine adapter does (docs/record.md#reading-tokens-from-a-served-reply): an optional reasoning item, an
// optional message item, one function_call item per tool call, and the token
// bundle on the LAST item. An empty generation still gets a message item so
// the tokens have a carrier. ids, when set, are the item ids a stream has
// already announced; otherwise fresh ones are minted.
func responsesFromChat(resp map[string]any, id string, tok *tokenInfo, ids *itemIDs) (map[string]any, error) {
	if ids == nil {
		ids = &itemIDs{}
	}
	mint := func(have *string, prefix string) string {
		if *have == "" {
			*have = prefix + newCallID()
		}
		return *have
	}
	choice, msg, err := firstChoice(resp)
	if err != nil {
		return nil, err
	}
	var items []any
	if r, ok := nonEmptyString(msg["reasoning"]); ok {
		items = append(items, map[string]any{"type": "reasoning", "id": mint(&ids.reasoning, "rs_"), "summary": []any{},
			"content": []any{map[string]any{"type": "reasoning_text", "text": r}}})
	} else if r, ok := nonEmptyString(msg["reasoning_content"]); ok {
		items = append(items, map[string]any{"type": "reasoning", "id": mint(&ids.reasoning, "rs_"), "summary": []any{},
			"content": []any{map[string]any{"type": "reasoning_text", "text": r}}})
	}
	calls, _ := msg["tool_calls"].([]any)
	// Entries that are not objects are skipped, so the message item is
	// decided on the calls actually converted: otherwise a reply whose
	// tool_calls are all malformed would leave no carrier for the tokens.
	var fnItems []any
	for _, c := range calls {
		call, ok := c.(map[string]any)
		if !ok {
			continue
		}
		fn, _ := call["function"].(map[string]any)
		if len(ids.calls) <= len(fnItems) {
			ids.calls = append(ids.calls, "fc_"+newCallID())
		}
		fnItems = append(fnItems, map[string]any{"type": "function_call", "id": ids.calls[len(fnItems)], "call_id": call["id"],
			"name": fn["name"], "arguments": fn["arguments"], "status": "completed"})
	}
	text, hasText := nonEmptyString(msg["content"])
	if hasText || (len(fnItems) == 0 && len(items) == 0) {
		items = append(items, map[string]any{"type": "message", "id": mint(&ids.message, "msg_"), "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
	}
	items = append(items, fnItems...)
	if tok != nil {
		attachTokens(items[len(items)-1].(map[string]any), tok)
	}
	status := "completed"
	var incomplete any
	if choice["finish_reason"] == "length" {
		status = "incomplete"
		incomplete = map[string]any{"reason": "max_output_tokens"}
	}
	created := resp["created"]
	if created == nil {
		created = time.Now().Unix()
	}
	usage, _ := resp["usage"].(map[string]any)
	return map[string]any{
		"id": id, "object": "response", "created_at": created, "status": status, "model": resp["model"],
		"output": items, "incomplete_details": incomplete, "error": nil,
		"usage": map[string]any{
			"input_tokens": numberOrZero(usage["prompt_tokens"]), "output_tokens": numberOrZero(usage["completion_tokens"]),
			"total_tokens": numberOrZero(usage["total_tokens"]),
		},
	}, nil
}

func numberOrZero(v any) any {
	if v == nil {
		return 0
	}
	return v
}

// stripItemTokens removes the token bundle from Responses output items.
func stripItemTokens(obj map[string]any) {
	items, _ := obj["output"].([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			for _, k := range []string{keyPromptIDs, keyGenerationIDs, keyLogProbs, keyRoutedExperts} {
				delete(m, k)
			}
		}
	}
}

// responsesToChat translates a Responses request into a chat request.
// raw is the client's body: tool schemas and non-string tool outputs are
// passed on as written (their key order reaches the prompt).
func responsesToChat(body map[string]any, raw []byte) (map[string]any, error) {
	rawParams, rawOutputs := responsesRaw(raw)
	out := map[string]any{}
	if m, ok := body["model"]; ok {
		out["model"] = m
	}
	var msgs []any
	if s, ok := body["instructions"].(string); ok && s != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": s})
	}
	switch in := body["input"].(type) {
	case string:
		msgs = append(msgs, map[string]any{"role": "user", "content": in})
	case []any:
		var pending map[string]any // assistant message collecting function calls
		flush := func() {
			if pending != nil {
				msgs = append(msgs, pending)
				pending = nil
			}
		}
		for i, raw := range in {
			it, ok := raw.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("input[%d]: not an object", i)
			}
			typ, _ := it["type"].(string)
			role, _ := it["role"].(string)
			switch {
			case typ == "function_call":
				if pending == nil {
					pending = map[string]any{"role": "assistant", "content": nil}
				}
				calls, _ := pending["tool_calls"].([]any)
				pending["tool_calls"] = append(calls, map[string]any{"id": it["call_id"], "type": "function",
					"function": map[string]any{"name": it["name"], "arguments": it["arguments"]}})
			case typ == "function_call_output":
				flush()
				out := it["output"]
				if _, ok := out.(string); !ok {
					var b []byte
					if r, ok := rawOutputs[i]; ok {
						b, _ = marshalGeneric(r)
					} else {
						b, _ = marshalGeneric(out)
					}
					out = string(b)
				}
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": it["call_id"], "content": out})
			case typ == "reasoning":
				if pending == nil {
					pending = map[string]any{"role": "assistant", "content": nil}
				}
				var parts []string
				for _, key := range []string{"content", "summary"} {
					if t := textOf(it[key]); t != "" {
						parts = append(parts, t)
					}
				}
				pending["reasoning"] = strings.Join(parts, "")
			case typ == "message" || (typ == "" && role != ""):
				if role == "assistant" {
					if pending == nil {
						pending = map[string]any{"role": "assistant"}
					}
					pending["content"] = textOf(it["content"])
					continue
				}
				flush()
				if role == "developer" {
					role = "system"
				}
				msgs = append(msgs, map[string]any{"role": role, "content": textOf(it["content"])})
			default:
				return nil, fmt.Errorf("input[%d]: unsupported item type %q", i, typ)
			}
		}
		flush()
	case nil:
		return nil, errors.New("input: field required")
	default:
		return nil, fmt.Errorf("input: expected a string or a list of items, got %T", in)
	}
	out["messages"] = msgs
	if tools, ok := body["tools"].([]any); ok && len(tools) > 0 {
		var ct []any
		for k, t := range tools {
			tm, ok := t.(map[string]any)
			if !ok || tm["type"] != "function" {
				continue
			}
			fn := map[string]any{"name": tm["name"], "parameters": tm["parameters"]}
			if r, ok := rawParams[k]; ok && tm["parameters"] != nil {
				fn["parameters"] = r
			}
			if d, ok := tm["description"]; ok {
				fn["description"] = d
			}
			ct = append(ct, map[string]any{"type": "function", "function": fn})
		}
		if len(ct) > 0 {
			out["tools"] = ct
		}
	}
	switch tc := body["tool_choice"].(type) {
	case string:
		out["tool_choice"] = tc
	case map[string]any:
		if tc["type"] == "function" {
			out["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": tc["name"]}}
		}
	}
	if v, ok := body["max_output_tokens"]; ok && v != nil {
		out["max_tokens"] = v
	}
	for _, k := range []string{"temperature", "top_p", "top_k", "parallel_tool_calls"} {
		if v, ok := body[k]; ok && v != nil {
			out[k] = v
		}
	}
	return out, nil
}

// handleResponses serves /v1/responses by translating to chat.
func (p *Proxy) handleResponses(w http.ResponseWriter, r *http.Request, cc *callCtx, body map[string]any) {
	out, err := responsesToChat(body, cc.raw)
	if err != nil {
		writeOpenAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	stream := streamRequested(body)
	p.requestItems(cc, lineage.DialectResponses, body)
	ctx := r.Context()
	id := newResponseID()
	var sink *responsesSink
	p.runCall(w, r, cc, &modelCall{path: pathChat, out: out, stream: stream, errw: writeOpenAIError, passBody: true,
		sink: func(bw *bufio.Writer) streamSink { sink = newResponsesSink(bw, id); return sink },
		commitStream: func(resp map[string]any, tok *tokenInfo, tokErr error) {
			p.commitResponses(ctx, cc, resp, id, tok, tokErr, &sink.ids)
		},
		reply: func(w http.ResponseWriter, resp map[string]any, tok *tokenInfo, tokErr error) {
			obj, err := responsesFromChat(resp, id, tok, nil)
			if err != nil {
				if cc.capture {
					p.markIncomplete(ctx, cc, "capture_error", err)
				}
				writeOpenAIError(w, http.StatusBadGateway, "upstream reply cannot be converted: "+err.Error())
				return
			}
			p.commit(ctx, cc, obj, tokErr)
			stripItemTokens(obj)
			if !stream {
				writeJSON(w, http.StatusOK, obj)
				return
			}
			writeResponsesStream(w, obj)
		}})
}

// writeResponsesStream replays a complete Responses object as typed events.
func writeResponsesStream(w http.ResponseWriter, obj map[string]any) {
	sseHeaders(w)
	bw := bufio.NewWriterSize(w, 16*1024)
	seq := 0
	ev := func(name string, v map[string]any) {
		v["type"] = name
		v["sequence_number"] = seq
		seq++
		b, err := marshalGeneric(v)
		if err != nil {
			return
		}
		_, _ = bw.WriteString("event: " + name + "\ndata: ")
		_, _ = bw.Write(b)
		_, _ = bw.WriteString("\n\n")
	}
	inProgress := map[string]any{}
	for k, v := range obj {
		inProgress[k] = v
	}
	inProgress["status"] = "in_progress"
	inProgress["output"] = []any{}
	ev("response.created", map[string]any{"response": inProgress})
	ev("response.in_progress", map[string]any{"response": inProgress})
	items, _ := obj["output"].([]any)
	for i, it := range items {
		item, _ := it.(map[string]any)
		ev("response.output_item.added", map[string]any{"output_index": i, "item": item})
		if item["type"] == "message" {
			parts, _ := item["content"].([]any)
			for j, pt := range parts {
				part, _ := pt.(map[string]any)
				ev("response.content_part.added", map[string]any{"item_id": item["id"], "output_index": i, "content_index": j,
					"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
				ev("response.output_text.delta", map[string]any{"item_id": item["id"], "output_index": i, "content_index": j, "delta": part["text"]})
				ev("response.output_text.done", map[string]any{"item_id": item["id"], "output_index": i, "content_index": j, "text": part["text"]})
				ev("response.content_part.done", map[string]any{"item_id": item["id"], "output_index": i, "content_index": j, "part": part})
			}
		}
		if item["type"] == "function_call" {
			ev("response.function_call_arguments.done", map[string]any{"item_id": item["id"], "output_index": i, "arguments": item["arguments"]})
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	ev("response.completed", map[string]any{"response": obj})
	_ = bw.Flush()
}
