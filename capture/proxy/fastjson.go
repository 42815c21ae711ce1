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
		for j < len(b) && !endsScalar(b[j]) {
			j++
		}
		if j == i {
			return 0, errShape
		}
		return j, nil
	}
}

// endsScalar reports the bytes that end a number or literal: what may
// follow a value inside an object or array.
func endsScalar(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\n', '\r', '\t':
		return true
	}
	return false
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
	end, err := eachFieldAt(b, skipWS(b, 0), func(key string, at int) (int, error) {
		vend, err := valueEnd(b, at)
		if err != nil {
			return 0, err
		}
		return vend, fn(key, b[at:vend])
	})
	if err != nil {
		return err
	}
	return trailingWS(b, end)
}

// eachFieldAt calls fn for every member of the object starting at b[i];
// fn reads the member's value, which starts at b[at], and returns the
// index just past it, so a value is scanned once, by what reads it.
// eachFieldAt returns the index just past the object.
func eachFieldAt(b []byte, i int, fn func(key string, at int) (int, error)) (int, error) {
	if i >= len(b) || b[i] != '{' {
		return 0, errShape
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		key, kend, err := objectKey(b, i)
		if err != nil {
			return 0, err
		}
		i = skipWS(b, kend)
		if i >= len(b) || b[i] != ':' {
			return 0, errShape
		}
		if i = skipWS(b, i+1); i >= len(b) {
			return 0, errShape
		}
		vend, err := fn(key, i)
		if err != nil {
			return 0, err
		}
		if i = skipWS(b, vend); i >= len(b) {
			return 0, errShape
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errShape
		}
	}
}

// objectKey reads the member name at b[i] and returns it with the index
// just past it.
func objectKey(b []byte, i int) (string, int, error) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, errShape
	}
	kend, err := stringEnd(b, i)
	if err != nil {
		return "", 0, err
	}
	rawKey := b[i+1 : kend-1]
	if k, ok := knownKey(rawKey); ok {
		return k, kend, nil // a known key: plain ASCII, no escapes
	}
	key := string(rawKey)
	if bytes.IndexByte(rawKey, '\\') >= 0 || !utf8.Valid(rawKey) {
		if err := json.Unmarshal(b[i:kend], &key); err != nil {
			return "", 0, errShape
		}
	}
	return key, kend, nil
}

// eachElem calls fn for every element of the array b.
func eachElem(b []byte, fn func(elem []byte) error) error {
	end, err := eachElemAt(b, skipWS(b, 0), func(at int) (int, error) {
		vend, err := valueEnd(b, at)
		if err != nil {
			return 0, err
		}
		return vend, fn(b[at:vend])
	})
	if err != nil {
		return err
	}
	return trailingWS(b, end)
}

// eachElemAt is eachFieldAt for the elements of the array at b[i].
func eachElemAt(b []byte, i int, fn func(at int) (int, error)) (int, error) {
	if i >= len(b) || b[i] != '[' {
		return 0, errShape
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		if i >= len(b) {
			return 0, errShape
		}
		vend, err := fn(i)
		if err != nil {
			return 0, err
		}
		if i = skipWS(b, vend); i >= len(b) {
			return 0, errShape
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, errShape
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

// parseChatLogprobsAt reads the chat log-probs object at b[i]
// ({"content":[{"token","logprob",...}]}) and returns the index just past it.
func parseChatLogprobsAt(b []byte, i int) (*chatLogprobs, int, error) {
	lp := &chatLogprobs{}
	sawContent := false
	end, err := eachFieldAt(b, i, func(key string, at int) (int, error) {
		if key != "content" {
			return valueEnd(b, at)
		}
		sawContent = true
		if isNullAt(b, at) {
			return at + len("null"), nil
		}
		lp.hasList = true
		lp.content = lp.content[:0]
		return eachElemAt(b, at, func(at int) (int, error) {
			var entry logprobEntry
			end, err := eachFieldAt(b, at, func(k string, at int) (int, error) {
				vend, err := valueEnd(b, at)
				if err != nil {
					return 0, err
				}
				return vend, entry.read(k, b[at:vend])
			})
			if err != nil {
				return 0, err
			}
			lp.content = append(lp.content, entry)
			return end, nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	if !sawContent {
		return nil, 0, errNotChatLogprobs
	}
	lp.raw = json.RawMessage(b[i:end])
	return lp, end, nil
}

// read takes the members of one log-prob entry that the capture uses.
func (entry *logprobEntry) read(k string, v []byte) error {
	switch k {
	case "token":
		if len(v) < 2 || v[0] != '"' {
			return errShape
		}
		entry.token, entry.hasToken = v[1:len(v)-1], true
		if jsonscan.StringRun(entry.token, 0, true) == len(entry.token) {
			return nil // plain ASCII without escapes: the bytes are the token
		}
		if bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return errShape
			}
			entry.token = []byte(s)
		}
	case "logprob":
		if bytes.Equal(v, []byte("null")) {
			entry.logprob = nil
			return nil
		}
		entry.logprob = json.RawMessage(v)
	}
	return nil
}

// isNullAt reports whether the value at b[i] is the literal null (and
// nothing longer, such as "nullx", which the walkers then refuse). It
// looks at five bytes at most: a log-probs object is not scanned to learn
// that it is not null.
func isNullAt(b []byte, i int) bool {
	if !hasLiteral(b, i, "null") {
		return false
	}
	j := i + len("null")
	return j == len(b) || endsScalar(b[j])
}

// decodeChatReplyFast is decodeChatReply on the structural splitter: each
// value is scanned once, by what reads it. When prompt is not nil,
// prompt.text receives the canonical text of the top-level prompt ids, for
// the record (record.TokenText), read after prompt.prev.
func decodeChatReplyFast(raw []byte, prompt *promptIDs) (map[string]any, error) {
	out := map[string]any{}
	end, err := eachFieldAt(raw, skipWS(raw, 0), func(key string, at int) (int, error) {
		switch key {
		case "prompt_token_ids":
			vend, err := valueEnd(raw, at)
			if err != nil {
				return 0, err
			}
			out[key] = topPromptIDs(raw, raw[at:vend], prompt)
			return vend, nil
		case "choices":
			choices := []any{}
			vend, err := eachElemAt(raw, at, func(at int) (int, error) {
				choice := map[string]any{}
				end, err := eachFieldAt(raw, at, func(k string, at int) (int, error) {
					return choiceMember(raw, at, k, choice)
				})
				choices = append(choices, choice)
				return end, err
			})
			out[key] = choices
			return vend, err
		default:
			v, vend, err := genericAt(raw, at)
			out[key] = v
			return vend, err
		}
	})
	if err != nil {
		return nil, err
	}
	if err := trailingWS(raw, end); err != nil {
		return nil, err
	}
	return out, nil
}

// topPromptIDs reads the reply's top-level prompt ids (val, inside raw),
// after prompt.prev when prompt is given, keeping their text.
func topPromptIDs(raw, val []byte, prompt *promptIDs) any {
	if prompt == nil {
		return fastInts(val)
	}
	if ids, tt, ok := record.ParseTokenIDsAfter(val, prompt.prev); ok {
		prompt.text, prompt.held = tt, len(raw)
		return ids
	}
	return fastInts(val)
}

// choiceMember reads the member k of a chat choice at b[at] into choice
// and returns the index just past it.
func choiceMember(b []byte, at int, k string, choice map[string]any) (int, error) {
	switch k {
	case "token_ids", "prompt_token_ids":
		vend, err := valueEnd(b, at)
		if err != nil {
			return 0, err
		}
		choice[k] = fastInts(b[at:vend])
		return vend, nil
	case "logprobs":
		if isNullAt(b, at) {
			choice[k] = nil
			return at + len("null"), nil
		}
		lp, vend, err := parseChatLogprobsAt(b, at)
		if errors.Is(err, errNotChatLogprobs) {
			v, vend, err := genericAt(b, at)
			choice[k] = v
			return vend, err
		}
		if err != nil {
			return 0, err
		}
		choice[k] = lp
		return vend, nil
	}
	v, vend, err := genericAt(b, at)
	choice[k] = v
	return vend, err
}

// genericAt reads the value at b[i] in the generic form, as decodeAny
// reads it on its own, and returns the index just past it.
func genericAt(b []byte, i int) (any, int, error) {
	if v, end, ok := genericValue(b, i, 0); ok {
		return v, end, nil
	}
	end, err := valueEnd(b, i)
	if err != nil {
		return nil, 0, err
	}
	v, err := decodeAny(b[i:end])
	if err != nil {
		return nil, 0, errShape
	}
	return v, end, nil
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
	if k, ok := knownKey(b); ok {
		return k
	}
	return string(b)
}

// knownKey returns b as one of internedKeys. The four keys of every
// generated token's log-prob entry are compared first, which costs less
// than hashing them.
func knownKey(b []byte) (string, bool) {
	switch string(b) {
	case "token":
		return "token", true
	case "logprob":
		return "logprob", true
	case "bytes":
		return "bytes", true
	case "top_logprobs":
		return "top_logprobs", true
	}
	k, ok := internedKeys[string(b)]
	return k, ok
}

// internedKeys are the keys internKey returns without copying; a map
// lookup of string(b) neither allocates nor, unlike a switch over fifty
// strings, compares the key with several of them.
var internedKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"id", "object", "created", "model", "choices", "index", "message", "delta", "role", "content",
		"text", "type", "name", "arguments", "function", "tool_calls", "tool_call_id",
		"reasoning_content", "reasoning", "refusal", "annotations", "audio", "function_call", "logprobs",
		"token", "logprob", "bytes", "top_logprobs", "finish_reason", "stop_reason", "token_ids",
		"prompt_token_ids", "prompt_logprobs", "usage", "prompt_tokens", "completion_tokens",
		"total_tokens", "prompt_tokens_details", "kv_transfer_params", "system_fingerprint",
		"service_tier", "routed_experts", "completion_tokens_details", "prompt_text",
		"ec_transfer_params", "metrics", "messages", "max_tokens", "stream",
	} {
		m[k] = k
	}
	return m
}()
