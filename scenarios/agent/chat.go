package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// chatDialect speaks OpenAI Chat Completions. With omitTrainingSegment it is
// the custom harness that builds its own URLs without the capture segment.
type chatDialect struct {
	omitTrainingSegment bool
}

func (d chatDialect) url(base, rolloutID string) string {
	if d.omitTrainingSegment {
		return base + "/ng-rollout/" + rolloutID + "/v1/chat/completions"
	}
	return base + "/ng-rollout/" + rolloutID + "/training-token-capture/v1/chat/completions"
}

func (chatDialect) stream(p *Plan) bool { return p.Stream }

func (chatDialect) headers(h http.Header, _ *convState, _ string) {
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json")
	h.Set("Authorization", "Bearer capbench-dummy-key")
	h.Set("User-Agent", "capbench-agent/1 (openai-chat)")
}

type chatBody struct {
	Model         string           `json:"model"`
	Messages      []map[string]any `json:"messages"`
	Tools         []map[string]any `json:"tools,omitempty"`
	ToolChoice    string           `json:"tool_choice,omitempty"`
	MaxTokens     int              `json:"max_tokens,omitempty"`
	Logprobs      bool             `json:"logprobs,omitempty"`
	Stream        bool             `json:"stream,omitempty"`
	StreamOptions map[string]any   `json:"stream_options,omitempty"`
}

func (chatDialect) start(s *convState) {
	system := s.conv.System
	if system == "" {
		system = "You are a careful assistant. Use the tools to inspect the workspace before answering."
	}
	s.messages = append(s.messages[:0], map[string]any{"role": "system", "content": system})
}

func (chatDialect) user(text string) map[string]any {
	return map[string]any{"role": "user", "content": text}
}

func (chatDialect) body(s *convState, p *Plan) ([]byte, error) {
	b := chatBody{Model: p.Model, Messages: s.messages, MaxTokens: s.conv.MaxTokens, Stream: p.Stream,
		Logprobs: p.NativeTokens}
	if p.Stream {
		b.StreamOptions = map[string]any{"include_usage": true}
	}
	for _, t := range s.tools {
		params := t.Parameters
		if params == nil {
			params = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		b.Tools = append(b.Tools, map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": params}})
	}
	if len(b.Tools) > 0 {
		b.ToolChoice = p.ToolChoice
		if b.ToolChoice == "" {
			b.ToolChoice = "auto"
		}
	}
	return encodeJSON(b)
}

func (chatDialect) assistant(r *reply, echoReasoning bool) map[string]any {
	m := map[string]any{"role": "assistant", "content": r.Text}
	if r.Text == "" && len(r.ToolCalls) > 0 {
		m["content"] = nil
	}
	if echoReasoning && r.Reasoning != "" {
		m["reasoning"] = r.Reasoning
	}
	if len(r.ToolCalls) > 0 {
		calls := make([]any, len(r.ToolCalls))
		for i, tc := range r.ToolCalls {
			calls[i] = map[string]any{"id": tc.ID, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}}
		}
		m["tool_calls"] = calls
	}
	return m
}

func (chatDialect) toolResults(calls []toolCall, outputs []string) []map[string]any {
	out := make([]map[string]any, len(calls))
	for i, tc := range calls {
		out[i] = map[string]any{"role": "tool", "tool_call_id": tc.ID, "content": outputs[i]}
	}
	return out
}

func (chatDialect) defaultTools() []Tool { return chatTools() }

type chatToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatLogprobs is a choice's `logprobs`; with vLLM's
// return_tokens_as_token_ids each token reads "token_id:<n>".
type chatLogprobs struct {
	Content []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
	} `json:"content"`
}

// tokens reads the generated token ids and their log-probs.
func (l *chatLogprobs) tokens() ([]int, []float64, error) {
	ids := make([]int, len(l.Content))
	lps := make([]float64, len(l.Content))
	for i, c := range l.Content {
		n, ok := strings.CutPrefix(c.Token, "token_id:")
		id, err := strconv.Atoi(n)
		if !ok || err != nil || id < 0 {
			return nil, nil, fmt.Errorf("log-prob %d: token %q is not a token id (want token_id:<n>)", i, c.Token)
		}
		ids[i], lps[i] = id, c.Logprob
	}
	return ids, lps, nil
}

type chatError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

func (chatDialect) read(resp *http.Response, stream bool) (*reply, error) {
	if !stream || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var c struct {
			ID      string     `json:"id"`
			Error   *chatError `json:"error"`
			Choices []struct {
				Message struct {
					Content          *string        `json:"content"`
					Reasoning        *string        `json:"reasoning"`
					ReasoningContent *string        `json:"reasoning_content"`
					ToolCalls        []chatToolCall `json:"tool_calls"`
				} `json:"message"`
				Logprobs     *chatLogprobs `json:"logprobs"`
				FinishReason string        `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
			return nil, fmt.Errorf("decode chat completion: %w", err)
		}
		if c.Error != nil {
			return nil, &CallError{Status: resp.StatusCode, Body: c.Error.Message}
		}
		if len(c.Choices) == 0 {
			return nil, errors.New("chat completion has no choices")
		}
		ch := c.Choices[0]
		rep := &reply{ID: c.ID, StopReason: ch.FinishReason}
		if ch.Message.Content != nil {
			rep.Text = *ch.Message.Content
		}
		switch {
		case ch.Message.Reasoning != nil:
			rep.Reasoning = *ch.Message.Reasoning
		case ch.Message.ReasoningContent != nil:
			rep.Reasoning = *ch.Message.ReasoningContent
		}
		for _, tc := range ch.Message.ToolCalls {
			rep.ToolCalls = append(rep.ToolCalls, toolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		if ch.Logprobs != nil {
			ids, lps, err := ch.Logprobs.tokens()
			if err != nil {
				return nil, err
			}
			rep.GenTokenIDs, rep.GenLogProbs = ids, lps
		}
		return rep, nil
	}
	rep := &reply{}
	var text, reasoning strings.Builder
	calls := map[int]*toolCall{}
	done := false
	err := readSSE(resp.Body, func(ev sseEvent) (bool, error) {
		if ev.Data == "[DONE]" {
			done = true
			return false, nil
		}
		var chunk struct {
			ID      string     `json:"id"`
			Error   *chatError `json:"error"`
			Choices []struct {
				Delta struct {
					Content          *string        `json:"content"`
					Reasoning        *string        `json:"reasoning"`
					ReasoningContent *string        `json:"reasoning_content"`
					ToolCalls        []chatToolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &chunk); err != nil {
			return false, fmt.Errorf("decode chunk: %w", err)
		}
		if chunk.Error != nil {
			return false, &CallError{Status: resp.StatusCode, Body: chunk.Error.Message}
		}
		if chunk.ID != "" {
			rep.ID = chunk.ID
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			if ch.Delta.Reasoning != nil {
				reasoning.WriteString(*ch.Delta.Reasoning)
			} else if ch.Delta.ReasoningContent != nil {
				reasoning.WriteString(*ch.Delta.ReasoningContent)
			}
			for _, tc := range ch.Delta.ToolCalls {
				c := calls[tc.Index]
				if c == nil {
					c = &toolCall{}
					calls[tc.Index] = c
				}
				if tc.ID != "" {
					c.ID = tc.ID
				}
				if tc.Function.Name != "" {
					c.Name = tc.Function.Name
				}
				c.Arguments += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				rep.StopReason = *ch.FinishReason
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if !done {
		return nil, errors.New("stream ended before [DONE]")
	}
	rep.Text, rep.Reasoning = text.String(), reasoning.String()
	idx := make([]int, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		rep.ToolCalls = append(rep.ToolCalls, *calls[i])
	}
	return rep, nil
}
