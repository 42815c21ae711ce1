package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/capbench/capbench/capture/record"
)

// Decoding a chat completion generically (every value an interface) costs
// milliseconds once the reply carries thousands of prompt ids and one
// log-prob object per generated token. decodeChatReply decodes the reply in
// one pass per field instead: the token arrays into []int, the log-probs into
// a typed form that keeps its raw bytes for clients that asked for them, and
// everything else generically with exact numbers.

// chatLogprobs is choices[i].logprobs of an engine reply.
type chatLogprobs struct {
	raw     json.RawMessage
	content []logprobEntry
	hasList bool // content was a JSON list
}

// logprobEntry is one generated token's log-prob entry, as far as the
// capture reads it. Both fields lie in the reply's bytes when the reply
// needed no unescaping, so an entry costs no allocation.
type logprobEntry struct {
	token    []byte          // the token string's contents, unescaped
	hasToken bool            // token was present and a string
	logprob  json.RawMessage // nil when missing or null
}

// MarshalJSON writes the engine's log-probs back byte for byte.
func (l *chatLogprobs) MarshalJSON() ([]byte, error) { return l.raw, nil }

func decodeChatReply(raw []byte) (map[string]any, error) {
	return decodeChatReplyText(raw, nil)
}

// promptIDs carries a captured reply's prompt ids from the decode to the
// record. text is their canonical text (record.TokenText), which points
// into the decoded buffer of held bytes. prev, when set, is the text of
// the rollout's previous prompt, which this one most likely repeats and
// extends: the decode reads only what follows the bytes the two share
// (record.ParseTokenIDsAfter).
type promptIDs struct {
	prev record.TokenText
	text record.TokenText
	held int
}

// decodeChatReplyText is decodeChatReply that also hands the canonical text
// of the top-level prompt ids to prompt.text when prompt is not nil (the fast path
// only; the fallback leaves it as the fast path left it, and a text that
// does not match the ids is never used: record.TokenText). The text points
// into raw, which must not be reused while the record is built: both
// callers pass a buffer of its own (the whole reply, one stream event).
func decodeChatReplyText(raw []byte, prompt *promptIDs) (map[string]any, error) {
	if out, err := decodeChatReplyFast(raw, prompt); err == nil {
		return out, nil
	}
	return decodeChatReplySlow(raw)
}

// decodeChatReplySlow is the encoding/json path, used when the splitter
// meets anything unexpected; it validates and reports the error.
func decodeChatReplySlow(raw []byte) (map[string]any, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	if top == nil {
		return nil, errors.New("null instead of an object")
	}
	out := make(map[string]any, len(top))
	for k, v := range top {
		var err error
		switch k {
		case "prompt_token_ids":
			out[k], err = decodeIntsOrAny(v)
		case "choices":
			out[k], err = decodeChoices(v)
		default:
			out[k], err = decodeAny(v)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return out, nil
}

func decodeChoices(raw json.RawMessage) (any, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return decodeAny(raw) // not a list: keep it as it is for the checks downstream
	}
	out := make([]any, len(list))
	for i, c := range list {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(c, &fields); err != nil || fields == nil {
			v, err := decodeAny(c)
			if err != nil {
				return nil, err
			}
			out[i] = v
			continue
		}
		choice := make(map[string]any, len(fields))
		for k, v := range fields {
			var err error
			switch k {
			case "token_ids", "prompt_token_ids":
				choice[k], err = decodeIntsOrAny(v)
			case "logprobs":
				choice[k], err = decodeLogprobs(v)
			default:
				choice[k], err = decodeAny(v)
			}
			if err != nil {
				return nil, fmt.Errorf("choices[%d].%s: %w", i, k, err)
			}
		}
		out[i] = choice
	}
	return out, nil
}

// decodeLogprobs keeps null as nil and a chat-shaped object (one with a
// "content" member) as *chatLogprobs; anything else (the completions shape)
// is decoded generically. Keys match exactly, as vLLM writes them.
func decodeLogprobs(raw json.RawMessage) (any, error) {
	if isNull(raw) {
		return nil, nil
	}
	var members map[string]json.RawMessage
	content, ok := json.RawMessage(nil), false
	if err := json.Unmarshal(raw, &members); err == nil {
		content, ok = members["content"]
	}
	if !ok {
		return decodeAny(raw)
	}
	lp := &chatLogprobs{raw: raw}
	if isNull(content) {
		return lp, nil
	}
	var entries []map[string]json.RawMessage
	if err := json.Unmarshal(content, &entries); err != nil {
		return lp, nil
	}
	lp.hasList = true
	for _, e := range entries {
		var entry logprobEntry
		if t, ok := e["token"]; ok && !isNull(t) {
			// A token that is not a string is left out; reading the ids
			// then fails, which marks the rollout without failing the call.
			var s string
			if json.Unmarshal(t, &s) == nil {
				entry.token, entry.hasToken = []byte(s), true
			}
		}
		if l, ok := e["logprob"]; ok && !isNull(l) {
			entry.logprob = l
		}
		lp.content = append(lp.content, entry)
	}
	return lp, nil
}

// decodeIntsOrAny decodes an integer list into []int, falling back to the
// generic form (so that the validation downstream reports bad values).
func decodeIntsOrAny(raw json.RawMessage) (any, error) {
	if isNull(raw) {
		return nil, nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil {
		return ids, nil
	}
	return decodeAny(raw)
}

func decodeAny(raw json.RawMessage) (any, error) {
	if v, ok := parseGeneric(raw); ok {
		return v, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// logprobTokens reads generation ids and log-probs from chat log-probs in
// either the typed or the generic form.
func logprobTokens(v any) (ids []int, lps []float64, err error) {
	switch lp := v.(type) {
	case *chatLogprobs:
		if !lp.hasList {
			return nil, nil, fmt.Errorf("%w: log-probs were requested but the reply has none", errNoTokenIDs)
		}
		ids = make([]int, 0, len(lp.content))
		lps = make([]float64, 0, len(lp.content))
		for i, e := range lp.content {
			if !e.hasToken {
				return nil, nil, fmt.Errorf("logprobs.content[%d].token is missing", i)
			}
			id, err := parseTokenIDBytes(e.token)
			if err != nil {
				return nil, nil, fmt.Errorf("logprobs.content[%d]: %w", i, err)
			}
			if e.logprob == nil {
				return nil, nil, fmt.Errorf("logprobs.content[%d].logprob is missing", i)
			}
			f, err := asFloat(json.Number(bytes.TrimSpace(e.logprob)))
			if err != nil {
				return nil, nil, fmt.Errorf("logprobs.content[%d].logprob: %w", i, err)
			}
			ids = append(ids, id)
			lps = append(lps, f)
		}
		return ids, lps, nil
	case map[string]any:
		content, ok := lp["content"].([]any)
		if !ok {
			return nil, nil, fmt.Errorf("%w: log-probs were requested but the reply has none", errNoTokenIDs)
		}
		for i, el := range content {
			obj, ok := el.(map[string]any)
			if !ok {
				return nil, nil, fmt.Errorf("logprobs.content[%d] is not an object", i)
			}
			tok, _ := obj["token"].(string)
			id, err := parseTokenIDString(tok)
			if err != nil {
				return nil, nil, fmt.Errorf("logprobs.content[%d]: %w", i, err)
			}
			f, err := asFloat(obj["logprob"])
			if err != nil {
				return nil, nil, fmt.Errorf("logprobs.content[%d].logprob: %w", i, err)
			}
			ids = append(ids, id)
			lps = append(lps, f)
		}
		return ids, lps, nil
	default:
		return nil, nil, fmt.Errorf("%w: log-probs were requested but the reply has none", errNoTokenIDs)
	}
}
