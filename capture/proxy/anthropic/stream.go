package anthropic

import (
	"bufio"
	"encoding/json"
	"strings"
)

// Stream writes a Messages reply as Anthropic's event stream while the
// generation is still running: a chat completion's deltas go in as they
// arrive (Reasoning, Text, ToolStart, ToolArguments) and come out as
// content blocks, in the order and with the content FromChat would give the
// same completion: a whitespace-only text before a tool call is dropped (the
// engine answers it as null content), and a reply with no block gets one
// empty text block.
type Stream struct {
	w         *bufio.Writer
	id, model any
	started   bool
	pinged    bool
	open      string // "", "thinking", "text", "tool_use"
	index     int    // of the open block; next block is index+1
	blocks    int
	pendingWS strings.Builder
	sawCalls  bool
	input     int
}

// NewStream starts a stream for message id of model; inputTokens is the
// prompt length when known (0 otherwise).
func NewStream(w *bufio.Writer, id, model any, inputTokens int) *Stream {
	return &Stream{w: w, id: id, model: model, input: inputTokens, index: -1}
}

func (s *Stream) event(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, _ = s.w.WriteString("event: " + name + "\ndata: ")
	_, _ = s.w.Write(b)
	_, err = s.w.WriteString("\n\n")
	return err
}

// Start writes message_start (once).
func (s *Stream) Start() error {
	if s.started {
		return nil
	}
	s.started = true
	return s.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": s.id, "type": "message", "role": "assistant", "model": s.model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": s.input, "output_tokens": 1,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
	}})
}

func (s *Stream) startBlock(kind string, block map[string]any) error {
	if err := s.closeBlock(); err != nil {
		return err
	}
	s.index = s.blocks
	s.blocks++
	s.open = kind
	if err := s.event("content_block_start", map[string]any{"type": "content_block_start", "index": s.index, "content_block": block}); err != nil {
		return err
	}
	if !s.pinged {
		s.pinged = true
		return s.event("ping", map[string]any{"type": "ping"})
	}
	return nil
}

func (s *Stream) delta(d map[string]any) error {
	return s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": s.index, "delta": d})
}

func (s *Stream) closeBlock() error {
	if s.open == "" {
		return nil
	}
	if s.open == "thinking" {
		if err := s.delta(map[string]any{"type": "signature_delta", "signature": newSignature()}); err != nil {
			return err
		}
	}
	s.open = ""
	return s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": s.index})
}

// Reasoning adds reasoning text (a thinking block).
func (s *Stream) Reasoning(text string) error {
	if err := s.Start(); err != nil {
		return err
	}
	if s.open != "thinking" {
		if err := s.startBlock("thinking", map[string]any{"type": "thinking", "thinking": "", "signature": ""}); err != nil {
			return err
		}
	}
	return s.delta(map[string]any{"type": "thinking_delta", "thinking": text})
}

// Text adds content text (a text block). Whitespace is held back until
// text that is not whitespace follows, or the reply ends without a call.
func (s *Stream) Text(text string) error {
	if err := s.Start(); err != nil {
		return err
	}
	if s.open == "text" {
		return s.delta(map[string]any{"type": "text_delta", "text": text})
	}
	s.pendingWS.WriteString(text)
	if strings.TrimSpace(s.pendingWS.String()) == "" {
		return nil
	}
	return s.flushText()
}

func (s *Stream) flushText() error {
	t := s.pendingWS.String()
	s.pendingWS.Reset()
	if t == "" {
		return nil
	}
	if err := s.startBlock("text", map[string]any{"type": "text", "text": ""}); err != nil {
		return err
	}
	return s.delta(map[string]any{"type": "text_delta", "text": t})
}

// ToolStart opens a tool_use block; held-back whitespace is dropped.
func (s *Stream) ToolStart(id, name string) error {
	if err := s.Start(); err != nil {
		return err
	}
	s.sawCalls = true
	s.pendingWS.Reset()
	if err := s.startBlock("tool_use", map[string]any{"type": "tool_use", "id": id, "name": name, "input": map[string]any{}}); err != nil {
		return err
	}
	return s.delta(map[string]any{"type": "input_json_delta", "partial_json": ""})
}

// ToolArguments adds a fragment of the open tool call's arguments, verbatim.
func (s *Stream) ToolArguments(fragment string) error {
	if s.open != "tool_use" || fragment == "" {
		return nil
	}
	return s.delta(map[string]any{"type": "input_json_delta", "partial_json": fragment})
}

// Finish closes the reply: the stop reason of the chat finish reason (and
// stop_reason, matched against stopSequences) and the output token count.
func (s *Stream) Finish(finishReason, stopReason any, stopSequences []string, outputTokens int) error {
	if err := s.Start(); err != nil {
		return err
	}
	if !s.sawCalls {
		if err := s.flushText(); err != nil {
			return err
		}
	}
	if s.blocks == 0 {
		if err := s.startBlock("text", map[string]any{"type": "text", "text": ""}); err != nil {
			return err
		}
	}
	if err := s.closeBlock(); err != nil {
		return err
	}
	reason, seq := mapStop(map[string]any{"finish_reason": finishReason, "stop_reason": stopReason}, s.sawCalls, stopSequences)
	if err := s.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": map[string]any{"output_tokens": outputTokens}}); err != nil {
		return err
	}
	return s.event("message_stop", map[string]any{"type": "message_stop"})
}

// Error writes Anthropic's in-stream error event (the SDK raises on it).
func (s *Stream) Error(status int, message string) error {
	return s.event("error", map[string]any{"type": "error", "error": map[string]any{"type": ErrorType(status), "message": message}})
}
