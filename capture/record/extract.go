package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Token keys a served payload carries (docs/record.md#reading-tokens-from-a-served-reply).
const (
	tokenKeyPrompt     = "prompt_token_ids"
	tokenKeyGeneration = "generation_token_ids"
	tokenKeyLogProbs   = "generation_log_probs"
	tokenKeyRouted     = "routed_experts"
)

var requiredTokenKeys = [...]string{tokenKeyPrompt, tokenKeyGeneration, tokenKeyLogProbs}

// ErrExtract marks a served payload whose token metadata is malformed. The
// messages after it are Gym's exact texts.
var ErrExtract = errors.New("token extraction failed")

// Extraction is what a served payload yields for one record. Found is false
// when no item carries token ids; the other fields are then empty.
type Extraction struct {
	Found              bool
	PromptTokenIDs     []int
	GenerationTokenIDs []int
	GenerationLogProbs []float64
	RoutedExperts      json.RawMessage
	OutputItems        []Item
	TokenItemIndex     *int
	ResponseID         *string
}

// Extract finds the token carrier of a served Chat Completions or Responses
// payload, builds output_items without the token keys and reads the
// response id (docs/record.md#reading-tokens-from-a-served-reply). The payload is not modified; the output items
// are deep copies.
//
// Decode the payload with json.Decoder.UseNumber: items and routed_experts
// are copied as decoded, and a float64 from plain decoding turns an integer
// such as "index": 0 into 0.0 on the record (token ids and log-probs are
// read correctly either way).
func Extract(payload map[string]any) (*Extraction, error) {
	var candidates []map[string]any
	output, _ := payload["output"].([]any)
	for _, o := range output {
		if m, ok := o.(map[string]any); ok && hasAnyTokenKey(m) {
			candidates = append(candidates, m)
		}
	}
	choices, _ := payload["choices"].([]any)
	var messages []map[string]any
	for _, c := range choices {
		cm, ok := c.(map[string]any)
		if !ok {
			continue
		}
		msg, ok := cm["message"].(map[string]any)
		if !ok {
			continue
		}
		messages = append(messages, msg)
		if hasAnyTokenKey(msg) {
			candidates = append(candidates, msg)
		}
	}
	switch {
	case len(candidates) == 0:
		return &Extraction{}, nil
	case len(candidates) > 1:
		return nil, fmt.Errorf("%w: multiple response items carry token metadata", ErrExtract)
	}
	carrier := candidates[0]
	var missing []string
	for _, k := range requiredTokenKeys {
		if carrier[k] == nil {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: partial token metadata is missing: %s", ErrExtract, strings.Join(missing, ", "))
	}
	x := &Extraction{Found: true}
	var err error
	if x.PromptTokenIDs, err = intList(carrier[tokenKeyPrompt], tokenKeyPrompt); err != nil {
		return nil, err
	}
	if x.GenerationTokenIDs, err = intList(carrier[tokenKeyGeneration], tokenKeyGeneration); err != nil {
		return nil, err
	}
	if x.GenerationLogProbs, err = floatList(carrier[tokenKeyLogProbs], tokenKeyLogProbs); err != nil {
		return nil, err
	}
	if re := carrier[tokenKeyRouted]; re != nil {
		raw, err := Canonical(re)
		if err != nil {
			return nil, fmt.Errorf("%w: routed_experts: %w", ErrExtract, err)
		}
		x.RoutedExperts = raw
	}

	var source []map[string]any
	if len(output) > 0 {
		for _, o := range output {
			if m, ok := o.(map[string]any); ok {
				source = append(source, m)
			}
		}
	} else {
		for _, msg := range messages {
			wrapped := make(map[string]any, len(msg)+2)
			for k, v := range msg {
				wrapped[k] = v
			}
			if _, ok := wrapped["type"]; !ok {
				wrapped["type"] = "message"
			}
			if _, ok := wrapped["role"]; !ok {
				wrapped["role"] = "assistant"
			}
			source = append(source, wrapped)
		}
	}
	x.OutputItems = make([]Item, 0, len(source))
	for i, src := range source {
		if src[tokenKeyGeneration] != nil {
			if x.TokenItemIndex != nil {
				return nil, fmt.Errorf("%w: multiple output items carry token metadata", ErrExtract)
			}
			idx := i
			x.TokenItemIndex = &idx
		}
		item := make(Item, len(src))
		for k, v := range src {
			switch k {
			case tokenKeyPrompt, tokenKeyGeneration, tokenKeyLogProbs, tokenKeyRouted:
				continue
			}
			item[k] = cloneJSON(v)
		}
		x.OutputItems = append(x.OutputItems, item)
	}
	x.ResponseID = responseID(payload["id"])
	return x, nil
}

func hasAnyTokenKey(m map[string]any) bool {
	for _, k := range requiredTokenKeys {
		if m[k] != nil {
			return true
		}
	}
	return false
}

// responseID renders the payload id as a string; empty or absent is nil.
func responseID(v any) *string {
	var s string
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		s = x
	case json.Number:
		s = string(x)
	case float64:
		s = strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		// Python's str(True) spelling; ids are strings in practice.
		s = map[bool]string{true: "True", false: "False"}[x]
	default:
		b, err := Canonical(x)
		if err != nil {
			return nil
		}
		s = string(b)
	}
	if s == "" {
		return nil
	}
	return &s
}

func intList(v any, field string) ([]int, error) {
	list, ok := v.([]any)
	if !ok {
		if ints, ok := v.([]int); ok {
			return cloneSlice(ints), nil
		}
		return nil, fmt.Errorf("%w: %s is not a list", ErrExtract, field)
	}
	out := make([]int, len(list))
	for i, e := range list {
		n, err := jsonInt(e)
		if err != nil {
			return nil, fmt.Errorf("%w: %s[%d]: %w", ErrExtract, field, i, err)
		}
		out[i] = n
	}
	return out, nil
}

func jsonInt(v any) (int, error) {
	switch x := v.(type) {
	case json.Number:
		return coerceIntNumber(string(x))
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) || x < -(1<<63) || x >= 1<<63 {
			return 0, fmt.Errorf("%v is not an integer", x)
		}
		return int(x), nil
	case int:
		return x, nil
	case int64:
		return int(x), nil
	default:
		return 0, fmt.Errorf("%T is not an integer", v)
	}
}

func floatList(v any, field string) ([]float64, error) {
	list, ok := v.([]any)
	if !ok {
		if fs, ok := v.([]float64); ok {
			return cloneSlice(fs), nil
		}
		return nil, fmt.Errorf("%w: %s is not a list", ErrExtract, field)
	}
	out := make([]float64, len(list))
	for i, e := range list {
		var f float64
		switch x := e.(type) {
		case json.Number:
			var err error
			if f, err = strconv.ParseFloat(string(x), 64); err != nil {
				return nil, fmt.Errorf("%w: %s[%d]: %w", ErrExtract, field, i, err)
			}
		case float64:
			f = x
		case int:
			f = float64(x)
		default:
			return nil, fmt.Errorf("%w: %s[%d]: %T is not a number", ErrExtract, field, i, e)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: %s[%d] is not finite", ErrExtract, field, i)
		}
		out[i] = f
	}
	return out, nil
}
