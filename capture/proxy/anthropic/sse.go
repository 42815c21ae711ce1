package anthropic

import (
	"bufio"
	"encoding/json"
	"strings"
)

// textChunk is the size of the text pieces a synthetic stream emits; the
// whole reply is known, so the split is only there to look like a stream.
const textChunk = 256

// WriteSSE writes a complete Messages reply as Anthropic's event stream:
// message_start, per block content_block_start / ping (once) /
// content_block_delta / content_block_stop, message_delta, message_stop.
func WriteSSE(w *bufio.Writer, msg map[string]any) error {
	ev := func(name string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, _ = w.WriteString("event: " + name + "\ndata: ")
		_, _ = w.Write(b)
		_, err = w.WriteString("\n\n")
		return err
	}
	usage, _ := msg["usage"].(map[string]any)
	start := map[string]any{
		"id": msg["id"], "type": "message", "role": "assistant", "model": msg["model"],
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens": numberOr(usage["input_tokens"]), "output_tokens": 1,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		},
	}
	if err := ev("message_start", map[string]any{"type": "message_start", "message": start}); err != nil {
		return err
	}
	blocks, _ := msg["content"].([]any)
	pinged := false
	for i, b := range blocks {
		blk, _ := b.(map[string]any)
		var empty map[string]any
		var deltas []map[string]any
		switch blk["type"] {
		case "thinking":
			empty = map[string]any{"type": "thinking", "thinking": "", "signature": ""}
			for _, part := range split(str(blk["thinking"])) {
				deltas = append(deltas, map[string]any{"type": "thinking_delta", "thinking": part})
			}
			deltas = append(deltas, map[string]any{"type": "signature_delta", "signature": str(blk["signature"])})
		case "tool_use":
			empty = map[string]any{"type": "tool_use", "id": blk["id"], "name": blk["name"], "input": map[string]any{}}
			input, err := inputText(blk["input"])
			if err != nil {
				return err
			}
			deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": ""})
			for _, part := range split(string(input)) {
				deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": part})
			}
		default:
			empty = map[string]any{"type": "text", "text": ""}
			for _, part := range split(str(blk["text"])) {
				deltas = append(deltas, map[string]any{"type": "text_delta", "text": part})
			}
		}
		if err := ev("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": empty}); err != nil {
			return err
		}
		if !pinged {
			pinged = true
			if err := ev("ping", map[string]any{"type": "ping"}); err != nil {
				return err
			}
		}
		for _, d := range deltas {
			if err := ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}); err != nil {
				return err
			}
		}
		if err := ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}); err != nil {
			return err
		}
	}
	if err := ev("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": msg["stop_reason"], "stop_sequence": msg["stop_sequence"]},
		"usage": map[string]any{"output_tokens": numberOr(usage["output_tokens"])},
	}); err != nil {
		return err
	}
	return ev("message_stop", map[string]any{"type": "message_stop"})
}

// inputText is a tool_use input as partial_json text: the generated
// arguments verbatim when FromChat kept them, else the encoded value.
func inputText(v any) ([]byte, error) {
	if raw, ok := v.(json.RawMessage); ok {
		return raw, nil
	}
	return json.Marshal(v)
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// split cuts s into pieces of at most textChunk bytes on rune boundaries.
func split(s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	for len(s) > textChunk {
		cut := textChunk
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = strings.IndexFunc(s[1:], func(rune) bool { return true }) + 1
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return append(out, s)
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
