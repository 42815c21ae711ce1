package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/capbench/capbench/capture/proxy"
)

// checkUpstream rejects an --upstream that is not an http(s) base URL, or
// one that ends in /v1: the proxy appends /v1/... itself, so a pasted
// OpenAI-style base URL would reach vLLM as /v1/v1/... and get 404s.
func checkUpstream(raw string) error {
	if raw == "" {
		return fmt.Errorf("--upstream is required: the vLLM server's base URL, such as http://127.0.0.1:8000")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--upstream %q is not an http(s) URL; want the vLLM server's base URL, such as http://127.0.0.1:8000", raw)
	}
	if p := strings.TrimRight(u.Path, "/"); p == "/v1" || strings.HasSuffix(p, "/v1") {
		return fmt.Errorf("--upstream %q ends in /v1: drop the /v1 (use %q); the proxy adds /v1/... to each call itself",
			raw, strings.TrimSuffix(strings.TrimRight(raw, "/"), "/v1"))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--upstream %q has a query or fragment; want a base URL such as http://127.0.0.1:8000", raw)
	}
	return nil
}

// checkProxyFlags rejects out-of-range values of the flags proxy.New would
// otherwise report by their Go field names.
func checkProxyFlags(o proxy.Options) error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("--port %d is out of range (0-65535; 0 picks a free port)", o.Port)
	}
	if o.MaxBodyBytes < 0 {
		return fmt.Errorf("--max-body-bytes %d is negative", o.MaxBodyBytes)
	}
	return nil
}

// samplingKey matches the shape of a request field name (temperature, top_p).
var samplingKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// reservedSamplingKeys are the fields the capture path sets or needs from the
// client; pinning them would break capture (proxy.New refuses them too).
var reservedSamplingKeys = []string{"stream", "messages", "prompt", "logprobs", "top_logprobs", "return_tokens_as_token_ids", "return_token_ids", "n"}

// samplingCheck validates one --sampling-override value; it returns what the
// value must be when v does not fit.
type samplingCheck func(v any) (want string, ok bool)

func number(lo, hi float64, loOpen bool, want string) samplingCheck {
	return func(v any) (string, bool) {
		f, ok := v.(float64)
		if !ok || math.IsNaN(f) || f < lo || f > hi || (loOpen && f == lo) {
			return want, false
		}
		return "", true
	}
}

func integer(lo int64, want string) samplingCheck {
	return func(v any) (string, bool) {
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || f < float64(lo) || f > math.MaxInt32 {
			return want, false
		}
		return "", true
	}
}

func boolean(v any) (string, bool) {
	_, ok := v.(bool)
	return "true or false", ok
}

func object(v any) (string, bool) {
	_, ok := v.(map[string]any)
	return "a JSON object, such as {\"enable_thinking\":false}", ok
}

func stopValue(v any) (string, bool) {
	const want = "a string or a JSON array of strings"
	switch s := v.(type) {
	case string:
		return "", true
	case []any:
		for _, e := range s {
			if _, ok := e.(string); !ok {
				return want, false
			}
		}
		return "", true
	}
	return want, false
}

// samplingChecks are vLLM's sampling parameters with the ranges its
// SamplingParams accepts; a key not listed is refused, so a typo does not
// silently leave the trainer's sampling unpinned.
var samplingChecks = map[string]samplingCheck{
	"temperature":                   number(0, math.MaxFloat64, false, "a number >= 0"),
	"top_p":                         number(0, 1, true, "a number in (0, 1]"),
	"top_k":                         integer(-1, "an integer: -1 or 0 (all tokens), or at least 1"),
	"min_p":                         number(0, 1, false, "a number in [0, 1]"),
	"presence_penalty":              number(-2, 2, false, "a number in [-2, 2]"),
	"frequency_penalty":             number(-2, 2, false, "a number in [-2, 2]"),
	"repetition_penalty":            number(0, math.MaxFloat64, true, "a number > 0"),
	"max_tokens":                    integer(1, "an integer >= 1 (a cap: smaller client values are kept)"),
	"max_completion_tokens":         integer(1, "an integer >= 1 (a cap: smaller client values are kept)"),
	"min_tokens":                    integer(0, "an integer >= 0"),
	"seed":                          integer(math.MinInt32, "an integer"),
	"stop":                          stopValue,
	"ignore_eos":                    boolean,
	"skip_special_tokens":           boolean,
	"spaces_between_special_tokens": boolean,
	"include_stop_str_in_output":    boolean,
	"chat_template_kwargs":          object,
}

// samplingKeys are the keys --sampling-override accepts, sorted.
func samplingKeys() []string {
	names := make([]string, 0, len(samplingChecks))
	for n := range samplingChecks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func samplingKeyList() string { return strings.Join(samplingKeys(), ", ") }

// parseSamplingOverrides reads --sampling-override KEY=JSON pairs and checks
// each value against its key. A value that is not JSON is taken as a string
// (stop=END), which only string-valued keys accept.
func parseSamplingOverrides(pairs []string) (map[string]any, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--sampling-override %q: want KEY=VALUE, such as temperature=0.6", p)
		}
		if !samplingKey.MatchString(k) {
			return nil, fmt.Errorf("--sampling-override %q: %q is not a sampling parameter name (lower-case letters, digits and _, such as top_p)", p, k)
		}
		if slices.Contains(reservedSamplingKeys, k) {
			return nil, fmt.Errorf("--sampling-override %q: %s is set by the capture path and cannot be pinned", p, k)
		}
		check, known := samplingChecks[k]
		if !known {
			hint := ""
			if s := closest(k, samplingKeys()); s != "" {
				hint = fmt.Sprintf("; did you mean %q?", s)
			}
			return nil, fmt.Errorf("--sampling-override %q: unknown sampling parameter %q%s (known: %s)", p, k, hint, samplingKeyList())
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		if want, ok := check(val); !ok {
			return nil, fmt.Errorf("--sampling-override %q: %s must be %s", p, k, want)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--sampling-override %q: %s is given twice", p, k)
		}
		out[k] = val
	}
	return out, nil
}
