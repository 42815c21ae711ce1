package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Token keys of a carrier item (docs/record.md#reading-tokens-from-a-served-reply).
const (
	keyPromptIDs     = "prompt_token_ids"
	keyGenerationIDs = "generation_token_ids"
	keyLogProbs      = "generation_log_probs"
	keyRoutedExperts = "routed_experts"
)

// errNoTokenIDs means the reply carries no token information at all.
var errNoTokenIDs = errors.New("reply carries no token ids")

// tokenInfo is what one generation contributed, read from the engine reply.
type tokenInfo struct {
	Prompt        []int
	Generation    []int
	LogProbs      []float64
	RoutedExperts any // opaque; nil when absent
}

// tokenizeFunc asks the engine's /tokenize for a prompt's ids.
type tokenizeFunc func(ctx context.Context, body map[string]any) ([]int, error)

// readChatTokens reads token ids and log-probs from a chat completion in the
// order of docs/record.md#reading-tokens-from-a-served-reply: a token bundle on the message, else the engine
// transport fields (logprobs with token_id:<n> strings, return_token_ids
// arrays, or /tokenize for the prompt).
func readChatTokens(ctx context.Context, resp, outbound map[string]any, tokenize tokenizeFunc) (*tokenInfo, error) {
	choice, msg, err := firstChoice(resp)
	if err != nil {
		return nil, err
	}
	if hasAnyTokenKey(msg) {
		return readBundle(resp, choice, msg)
	}
	gen, lps, err := logprobTokens(choice["logprobs"])
	if err != nil {
		return nil, err
	}
	info := &tokenInfo{Generation: gen, LogProbs: lps, RoutedExperts: msg[keyRoutedExperts]}
	topPrompt, hasTop := resp["prompt_token_ids"]
	choiceIDs, hasChoice := choice["token_ids"]
	hasTop = hasTop && topPrompt != nil
	hasChoice = hasChoice && choiceIDs != nil
	switch {
	case hasTop && hasChoice:
		if info.Prompt, err = asIntSlice(topPrompt); err != nil {
			return nil, fmt.Errorf("prompt_token_ids: %w", err)
		}
		ids, err := asIntSlice(choiceIDs)
		if err != nil {
			return nil, fmt.Errorf("choices[0].token_ids: %w", err)
		}
		if !slices.Equal(ids, gen) {
			return nil, errors.New("choices[0].token_ids disagree with the ids in the log-probs")
		}
	case hasTop != hasChoice:
		return nil, errors.New("prompt_token_ids and choices[0].token_ids must come together")
	default:
		if tokenize == nil {
			return nil, errors.New("no prompt token ids and no tokenizer to ask")
		}
		sub := map[string]any{}
		for _, k := range []string{"model", "messages", "tools", "chat_template_kwargs", "mm_processor_kwargs", "required_prefix_token_ids"} {
			if v, ok := outbound[k]; ok {
				sub[k] = v
			}
		}
		if info.Prompt, err = tokenize(ctx, sub); err != nil {
			return nil, fmt.Errorf("tokenizing the prompt: %w", err)
		}
	}
	return info, nil
}

// readCompletionTokens reads token ids from a text completion: logprobs
// (tokens as token_id:<n>, token_logprobs) and the per-choice
// prompt_token_ids/token_ids, or /tokenize for the prompt.
func readCompletionTokens(ctx context.Context, resp, outbound map[string]any, tokenize tokenizeFunc) (*tokenInfo, error) {
	choices, _ := resp["choices"].([]any)
	if len(choices) == 0 {
		return nil, errors.New("reply has no choices")
	}
	choice, ok := choices[0].(map[string]any)
	if !ok {
		return nil, errors.New("choices[0] is not an object")
	}
	lp, _ := choice["logprobs"].(map[string]any)
	toks, ok1 := lp["tokens"].([]any)
	vals, ok2 := lp["token_logprobs"].([]any)
	if lp == nil || !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: log-probs were requested but the reply has none", errNoTokenIDs)
	}
	if len(toks) != len(vals) {
		return nil, errors.New("logprobs.tokens and logprobs.token_logprobs differ in length")
	}
	info := &tokenInfo{RoutedExperts: choice[keyRoutedExperts]}
	for i := range toks {
		s, _ := toks[i].(string)
		id, err := parseTokenIDString(s)
		if err != nil {
			return nil, fmt.Errorf("logprobs.tokens[%d]: %w", i, err)
		}
		f, err := asFloat(vals[i])
		if err != nil {
			return nil, fmt.Errorf("logprobs.token_logprobs[%d]: %w", i, err)
		}
		info.Generation = append(info.Generation, id)
		info.LogProbs = append(info.LogProbs, f)
	}
	var err error
	if v := choice["prompt_token_ids"]; v != nil {
		if info.Prompt, err = asIntSlice(v); err != nil {
			return nil, fmt.Errorf("choices[0].prompt_token_ids: %w", err)
		}
		return info, nil
	}
	if tokenize == nil {
		return nil, errors.New("no prompt token ids and no tokenizer to ask")
	}
	sub := map[string]any{"prompt": outbound["prompt"]}
	if m, ok := outbound["model"]; ok {
		sub["model"] = m
	}
	if info.Prompt, err = tokenize(ctx, sub); err != nil {
		return nil, fmt.Errorf("tokenizing the prompt: %w", err)
	}
	return info, nil
}

// readBundle reads a complete token bundle placed on the message by an
// engine-side adapter.
func readBundle(resp, choice, msg map[string]any) (*tokenInfo, error) {
	var missing []string
	for _, k := range []string{keyPromptIDs, keyGenerationIDs, keyLogProbs} {
		if msg[k] == nil {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("partial token metadata is missing: %s", strings.Join(missing, ", "))
	}
	info := &tokenInfo{RoutedExperts: msg[keyRoutedExperts]}
	var err error
	if info.Prompt, err = asIntSlice(msg[keyPromptIDs]); err != nil {
		return nil, fmt.Errorf("%s: %w", keyPromptIDs, err)
	}
	if info.Generation, err = asIntSlice(msg[keyGenerationIDs]); err != nil {
		return nil, fmt.Errorf("%s: %w", keyGenerationIDs, err)
	}
	if info.LogProbs, err = asFloatSlice(msg[keyLogProbs]); err != nil {
		return nil, fmt.Errorf("%s: %w", keyLogProbs, err)
	}
	if len(info.Generation) != len(info.LogProbs) {
		return nil, fmt.Errorf("%d generation ids but %d log-probs", len(info.Generation), len(info.LogProbs))
	}
	if v := resp["prompt_token_ids"]; v != nil {
		top, err := asIntSlice(v)
		if err != nil || !slices.Equal(top, info.Prompt) {
			return nil, errors.New("top-level prompt_token_ids disagree with the message bundle")
		}
	}
	if v := choice["token_ids"]; v != nil {
		ids, err := asIntSlice(v)
		if err != nil || !slices.Equal(ids, info.Generation) {
			return nil, errors.New("choices[0].token_ids disagree with the message bundle")
		}
	}
	return info, nil
}

func firstChoice(resp map[string]any) (choice, msg map[string]any, err error) {
	choices, _ := resp["choices"].([]any)
	if len(choices) == 0 {
		return nil, nil, errors.New("reply has no choices")
	}
	choice, ok := choices[0].(map[string]any)
	if !ok {
		return nil, nil, errors.New("choices[0] is not an object")
	}
	msg, ok = choice["message"].(map[string]any)
	if !ok {
		return nil, nil, errors.New("choices[0].message is not an object")
	}
	return choice, msg, nil
}

func hasAnyTokenKey(m map[string]any) bool {
	return m[keyPromptIDs] != nil || m[keyGenerationIDs] != nil || m[keyLogProbs] != nil
}

// parseTokenIDBytes is parseTokenIDString of a token's bytes, without a
// copy for the ids of up to 18 digits engines write.
func parseTokenIDBytes(b []byte) (int, error) {
	if rest, ok := bytes.CutPrefix(b, []byte("token_id:")); ok && len(rest) > 0 && rest[0] != '-' && len(rest) <= 18 {
		if n, ok := atoi(rest); ok {
			return n, nil
		}
	}
	return parseTokenIDString(string(b)) // its errors, and the rare forms
}

// parseTokenIDString parses vLLM's "token_id:<n>". Unlike Python's lenient
// int(), only an optional '-' and decimal digits are accepted (docs/record.md).
func parseTokenIDString(s string) (int, error) {
	rest, ok := strings.CutPrefix(s, "token_id:")
	if !ok {
		return 0, fmt.Errorf("token %q is not of the form token_id:<n> (was return_tokens_as_token_ids honoured?)", truncate(s, 40))
	}
	digits := strings.TrimPrefix(rest, "-")
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, fmt.Errorf("token %q has a malformed id", truncate(s, 40))
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return 0, fmt.Errorf("token %q: %w", truncate(s, 40), err)
	}
	return n, nil
}

func asFloat(v any) (float64, error) {
	var f float64
	switch x := v.(type) {
	case json.Number:
		var err error
		if f, err = x.Float64(); err != nil {
			return 0, err
		}
	case float64:
		f = x
	case int:
		f = float64(x)
	default:
		return 0, fmt.Errorf("not a number: %T", v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("non-finite log-prob %v", f)
	}
	return f, nil
}

func asInt(v any) (int, error) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("not an integer: %s", x)
		}
		return int(n), nil
	case float64:
		if x != math.Trunc(x) {
			return 0, fmt.Errorf("not an integer: %v", x)
		}
		return int(x), nil
	case int:
		return x, nil
	default:
		return 0, fmt.Errorf("not an integer: %T", v)
	}
}

func asIntSlice(v any) ([]int, error) {
	switch x := v.(type) {
	case []int:
		return x, nil
	case []any:
		out := make([]int, len(x))
		for i, e := range x {
			n, err := asInt(e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = n
		}
		return out, nil
	default:
		return nil, fmt.Errorf("not a list: %T", v)
	}
}

func asFloatSlice(v any) ([]float64, error) {
	switch x := v.(type) {
	case []float64:
		return x, nil
	case []any:
		out := make([]float64, len(x))
		for i, e := range x {
			f, err := asFloat(e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = f
		}
		return out, nil
	default:
		return nil, fmt.Errorf("not a list: %T", v)
	}
}
