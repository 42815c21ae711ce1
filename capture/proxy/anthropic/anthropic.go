// Package anthropic translates the Anthropic Messages API to and from
// OpenAI Chat Completions, following vLLM's own mapping (vLLM's Anthropic entrypoint),
// and writes Messages replies as JSON objects or as Anthropic SSE streams.
//
// It works on decoded JSON (map[string]any with json.Number numbers) so that
// unknown fields pass through untouched where they are kept at all.
package anthropic

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/capbench/capbench/capture/lineage"
)

// billingHeaderPrefix marks a system block Claude Code adds for billing;
// vLLM drops it from the prompt and so do we.
const billingHeaderPrefix = "x-anthropic-billing-header"

// ErrorType names an HTTP status the way Anthropic's error envelope does.
func ErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusConflict:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529, http.StatusServiceUnavailable:
		return "overloaded_error"
	default:
		if status >= 500 {
			return "api_error"
		}
		return "invalid_request_error"
	}
}

// ErrorBody is Anthropic's error envelope for a status and message.
func ErrorBody(status int, message string) map[string]any {
	return map[string]any{"type": "error", "error": map[string]any{"type": ErrorType(status), "message": message}}
}

// Raw holds the client's own bytes of the values whose key order reaches
// the prompt: tool_use inputs (messages[i].content[j].input) and tool
// schemas (tools[k].input_schema). A decoded Go map has no key order, so
// without them the translation would re-send these objects with sorted keys
// and the echoed tool call would no longer render as the tokens the model
// generated.
type Raw struct {
	ToolInputs  map[[2]int]json.RawMessage
	ToolSchemas map[int]json.RawMessage
}

// ToChat translates a Messages request body into a Chat Completions request
// body (without stream fields; the caller decides how to send it). Without
// the client's bytes, objects are re-encoded with sorted keys.
func ToChat(body map[string]any) (map[string]any, error) { return ToChatRaw(body, nil) }

// ToChatRaw is ToChat keeping the client's key order and number spelling
// where raw has the bytes: tool_use inputs become arguments the way a Python
// server writes them (json.dumps, insertion order, ensure_ascii off, as
// vLLM's tool parser wrote the generated arguments), schemas are passed on
// as sent.
func ToChatRaw(body map[string]any, raw *Raw) (map[string]any, error) {
	out, _, err := ToChatAfter(body, raw, nil)
	return out, err
}

// Translated is what the translation made of a request's messages: a next
// request of the same conversation repeats them and adds a few, and
// ToChatAfter translates only those. Every message translates on its own;
// role:"system" ones are merged into the leading system message, which is
// built again each time. It is never changed once made.
type Translated struct {
	Count   int      // the request messages read
	Systems []string // the texts of the role:"system" ones among them
	Msgs    []any    // the chat messages the others became, in order
}

// ToChatAfter is ToChatRaw for a request whose first prev.Count messages
// are the ones prev was made from (nil: none), which are not read again;
// raw needs the bytes of the later messages only. It also returns the
// translation of all the request's messages, for the next request.
func ToChatAfter(body map[string]any, raw *Raw, prev *Translated) (map[string]any, *Translated, error) {
	if raw == nil {
		raw = &Raw{}
	}
	model, _ := body["model"].(string)
	rawMsgs, ok := body["messages"].([]any)
	if !ok {
		return nil, nil, errors.New("messages: field required (a list of message objects)")
	}
	out := map[string]any{}
	if model != "" {
		out["model"] = model
	}
	sys, err := systemText(body["system"])
	if err != nil {
		return nil, nil, err
	}
	t := &Translated{}
	if prev != nil && prev.Count <= len(rawMsgs) {
		// Full slice expressions: appending never writes into prev's arrays.
		t = &Translated{Count: prev.Count, Systems: prev.Systems[:len(prev.Systems):len(prev.Systems)], Msgs: prev.Msgs[:len(prev.Msgs):len(prev.Msgs)]}
	}
	if err := translateMessages(rawMsgs, raw, t); err != nil {
		return nil, nil, err
	}
	var systemTexts []string
	if sys != "" {
		systemTexts = append(systemTexts, sys)
	}
	systemTexts = append(systemTexts, t.Systems...)
	msgs := t.Msgs
	if len(systemTexts) > 0 {
		msgs = append([]any{map[string]any{"role": "system", "content": strings.Join(systemTexts, "\n\n")}}, msgs...)
	}
	out["messages"] = msgs
	if err := translateTools(body, out, raw.ToolSchemas); err != nil {
		return nil, nil, err
	}
	if v, ok := body["max_tokens"]; ok && v != nil {
		out["max_tokens"] = v
	}
	if v, ok := body["stop_sequences"]; ok && v != nil {
		out["stop"] = v
	}
	for _, k := range []string{"temperature", "top_p", "top_k"} {
		if v, ok := body[k]; ok && v != nil {
			out[k] = v
		}
	}
	if th, ok := body["thinking"].(map[string]any); ok && th["type"] == "disabled" {
		out["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
	}
	return out, t, nil
}

// translateMessages translates rawMsgs from t.Count on into t.
func translateMessages(rawMsgs []any, raw *Raw, t *Translated) error {
	for i := t.Count; i < len(rawMsgs); i++ {
		m, ok := rawMsgs[i].(map[string]any)
		if !ok {
			return fmt.Errorf("messages[%d]: not an object", i)
		}
		role, _ := m["role"].(string)
		switch role {
		case "system":
			// Claude Code sends role:"system" entries inside messages. Qwen-style
			// templates require one leading system message, so they are merged
			// into it, as vLLM does.
			text, err := systemText(m["content"])
			if err != nil {
				return fmt.Errorf("messages[%d]: %w", i, err)
			}
			if text != "" {
				t.Systems = append(t.Systems, text)
			}
		case "user":
			converted, err := userMessages(m["content"])
			if err != nil {
				return fmt.Errorf("messages[%d]: %w", i, err)
			}
			t.Msgs = append(t.Msgs, converted...)
		case "assistant":
			converted, err := assistantMessage(m["content"], func(j int) json.RawMessage { return raw.ToolInputs[[2]int{i, j}] })
			if err != nil {
				return fmt.Errorf("messages[%d]: %w", i, err)
			}
			t.Msgs = append(t.Msgs, converted)
		default:
			return fmt.Errorf("messages[%d]: unsupported role %q", i, role)
		}
	}
	t.Count = len(rawMsgs)
	return nil
}

// systemText flattens a system value (string or text blocks), dropping the
// billing header block.
func systemText(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case []any:
		var b strings.Builder
		for i, blk := range x {
			m, ok := blk.(map[string]any)
			if !ok {
				return "", fmt.Errorf("system[%d]: not an object", i)
			}
			t, _ := m["text"].(string)
			if strings.HasPrefix(t, billingHeaderPrefix) {
				continue
			}
			b.WriteString(t)
		}
		return b.String(), nil
	default:
		return "", fmt.Errorf("system: expected a string or a list of text blocks, got %T", v)
	}
}

// userMessages converts one user turn: tool results become tool messages
// placed before the remaining user content.
func userMessages(content any) ([]any, error) {
	if s, ok := content.(string); ok {
		return []any{map[string]any{"role": "user", "content": s}}, nil
	}
	blocks, ok := content.([]any)
	if !ok {
		return nil, fmt.Errorf("content: expected a string or a list of blocks, got %T", content)
	}
	var out []any
	var texts []string
	var images []any
	for i, b := range blocks {
		blk, ok := b.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("content[%d]: not an object", i)
		}
		switch blk["type"] {
		case "text":
			t, _ := blk["text"].(string)
			texts = append(texts, t)
		case "image":
			if part, ok := imagePart(blk); ok {
				images = append(images, part)
			}
		case "tool_result":
			id, _ := blk["tool_use_id"].(string)
			out = append(out, map[string]any{"role": "tool", "tool_call_id": id, "content": toolResultText(blk["content"])})
		default:
			// Dropping a block would train on a prompt the harness did not
			// send; the client is told instead.
			return nil, unsupportedBlock(i, blk["type"], "user")
		}
	}
	if len(texts) > 0 || len(images) > 0 {
		if len(images) == 0 {
			out = append(out, map[string]any{"role": "user", "content": strings.Join(texts, "\n")})
		} else {
			parts := make([]any, 0, len(texts)+len(images))
			for _, t := range texts {
				parts = append(parts, map[string]any{"type": "text", "text": t})
			}
			parts = append(parts, images...)
			out = append(out, map[string]any{"role": "user", "content": parts})
		}
	}
	return out, nil
}

func imagePart(blk map[string]any) (map[string]any, bool) {
	src, _ := blk["source"].(map[string]any)
	switch src["type"] {
	case "base64":
		mt, _ := src["media_type"].(string)
		data, _ := src["data"].(string)
		return map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:" + mt + ";base64," + data}}, true
	case "url":
		u, _ := src["url"].(string)
		return map[string]any{"type": "image_url", "image_url": map[string]any{"url": u}}, true
	}
	return nil, false
}

// toolResultText flattens a tool_result's content (string or blocks).
func toolResultText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var parts []string
		for _, b := range x {
			if m, ok := b.(map[string]any); ok {
				if t, ok := m["text"].(string); ok {
					parts = append(parts, t)
				}
			}
		}
		return strings.Join(parts, "\n")
	default:
		return ""
	}
}

// unsupportedBlock is the error for a content block the translation cannot
// render into the prompt.
func unsupportedBlock(i int, typ any, role string) error {
	if typ == nil {
		return fmt.Errorf("content[%d]: a content block needs a \"type\"", i)
	}
	return fmt.Errorf("content[%d]: %s content blocks of type %v are not supported by the capture proxy (supported: %s); send their text as a text block",
		i, role, typ, map[string]string{"user": "text, image, tool_result", "assistant": "text, thinking, redacted_thinking, tool_use"}[role])
}

// assistantMessage converts an assistant turn: text → content, thinking →
// reasoning, tool_use → tool_calls (arguments from the client's bytes of the
// input when rawInput has them).
func assistantMessage(content any, rawInput func(j int) json.RawMessage) (map[string]any, error) {
	msg := map[string]any{"role": "assistant"}
	if s, ok := content.(string); ok {
		msg["content"] = s
		return msg, nil
	}
	blocks, ok := content.([]any)
	if !ok {
		return nil, fmt.Errorf("content: expected a string or a list of blocks, got %T", content)
	}
	var texts, reasoning []string
	var calls []any
	for i, b := range blocks {
		blk, ok := b.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("content[%d]: not an object", i)
		}
		switch blk["type"] {
		case "text":
			t, _ := blk["text"].(string)
			texts = append(texts, t)
		case "thinking":
			t, _ := blk["thinking"].(string)
			reasoning = append(reasoning, t)
		case "redacted_thinking":
			// vLLM drops it: there is no text to render.
		case "tool_use":
			args, err := toolArguments(blk["input"], rawInput(i))
			if err != nil {
				return nil, fmt.Errorf("content[%d].input: %w", i, err)
			}
			id, _ := blk["id"].(string)
			name, _ := blk["name"].(string)
			calls = append(calls, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}})
		default:
			return nil, unsupportedBlock(i, blk["type"], "assistant")
		}
	}
	if len(texts) > 0 {
		msg["content"] = strings.Join(texts, "")
	} else {
		msg["content"] = nil
	}
	if len(reasoning) > 0 {
		msg["reasoning"] = strings.Join(reasoning, "")
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	return msg, nil
}

// toolArguments writes a tool_use input as Chat arguments: from the
// client's bytes when there are any, else from the decoded value (whose
// keys then come out sorted).
func toolArguments(input any, raw json.RawMessage) (string, error) {
	if raw == nil {
		if input == nil {
			input = map[string]any{}
		}
		b, err := json.Marshal(input)
		if err != nil {
			return "", err
		}
		raw = b
	}
	return lineage.PythonDumpsInOrder(raw)
}

// translateTools maps tools and tool_choice; a schema is passed on as the
// client's bytes when rawSchemas has them.
func translateTools(body, out map[string]any, rawSchemas map[int]json.RawMessage) error {
	if rawTools, ok := body["tools"].([]any); ok && len(rawTools) > 0 {
		tools := make([]any, 0, len(rawTools))
		for i, rt := range rawTools {
			t, ok := rt.(map[string]any)
			if !ok {
				return fmt.Errorf("tools[%d]: not an object", i)
			}
			name, _ := t["name"].(string)
			if name == "" {
				return fmt.Errorf("tools[%d]: name is required", i)
			}
			params := t["input_schema"]
			if r, ok := rawSchemas[i]; ok && params != nil {
				params = r
			}
			if params == nil {
				params = map[string]any{"type": "object", "properties": map[string]any{}}
			}
			fn := map[string]any{"name": name, "parameters": params}
			if d, ok := t["description"].(string); ok {
				fn["description"] = d
			}
			tools = append(tools, map[string]any{"type": "function", "function": fn})
		}
		out["tools"] = tools
	}
	tc, ok := body["tool_choice"].(map[string]any)
	if !ok {
		return nil
	}
	switch tc["type"] {
	case "auto":
		out["tool_choice"] = "auto"
	case "any":
		out["tool_choice"] = "required"
	case "none":
		out["tool_choice"] = "none"
	case "tool":
		name, _ := tc["name"].(string)
		out["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": name}}
	default:
		return fmt.Errorf("tool_choice: unsupported type %v", tc["type"])
	}
	if d, _ := tc["disable_parallel_tool_use"].(bool); d {
		out["parallel_tool_calls"] = false
	}
	return nil
}

// FromChat builds the Messages reply for a chat completion. id is the
// message id to use (the captured Responses id on the capture path).
func FromChat(resp map[string]any, id string, stopSequences []string) (map[string]any, error) {
	choices, _ := resp["choices"].([]any)
	if len(choices) == 0 {
		return nil, errors.New("upstream reply has no choices")
	}
	choice, ok := choices[0].(map[string]any)
	if !ok {
		return nil, errors.New("upstream choices[0] is not an object")
	}
	msg, _ := choice["message"].(map[string]any)
	var content []any
	if r := firstString(msg, "reasoning", "reasoning_content"); r != "" {
		content = append(content, map[string]any{"type": "thinking", "thinking": r, "signature": newSignature()})
	}
	if t, ok := msg["content"].(string); ok && t != "" {
		content = append(content, map[string]any{"type": "text", "text": t})
	}
	calls, _ := msg["tool_calls"].([]any)
	for _, c := range calls {
		call, ok := c.(map[string]any)
		if !ok {
			continue
		}
		fn, _ := call["function"].(map[string]any)
		args, _ := fn["arguments"].(string)
		// The generated text itself, in the model's key order: a client that
		// echoes the call back then sends the keys in that order.
		var input any = map[string]any{}
		if json.Valid([]byte(args)) {
			input = json.RawMessage(args)
		}
		content = append(content, map[string]any{"type": "tool_use", "id": call["id"], "name": fn["name"], "input": input})
	}
	if len(content) == 0 {
		content = []any{map[string]any{"type": "text", "text": ""}}
	}
	stopReason, stopSeq := mapStop(choice, len(calls) > 0, stopSequences)
	usage, _ := resp["usage"].(map[string]any)
	return map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": resp["model"],
		"content": content, "stop_reason": stopReason, "stop_sequence": stopSeq,
		"usage": map[string]any{
			"input_tokens": numberOr(usage["prompt_tokens"]), "output_tokens": numberOr(usage["completion_tokens"]),
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		},
	}, nil
}

// mapStop maps a chat finish reason to Anthropic's stop_reason.
func mapStop(choice map[string]any, hasCalls bool, stopSequences []string) (string, any) {
	fr, _ := choice["finish_reason"].(string)
	switch {
	case fr == "length":
		return "max_tokens", nil
	case fr == "tool_calls" || hasCalls:
		return "tool_use", nil
	}
	if s, ok := choice["stop_reason"].(string); ok {
		for _, want := range stopSequences {
			if s == want {
				return "stop_sequence", s
			}
		}
	}
	return "end_turn", nil
}

func firstString(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := m[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

func numberOr(v any) any {
	if v == nil {
		return 0
	}
	return v
}

// newSignature invents a thinking signature; vLLM does the same (the engine
// has none). Clients echo it back; lineage ignores it.
func newSignature() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// StopSequences reads a request's stop_sequences.
func StopSequences(body map[string]any) []string {
	raw, _ := body["stop_sequences"].([]any)
	out := make([]string, 0, len(raw))
	for _, v := range raw {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
