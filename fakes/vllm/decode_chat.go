package vllm

import (
	"encoding/json"
	"strconv"

	"github.com/capbench/capbench/internal/jsonscan"
)

// decodeFast fills req from body without reflection for the shapes clients
// send: a valid object of known fields with plain keys and values of the
// fields' types. It reports false on anything else (a syntax or type error,
// a repeated or case-folded key, an integer with a fraction), and the caller
// then decodes with encoding/json, whose result and errors are the
// reference: FuzzChatDecode checks both agree wherever this one succeeds.
func (req *chatRequest) decodeFast(body []byte) bool {
	i := jsonscan.SkipWS(body, 0)
	var seen uint64
	end, ok := jsonscan.ObjectAt(body, i, func(key []byte, esc bool, v int) (int, bool) {
		if !jsonscan.PlainKey(key, esc) {
			return 0, false
		}
		var bit uint64
		vEnd, ok := 0, false
		if string(key) == "messages" { // read in place: the largest value, scanned once
			bit = 1 << 0
			vEnd, ok = decodeMessagesAt(body, v, &req.Messages)
		} else if vEnd, ok = jsonscan.ValueDepth(body, v, 0); ok {
			bit, ok = req.field(string(key), body[v:vEnd])
		}
		if !ok || seen&bit != 0 {
			return 0, false
		}
		seen |= bit
		return vEnd, true
	})
	return ok && jsonscan.SkipWS(body, end) == len(body)
}

// field decodes one top-level field; bit is its place in the seen mask (0
// for unknown keys, which encoding/json ignores too).
func (req *chatRequest) field(key string, v []byte) (bit uint64, ok bool) {
	switch key {
	case "model":
		return 1 << 1, decodeString(v, &req.Model)
	case "max_tokens":
		return 1 << 2, decodeIntPtr(v, &req.MaxTokens)
	case "max_completion_tokens":
		return 1 << 3, decodeIntPtr(v, &req.MaxCompletionTokens)
	case "logprobs":
		return 1 << 4, decodeBoolPtr(v, &req.Logprobs)
	case "top_logprobs":
		return 1 << 5, decodeIntPtr(v, &req.TopLogprobs)
	case "n":
		return 1 << 6, decodeIntPtr(v, &req.N)
	case "seed":
		return 1 << 7, decodeInt64Ptr(v, &req.Seed)
	case "stop":
		req.Stop = v
		return 1 << 8, true
	case "stream":
		return 1 << 9, decodeBool(v, &req.Stream)
	case "stream_options":
		return 1 << 10, json.Unmarshal(v, &req.StreamOptions) == nil
	case "temperature":
		return 1 << 11, decodeFloatPtr(v, &req.Temperature)
	case "top_p":
		return 1 << 12, decodeFloatPtr(v, &req.TopP)
	case "top_k":
		return 1 << 13, decodeIntPtr(v, &req.TopK)
	case "min_p":
		return 1 << 14, decodeFloatPtr(v, &req.MinP)
	case "presence_penalty":
		return 1 << 15, decodeFloatPtr(v, &req.PresencePenalty)
	case "frequency_penalty":
		return 1 << 16, decodeFloatPtr(v, &req.FrequencyPenalty)
	case "repetition_penalty":
		return 1 << 17, decodeFloatPtr(v, &req.RepetitionPenalty)
	case "tools":
		return 1 << 18, decodeRawList(v, &req.Tools)
	case "tool_choice":
		req.ToolChoice = v
		return 1 << 19, true
	case "parallel_tool_calls":
		return 1 << 20, decodeBoolPtr(v, &req.ParallelToolCalls)
	case "add_generation_prompt":
		return 1 << 21, decodeBoolPtr(v, &req.AddGenerationPrompt)
	case "continue_final_message":
		return 1 << 22, decodeBool(v, &req.ContinueFinalMessage)
	case "chat_template_kwargs":
		return 1 << 23, json.Unmarshal(v, &req.ChatTemplateKwargs) == nil
	case "return_tokens_as_token_ids":
		return 1 << 24, decodeBoolPtr(v, &req.ReturnTokensAsIDs)
	case "return_token_ids":
		return 1 << 25, decodeBool(v, &req.ReturnTokenIDs)
	case "include_reasoning":
		return 1 << 26, decodeBoolPtr(v, &req.IncludeReasoning)
	case "prompt_logprobs":
		return 1 << 27, decodeIntPtr(v, &req.PromptLogprobs)
	case "min_tokens":
		return 1 << 28, decodeIntPtr(v, &req.MinTokens)
	case "stop_token_ids":
		return 1 << 29, json.Unmarshal(v, &req.StopTokenIDs) == nil
	case "include_stop_str_in_output":
		return 1 << 30, decodeBool(v, &req.IncludeStopStr)
	}
	return 0, true
}

// decodeMessagesAt reads the messages array starting at b[i] and returns
// where it ends; null leaves it nil, as encoding/json does.
func decodeMessagesAt(b []byte, i int, out *[]chatMessage) (int, bool) {
	if end, ok := nullAt(b, i); ok {
		*out = nil
		return end, true
	}
	msgs := []chatMessage{}
	end, ok := jsonscan.ArrayAt(b, i, func(e int) (int, bool) {
		msgs = append(msgs, chatMessage{})
		return msgs[len(msgs)-1].decodeAt(b, e)
	})
	*out = msgs
	return end, ok
}

// nullAt reports whether b[i:] starts with the literal null, and its end.
func nullAt(b []byte, i int) (int, bool) {
	if len(b)-i >= 4 && string(b[i:i+4]) == "null" {
		return i + 4, true
	}
	return 0, false
}

// decodeAt reads one message starting at b[i]: every field stays raw JSON
// (null included, as json.RawMessage keeps it).
func (m *chatMessage) decodeAt(b []byte, i int) (int, bool) {
	if end, ok := nullAt(b, i); ok {
		return end, true
	}
	var seen uint8
	return jsonscan.ObjectAt(b, i, func(key []byte, esc bool, v int) (int, bool) {
		if !jsonscan.PlainKey(key, esc) {
			return 0, false
		}
		vEnd, ok := jsonscan.ValueDepth(b, v, 2)
		if !ok {
			return 0, false
		}
		val := b[v:vEnd]
		var dst *json.RawMessage
		var bit uint8
		switch string(key) {
		case "role":
			dst, bit = &m.Role, 1<<0
		case "content":
			dst, bit = &m.Content, 1<<1
		case "reasoning":
			dst, bit = &m.Reasoning, 1<<2
		case "reasoning_content":
			dst, bit = &m.ReasoningContent, 1<<3
		case "tool_calls":
			dst, bit = &m.ToolCalls, 1<<4
		case "tool_call_id":
			dst, bit = &m.ToolCallID, 1<<5
		case "name":
			dst, bit = &m.Name, 1<<6
		default:
			return vEnd, true
		}
		if seen&bit != 0 {
			return 0, false
		}
		seen |= bit
		*dst = val
		return vEnd, true
	})
}

func decodeRawList(v []byte, out **[]json.RawMessage) bool {
	if string(v) == "null" {
		*out = nil
		return true
	}
	list := []json.RawMessage{}
	_, ok := jsonscan.Array(v, 0, func(e []byte) bool {
		list = append(list, e)
		return true
	}, 1)
	*out = &list
	return ok
}

func decodeString(v []byte, out *string) bool {
	if string(v) == "null" {
		return true // encoding/json leaves a non-pointer field as it was
	}
	if s, ok := jsonscan.PlainString(v); ok {
		*out = s
		return true
	}
	return v[0] == '"' && json.Unmarshal(v, out) == nil
}

func decodeBool(v []byte, out *bool) bool {
	switch string(v) {
	case "true":
		*out = true
	case "false":
		*out = false
	case "null":
	default:
		return false
	}
	return true
}

func decodeBoolPtr(v []byte, out **bool) bool {
	if string(v) == "null" {
		*out = nil
		return true
	}
	var b bool
	*out = &b
	return decodeBool(v, &b)
}

// decodeInt64Ptr accepts what encoding/json accepts for an int64: an
// integer literal in range.
func decodeInt64Ptr(v []byte, out **int64) bool {
	if string(v) == "null" {
		*out = nil
		return true
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return false
	}
	*out = &n
	return true
}

func decodeIntPtr(v []byte, out **int) bool {
	if string(v) == "null" {
		*out = nil
		return true
	}
	n, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
	if err != nil {
		return false
	}
	k := int(n)
	*out = &k
	return true
}

func decodeFloatPtr(v []byte, out **float64) bool {
	if string(v) == "null" {
		*out = nil
		return true
	}
	if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return false
	}
	*out = &f
	return true
}
