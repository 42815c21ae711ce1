package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/internal/jsonscan"
)

// A minimal structural JSON splitter for the hot path of decodeChatReply.
// It finds the extent of values without building them, so that only the
// small fields of an engine reply go through encoding/json; the token arrays
// and log-probs are read by the dedicated parsers below. Any structural
// surprise makes the caller fall back to encoding/json, which validates and
// reports the error.

var errShape = errors.New("unexpected JSON shape")

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string starting at b[i] == '"'.
func stringEnd(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		if j = jsonscan.StringRun(b, j, false); j >= len(b) {
			break
		}
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errShape
}

// containerStop marks the bytes valueEnd's container scan acts on.
var containerStop = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

// flatArrayEnd returns the index just past the array starting at b[i] when
// nothing inside it is a string or a container: a reply's prompt ids, which
// are most of a long call's reply. Five vectorized byte searches over them
// cost a fraction of containerEnd's byte-at-a-time scan.
func flatArrayEnd(b []byte, i int) (int, bool) {
	if b[i] != '[' {
		return 0, false
	}
	n := bytes.IndexByte(b[i+1:], ']')
	if n < 0 {
		return 0, false
	}
	inner := b[i+1 : i+1+n]
	for _, c := range []byte{'"', '[', '{', '}'} {
		if bytes.IndexByte(inner, c) >= 0 {
			return 0, false
		}
	}
	return i + n + 2, true
}

// valueEnd returns the index just past the value starting at b[i].
func valueEnd(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errShape
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		if end, ok := flatArrayEnd(b, i); ok {
			return end, nil
		}
		return containerEnd(b, i)
	default:
		j := i
		for j < len(b) {
			switch b[j] {
			case ',', '}', ']', ' ', '\n', '\r', '\t':
				if j == i {
					return 0, errShape
				}
				return j, nil
			}
			j++
		}
		if j == i {
			return 0, errShape
		}
		return j, nil
	}
}

// containerEnd returns the index just past the object or array starting
// at b[i], a byte at a time.
func containerEnd(b []byte, i int) (int, error) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch c := b[j]; {
		case !containerStop[c]: // most bytes: one table load, no comparisons
		case c == '"':
			end, err := stringEnd(b, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case c == '{' || c == '[':
			depth++
		default:
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, errShape
}

// eachField calls fn for every member of the object b (which must be the
// whole input apart from surrounding whitespace).
func eachField(b []byte, fn func(key string, val []byte) error) error {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errShape
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return trailingWS(b, i+1)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return errShape
		}
		kend, err := stringEnd(b, i)
		if err != nil {
			return err
		}
		rawKey := b[i+1 : kend-1]
		key := internKey(rawKey)
		if bytes.IndexByte(rawKey, '\\') >= 0 || !utf8.Valid(rawKey) {
			if err := json.Unmarshal(b[i:kend], &key); err != nil {
				return errShape
			}
		}
		i = skipWS(b, kend)
		if i >= len(b) || b[i] != ':' {
			return errShape
		}
		i = skipWS(b, i+1)
		vend, err := valueEnd(b, i)
		if err != nil {
			return err
		}
		if err := fn(key, b[i:vend]); err != nil {
			return err
		}
		i = skipWS(b, vend)
		if i >= len(b) {
			return errShape
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return trailingWS(b, i+1)
		default:
			return errShape
		}
	}
}

// eachElem calls fn for every element of the array b.
func eachElem(b []byte, fn func(elem []byte) error) error {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return errShape
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return trailingWS(b, i+1)
	}
	for {
		vend, err := valueEnd(b, i)
		if err != nil {
			return err
		}
		if err := fn(b[i:vend]); err != nil {
			return err
		}
		i = skipWS(b, vend)
		if i >= len(b) {
			return errShape
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return trailingWS(b, i+1)
		default:
			return errShape
		}
	}
}

func trailingWS(b []byte, i int) error {
	if skipWS(b, i) != len(b) {
		return errShape
	}
	return nil
}

// parseIntList reads a JSON list of integers; ok is false for anything else.
func parseIntList(b []byte) ([]int, bool) {
	if out, ok := record.ParseIntArray(b); ok {
		return out, true
	}
	return splitIntList(b)
}

// splitIntList is parseIntList on the general element splitter.
func splitIntList(b []byte) ([]int, bool) {
	out := make([]int, 0, len(b)/6+1)
	err := eachElem(b, func(e []byte) error {
		n, ok := atoi(e)
		if !ok {
			return errShape
		}
		out = append(out, n)
		return nil
	})
	return out, err == nil
}

// atoi parses an optional '-' and up to 18 decimal digits without
// allocating; anything else (including longer numbers) is left to strconv.
func atoi(e []byte) (int, bool) {
	neg := len(e) > 0 && e[0] == '-'
	d := e
	if neg {
		d = e[1:]
	}
	if len(d) == 0 || len(d) > 18 {
		n, err := strconv.Atoi(string(e))
		return n, err == nil
	}
	n := 0
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// errNotChatLogprobs: the log-probs object has no content member.
var errNotChatLogprobs = errors.New("log-probs without content")

// parseChatLogprobs reads chat log-probs ({"content":[{"token","logprob",...}]}).
func parseChatLogprobs(b []byte) (*chatLogprobs, error) {
	lp := &chatLogprobs{raw: json.RawMessage(b)}
	sawContent := false
	err := eachField(b, func(key string, val []byte) error {
		if key != "content" {
			return nil
		}
		sawContent = true
		if bytes.Equal(val, []byte("null")) {
			return nil
		}
		lp.hasList = true
		lp.content = lp.content[:0]
		return eachElem(val, func(e []byte) error {
			var entry logprobEntry
			err := eachField(e, func(k string, v []byte) error {
				switch k {
				case "token":
					if len(v) < 2 || v[0] != '"' {
						return errShape
					}
					s := string(v[1 : len(v)-1])
					if bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
						if err := json.Unmarshal(v, &s); err != nil {
							return errShape
						}
					}
					entry.Token = &s
				case "logprob":
					if bytes.Equal(v, []byte("null")) {
						entry.Logprob = nil
						return nil
					}
					raw := json.RawMessage(v)
					entry.Logprob = &raw
				}
				return nil
			})
			if err != nil {
				return err
			}
			lp.content = append(lp.content, entry)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if !sawContent {
		return nil, errNotChatLogprobs
	}
	return lp, nil
}

// decodeChatReplyFast is decodeChatReply on the structural splitter. When
// prompt is not nil, prompt.text receives the canonical text of the
// top-level prompt ids, for the record (record.TokenText), read after
// prompt.prev.
func decodeChatReplyFast(raw []byte, prompt *promptIDs) (map[string]any, error) {
	out := map[string]any{}
	err := eachField(raw, func(key string, val []byte) error {
		switch key {
		case "prompt_token_ids":
			if prompt == nil {
				out[key] = fastInts(val)
			} else if ids, tt, ok := record.ParseTokenIDsAfter(val, prompt.prev); ok {
				out[key], prompt.text, prompt.held = ids, tt, len(raw)
			} else {
				out[key] = fastInts(val)
			}
		case "choices":
			var choices []any
			if err := eachElem(val, func(c []byte) error {
				choice := map[string]any{}
				if err := eachField(c, func(k string, v []byte) error {
					switch k {
					case "token_ids", "prompt_token_ids":
						choice[k] = fastInts(v)
					case "logprobs":
						if bytes.Equal(v, []byte("null")) {
							choice[k] = nil
							return nil
						}
						lp, err := parseChatLogprobs(v)
						if errors.Is(err, errNotChatLogprobs) {
							d, err := decodeAny(v)
							if err != nil {
								return errShape
							}
							choice[k] = d
							return nil
						}
						if err != nil {
							return err
						}
						choice[k] = lp
					default:
						d, err := decodeAny(v)
						if err != nil {
							return errShape
						}
						choice[k] = d
					}
					return nil
				}); err != nil {
					return err
				}
				choices = append(choices, choice)
				return nil
			}); err != nil {
				return err
			}
			if choices == nil {
				choices = []any{}
			}
			out[key] = choices
		default:
			d, err := decodeAny(val)
			if err != nil {
				return errShape
			}
			out[key] = d
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fastInts decodes an integer list fast, null as nil, and anything else
// generically (so that the checks downstream report it).
func fastInts(v []byte) any {
	if bytes.Equal(v, []byte("null")) {
		return nil
	}
	if ids, ok := parseIntList(v); ok {
		return ids
	}
	d, err := decodeAny(v)
	if err != nil {
		return nil
	}
	return d
}

// internKey returns an object key as a string without allocating for the
// keys engine replies and requests repeat most (every generated token's
// logprob object carries four of them); any other key is copied.
func internKey(b []byte) string {
	switch string(b) {
	case "id":
		return "id"
	case "object":
		return "object"
	case "created":
		return "created"
	case "model":
		return "model"
	case "choices":
		return "choices"
	case "index":
		return "index"
	case "message":
		return "message"
	case "delta":
		return "delta"
	case "role":
		return "role"
	case "content":
		return "content"
	case "text":
		return "text"
	case "type":
		return "type"
	case "name":
		return "name"
	case "arguments":
		return "arguments"
	case "function":
		return "function"
	case "tool_calls":
		return "tool_calls"
	case "tool_call_id":
		return "tool_call_id"
	case "reasoning_content":
		return "reasoning_content"
	case "reasoning":
		return "reasoning"
	case "refusal":
		return "refusal"
	case "annotations":
		return "annotations"
	case "audio":
		return "audio"
	case "function_call":
		return "function_call"
	case "logprobs":
		return "logprobs"
	case "token":
		return "token"
	case "logprob":
		return "logprob"
	case "bytes":
		return "bytes"
	case "top_logprobs":
		return "top_logprobs"
	case "finish_reason":
		return "finish_reason"
	case "stop_reason":
		return "stop_reason"
	case "token_ids":
		return "token_ids"
	case "prompt_token_ids":
		return "prompt_token_ids"
	case "prompt_logprobs":
		return "prompt_logprobs"
	case "usage":
		return "usage"
	case "prompt_tokens":
		return "prompt_tokens"
	case "completion_tokens":
		return "completion_tokens"
	case "total_tokens":
		return "total_tokens"
	case "prompt_tokens_details":
		return "prompt_tokens_details"
	case "kv_transfer_params":
		return "kv_transfer_params"
	case "system_fingerprint":
		return "system_fingerprint"
	case "service_tier":
		return "service_tier"
	case "routed_experts":
		return "routed_experts"
	case "completion_tokens_details":
		return "completion_tokens_details"
	case "prompt_text":
		return "prompt_text"
	case "ec_transfer_params":
		return "ec_transfer_params"
	case "metrics":
		return "metrics"
	case "messages":
		return "messages"
	case "max_tokens":
		return "max_tokens"
	case "stream":
		return "stream"
	}
	return string(b)
}
