package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// Claude Code CLI constants, as seen in recorded traffic of version 2.1.328.
const (
	claudeCodeVersion   = "2.1.328"
	claudeCodeMaxTokens = 32000 // the CLI's max_tokens for a custom model name
	anthropicBetas      = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24"
)

type anthropicDialect struct{}

func (anthropicDialect) url(base, rolloutID string) string {
	return base + "/ng-rollout/" + rolloutID + "/training-token-capture/v1/messages?beta=true"
}

func (anthropicDialect) stream(*Plan) bool { return true } // the CLI always streams

func (anthropicDialect) headers(h http.Header, s *convState, session string) {
	h.Set("Accept", "application/json")
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "claude-cli/"+claudeCodeVersion+" (external, sdk-cli)")
	h.Set("X-Claude-Code-Session-Id", session)
	h.Set("X-Stainless-Arch", "x64")
	h.Set("X-Stainless-Lang", "js")
	h.Set("X-Stainless-OS", "Linux")
	h.Set("X-Stainless-Package-Version", "0.128.0")
	h.Set("X-Stainless-Retry-Count", "0") // unchanged on retries, like the CLI
	h.Set("X-Stainless-Runtime", "node")
	h.Set("X-Stainless-Runtime-Version", "v26.12.1")
	h.Set("X-Stainless-Timeout", "600")
	h.Set("anthropic-beta", anthropicBetas)
	h.Set("anthropic-dangerous-direct-browser-access", "true")
	h.Set("anthropic-version", "2023-06-01")
	h.Set("x-api-key", "capbench-dummy-key")
	h.Set("x-app", "cli")
	if s.subagent {
		h.Set("x-claude-code-agent-id", "agent-"+s.script)
	}
	// Advertised like the CLI; the reader decodes gzip if a hop compresses.
	h.Set("Accept-Encoding", "gzip")
}

// messagesBody keeps the CLI's key order.
type messagesBody struct {
	Model             string           `json:"model"`
	Messages          []map[string]any `json:"messages"`
	System            []map[string]any `json:"system"`
	Tools             []map[string]any `json:"tools,omitempty"`
	Metadata          map[string]any   `json:"metadata"`
	MaxTokens         int              `json:"max_tokens"`
	Thinking          map[string]any   `json:"thinking,omitempty"`
	ContextManagement map[string]any   `json:"context_management,omitempty"`
	OutputConfig      map[string]any   `json:"output_config,omitempty"`
	Stream            bool             `json:"stream"`
}

func (anthropicDialect) start(s *convState) {
	s.messages = s.messages[:0]
}

func (anthropicDialect) user(text string) map[string]any {
	return map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, you can use the following context: the project is a scripted capbench scenario.\n</system-reminder>"},
		map[string]any{"type": "text", "text": text},
	}}
}

func (d anthropicDialect) body(s *convState, p *Plan) ([]byte, error) {
	billing := "x-anthropic-billing-header: cc_version=" + claudeCodeVersion + ".c5e; cc_entrypoint=sdk-cli;"
	if s.subagent {
		billing += " cc_is_subagent=true;"
	}
	system := s.conv.System
	if system == "" {
		system = claudeCodeSystemPrompt
	}
	maxTokens := claudeCodeMaxTokens
	if s.conv.MaxTokens > 0 {
		maxTokens = s.conv.MaxTokens
	}
	msgs := withMovingCacheControl(withEnvironmentMessage(s.messages, s.calls == 0))
	b := messagesBody{
		Model:    p.Model,
		Messages: msgs,
		System: []map[string]any{
			{"type": "text", "text": billing},
			{"type": "text", "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK.", "cache_control": map[string]any{"type": "ephemeral"}},
			{"type": "text", "text": system, "cache_control": map[string]any{"type": "ephemeral"}},
		},
		Metadata:          map[string]any{"user_id": `{"device_id":"` + strings.Repeat("d", 64) + `","account_uuid":"","session_id":"capbench"}`},
		MaxTokens:         maxTokens,
		Thinking:          map[string]any{"type": "adaptive", "display": "omitted"},
		ContextManagement: map[string]any{"edits": []any{map[string]any{"type": "clear_thinking_20251015", "keep": "all"}}},
		OutputConfig:      map[string]any{"effort": "high"},
		Stream:            true,
	}
	for _, t := range s.tools {
		params := t.Parameters
		if params == nil {
			params = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		b.Tools = append(b.Tools, map[string]any{"name": t.Name, "description": t.Description, "input_schema": params})
	}
	return encodeJSON(b)
}

// withEnvironmentMessage inserts the CLI's role:"system" message (environment,
// agent list, date) after the first user message. It is a block list on the
// first call and a plain string afterwards, as the CLI sends it.
func withEnvironmentMessage(msgs []map[string]any, first bool) []map[string]any {
	if len(msgs) == 0 {
		return msgs
	}
	env := map[string]any{"role": "system", "output_config": map[string]any{"effort": "high"}}
	if first {
		env["content"] = []any{map[string]any{"type": "text", "text": claudeCodeEnvironment}}
	} else {
		env["content"] = claudeCodeEnvironment
	}
	out := make([]map[string]any, 0, len(msgs)+1)
	out = append(out, msgs[0], env)
	return append(out, msgs[1:]...)
}

// inlineSystemMessage is an extra role:"system" history entry in the CLI's
// shape (a text block list plus the per-message output_config).
func inlineSystemMessage(text string) map[string]any {
	return map[string]any{"role": "system", "output_config": map[string]any{"effort": "high"},
		"content": []any{map[string]any{"type": "text", "text": text}}}
}

// withMovingCacheControl copies the history and puts the single message-level
// cache_control on the last block of the newest message, as the CLI does
// (so call N+1 is not a byte-prefix extension of call N).
func withMovingCacheControl(msgs []map[string]any) []map[string]any {
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		cp := make(map[string]any, len(m))
		for k, v := range m {
			cp[k] = v
		}
		if blocks, ok := m["content"].([]any); ok {
			nb := make([]any, len(blocks))
			for j, blk := range blocks {
				if bm, ok := blk.(map[string]any); ok {
					c := make(map[string]any, len(bm))
					for k, v := range bm {
						if k != "cache_control" {
							c[k] = v
						}
					}
					nb[j] = c
				} else {
					nb[j] = blk
				}
			}
			if i == len(msgs)-1 && len(nb) > 0 {
				if last, ok := nb[len(nb)-1].(map[string]any); ok {
					last["cache_control"] = map[string]any{"type": "ephemeral"}
				}
			}
			cp["content"] = nb
		}
		out[i] = cp
	}
	return out
}

func (anthropicDialect) assistant(r *reply, echoReasoning bool) map[string]any {
	var blocks []any
	if echoReasoning && r.Reasoning != "" {
		blocks = append(blocks, map[string]any{"type": "thinking", "thinking": r.Reasoning, "signature": "capbench"})
	}
	if r.Text != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": r.Text})
	}
	for _, tc := range r.ToolCalls {
		// The CLI parses the streamed partial_json and writes it again
		// compactly, keeping the key order it arrived in.
		var input any = map[string]any{}
		if c := compactJSON(tc.Arguments); json.Valid([]byte(c)) {
			input = json.RawMessage(c)
		}
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": input})
	}
	if blocks == nil {
		blocks = []any{map[string]any{"type": "text", "text": ""}}
	}
	return map[string]any{"role": "assistant", "content": blocks}
}

func (anthropicDialect) toolResults(calls []toolCall, outputs []string) []map[string]any {
	blocks := make([]any, len(calls))
	for i, tc := range calls {
		blocks[i] = map[string]any{"tool_use_id": tc.ID, "type": "tool_result", "content": outputs[i], "is_error": false}
	}
	return []map[string]any{{"role": "user", "content": blocks}}
}

func (anthropicDialect) defaultTools() []Tool { return claudeCodeTools() }

// read parses a Messages reply: the SSE stream the CLI consumes, or a plain
// JSON message.
func (anthropicDialect) read(resp *http.Response, stream bool) (*reply, error) {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var m struct {
			ID      string                       `json:"id"`
			Content []map[string]json.RawMessage `json:"content"`
			Stop    string                       `json:"stop_reason"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return nil, fmt.Errorf("decode message: %w", err)
		}
		rep := &reply{ID: m.ID, StopReason: m.Stop}
		for _, b := range m.Content {
			addAnthropicBlock(rep, b)
		}
		return rep, nil
	}
	type block struct {
		kind    string
		id      string
		name    string
		text    strings.Builder
		partial strings.Builder
	}
	blocks := map[int]*block{}
	rep := &reply{}
	stopped := false
	err := readSSE(resp.Body, func(ev sseEvent) (bool, error) {
		var f struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message struct {
				ID string `json:"id"`
			} `json:"message"`
			ContentBlock map[string]any `json:"content_block"`
			Delta        struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				Thinking    string `json:"thinking"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &f); err != nil {
			return false, fmt.Errorf("decode %s event: %w", ev.Event, err)
		}
		switch f.Type {
		case "message_start":
			rep.ID = f.Message.ID
		case "content_block_start":
			b := &block{}
			b.kind, _ = f.ContentBlock["type"].(string)
			b.id, _ = f.ContentBlock["id"].(string)
			b.name, _ = f.ContentBlock["name"].(string)
			if t, ok := f.ContentBlock["text"].(string); ok {
				b.text.WriteString(t)
			}
			blocks[f.Index] = b
		case "content_block_delta":
			b := blocks[f.Index]
			if b == nil {
				return false, fmt.Errorf("delta for unknown block %d", f.Index)
			}
			switch f.Delta.Type {
			case "text_delta":
				b.text.WriteString(f.Delta.Text)
			case "thinking_delta":
				b.text.WriteString(f.Delta.Thinking)
			case "input_json_delta":
				b.partial.WriteString(f.Delta.PartialJSON)
			}
		case "message_delta":
			rep.StopReason = f.Delta.StopReason
		case "message_stop":
			stopped = true
			return false, nil
		case "error":
			return false, &CallError{Status: resp.StatusCode, Body: f.Error.Type + ": " + f.Error.Message}
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if !stopped {
		return nil, errors.New("stream ended before message_stop")
	}
	idx := make([]int, 0, len(blocks))
	for i := range blocks {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		b := blocks[i]
		switch b.kind {
		case "text":
			rep.Text += b.text.String()
		case "thinking":
			rep.Reasoning += b.text.String()
		case "tool_use":
			rep.ToolCalls = append(rep.ToolCalls, toolCall{ID: b.id, Name: b.name, Arguments: compactJSON(b.partial.String())})
		}
	}
	return rep, nil
}

func addAnthropicBlock(rep *reply, b map[string]json.RawMessage) {
	str := func(k string) string {
		var v string
		_ = json.Unmarshal(b[k], &v)
		return v
	}
	switch str("type") {
	case "text":
		rep.Text += str("text")
	case "thinking":
		rep.Reasoning += str("thinking")
	case "tool_use":
		args := "{}"
		if len(b["input"]) > 0 {
			args = compactJSON(string(b["input"])) // the server's key order
		}
		rep.ToolCalls = append(rep.ToolCalls, toolCall{ID: str("id"), Name: str("name"), Arguments: args})
	}
}
