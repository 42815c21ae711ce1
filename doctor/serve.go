package doctor

import (
	"fmt"
	"strings"

	"github.com/capbench/capbench/fakes/gpu"
)

// ClaudeCodeMaxTokens is the output budget Claude Code asks for on every call.
const ClaudeCodeMaxTokens = 32000

// MinPromptRoom is the prompt room below which a 32,000-token call is
// refused on the first turn: Claude Code's system prompt and tool list alone
// are thousands of tokens (docs/doctor.md).
const MinPromptRoom = 8192

// Serve is a `vllm serve` command line reduced to what the checks need.
type Serve struct {
	Model                string
	MaxModelLen          string // as written; "" = the model's default
	EnableAutoToolChoice bool
	ToolCallParser       string
	GPUMemoryUtilization string
	KVCacheDType         string
	MaxNumSeqs           string
	MaxNumBatchedTokens  string
	SkipTokenizerInit    bool
	// Lines locate flags (name without dashes → line); Line is the command's.
	Lines map[string]int
	Line  int
}

// boolFlags are `vllm serve` flags that take no value.
var boolFlags = map[string]bool{
	"enable-auto-tool-choice": true, "skip-tokenizer-init": true, "trust-remote-code": true,
	"enforce-eager": true, "enable-prefix-caching": true, "no-enable-prefix-caching": true,
	"disable-log-requests": true, "disable-log-stats": true, "enable-log-requests": true,
	"return-tokens-as-token-ids": true, "enable-chunked-prefill": true, "enable-request-id-headers": true,
}

// ParseServe reads `vllm serve MODEL --flag value ...` from argv (argv[0]
// is "vllm"). lines gives each argument's line (nil: all on line 0).
func ParseServe(argv []string, lines []int) (Serve, error) {
	s := Serve{Lines: map[string]int{}}
	lineAt := func(i int) int {
		if i < len(lines) {
			return lines[i]
		}
		return 0
	}
	s.Line = lineAt(0)
	i := 0
	for i < len(argv) && (argv[i] == "vllm" || argv[i] == "serve") {
		i++
	}
	for ; i < len(argv); i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "--") {
			if s.Model == "" {
				s.Model, s.Lines["model"] = a, lineAt(i)
			}
			continue
		}
		name, val, hasEq := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		name = strings.ReplaceAll(name, "_", "-")
		s.Lines[name] = lineAt(i)
		if !hasEq && !boolFlags[name] {
			if i+1 >= len(argv) || strings.HasPrefix(argv[i+1], "--") {
				return s, fmt.Errorf("vllm serve: --%s needs a value", name)
			}
			i++
			val = argv[i]
		}
		switch name {
		case "model":
			s.Model = val
		case "max-model-len":
			s.MaxModelLen = val
		case "enable-auto-tool-choice":
			s.EnableAutoToolChoice = !hasEq || val == "true"
		case "tool-call-parser":
			s.ToolCallParser = val
		case "gpu-memory-utilization":
			s.GPUMemoryUtilization = val
		case "kv-cache-dtype":
			s.KVCacheDType = val
		case "max-num-seqs":
			s.MaxNumSeqs = val
		case "max-num-batched-tokens":
			s.MaxNumBatchedTokens = val
		case "skip-tokenizer-init":
			s.SkipTokenizerInit = !hasEq || val == "true"
		}
	}
	return s, nil
}

// ServeOptions are the GPU and workload the flags are judged against.
type ServeOptions struct {
	File string
	// GPUBytes is the device memory; 0 skips the memory checks.
	GPUBytes int64
	GPULabel string
	// MaxTokens is the harness's output budget (0: Claude Code's 32,000).
	MaxTokens int
}

// CheckServe checks vLLM serve flags: both tool flags, the tokenizer, and
// with a GPU whether vLLM starts and holds a 32,000-token call, using the
// planner's math (fakes/gpu, the fake vLLM's own code).
func CheckServe(s Serve, o ServeOptions) []Finding {
	var out []Finding
	add := func(flag, rule string, sev Severity, msg, cause, fix string) {
		line, ok := s.Lines[flag]
		if !ok {
			line = s.Line
		}
		out = append(out, Finding{Rule: rule, Severity: sev, File: o.File, Line: line, Subject: "--" + flag, Message: msg, Cause: cause, Fix: fix})
	}
	switch {
	case s.ToolCallParser != "" && !s.EnableAutoToolChoice:
		add("tool-call-parser", "serve/tool-parser-alone", Error, "--tool-call-parser without --enable-auto-tool-choice leaves automatic tool choice off",
			"Claude Code's requests with tools then fail (\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set) or the tool call stays text: the harness never runs a tool and every rollout is one call",
			"add --enable-auto-tool-choice")
	case s.EnableAutoToolChoice && s.ToolCallParser == "":
		add("enable-auto-tool-choice", "serve/auto-tools-alone", Error, "--enable-auto-tool-choice without --tool-call-parser: vLLM refuses to start", "", "add --tool-call-parser hermes")
	case !s.EnableAutoToolChoice && s.ToolCallParser == "":
		add("model", "serve/no-tool-flags", Error, "neither --enable-auto-tool-choice nor --tool-call-parser: tool calling is off",
			"Claude Code sends tools on every call; without both flags vLLM answers 400 or the tool call stays text, and every rollout is one call",
			"add --enable-auto-tool-choice --tool-call-parser hermes")
	}
	if s.SkipTokenizerInit {
		add("skip-tokenizer-init", "serve/skip-tokenizer-init", Error, "--skip-tokenizer-init turns the tokenizer off, so no token ids come back", "", "drop --skip-tokenizer-init")
	}
	if o.GPUBytes > 0 {
		out = append(out, checkMemory(s, o, add)...)
	}
	return out
}

func checkMemory(s Serve, o ServeOptions, add func(flag, rule string, sev Severity, msg, cause, fix string)) []Finding {
	prof, err := gpu.LookupProfile(s.Model)
	if err != nil {
		add("model", "serve/no-profile", Info, fmt.Sprintf("no memory profile for %q, so whether it starts on %s was not checked", s.Model, o.GPULabel), "", "known profiles: "+strings.Join(gpu.ProfileNames(), ", "))
		return nil
	}
	c := gpu.Config{Profile: prof, GPUMemoryBytes: o.GPUBytes, KVCacheDType: s.KVCacheDType}
	bad := func(flag, v string, err error) {
		add(flag, "serve/bad-value", Error, fmt.Sprintf("--%s %s: %v", flag, v, err), "", "write a value vLLM accepts")
	}
	if s.MaxModelLen != "" {
		n, err := gpu.ParseMaxModelLen(s.MaxModelLen)
		if err != nil {
			bad("max-model-len", s.MaxModelLen, err)
			return nil
		}
		c.MaxModelLen = n
	}
	for _, f := range []struct {
		name, val string
		set       func(string) error
	}{
		{"gpu-memory-utilization", s.GPUMemoryUtilization, func(v string) (err error) { _, err = fmt.Sscan(v, &c.GPUMemoryUtilization); return }},
		{"max-num-seqs", s.MaxNumSeqs, func(v string) (err error) { _, err = fmt.Sscan(v, &c.MaxNumSeqs); return }},
		{"max-num-batched-tokens", s.MaxNumBatchedTokens, func(v string) (err error) { _, err = fmt.Sscan(v, &c.MaxNumBatchedTokens); return }},
	} {
		if f.val != "" {
			if err := f.set(f.val); err != nil {
				bad(f.name, f.val, err)
				return nil
			}
		}
	}
	maxTokens := o.MaxTokens
	if maxTokens == 0 {
		maxTokens = ClaudeCodeMaxTokens
	}
	fc, err := gpu.Predict(c, maxTokens+MinPromptRoom)
	if err != nil {
		add("max-model-len", "serve/plan", Error, err.Error(), "", "")
		return nil
	}
	if !fc.Starts {
		fix := "set --max-model-len " + suggestLen(fc.LargestMaxModelLen, maxTokens+MinPromptRoom)
		add("max-model-len", "serve/refuses-to-start", Error, fmt.Sprintf("vLLM refuses to start on %s: %s: %s", o.GPULabel, fc.Refusal.Exception, fc.Refusal.Message),
			fmt.Sprintf("the context (%d tokens by default for this model) needs more KV cache than the GPU has", prof.MaxPositionEmbeddings), fix)
		return nil
	}
	room := fc.Capacity.MaxModelLen - maxTokens
	if room < MinPromptRoom {
		add("max-model-len", "serve/context-too-small", Error,
			fmt.Sprintf("--max-model-len %d cannot hold a %d-token output plus Claude Code's prompt (%d tokens left for it)", fc.Capacity.MaxModelLen, maxTokens, max(room, 0)),
			"vLLM answers 400 (max_tokens ... cannot be greater than max_model_len, or the maximum context length error) and nothing is captured",
			"raise --max-model-len to "+suggestLen(fc.LargestMaxModelLen, maxTokens+MinPromptRoom)+", or lower the harness's output budget")
	}
	return nil
}

// suggestLen proposes the largest power of two that starts and holds need,
// else the largest length that starts.
func suggestLen(largest, need int) string {
	best := 0
	for l := 1 << 12; l <= largest; l <<= 1 {
		if l >= need {
			best = l
		}
	}
	if best >= 65536 && need <= 65536 {
		best = 65536 // the walkthrough's value leaves the most KV for concurrency
	}
	if best == 0 {
		return fmt.Sprintf("%d (the largest that starts; it cannot hold %d tokens: use a bigger GPU or --kv-cache-dtype fp8)", largest, need)
	}
	return fmt.Sprint(best)
}

// FittingMaxModelLen proposes a --max-model-len for s on a GPU of gpuBytes
// that starts and holds a Claude Code call (65536 when it can), or "" when
// the model has no profile or nothing starts.
func FittingMaxModelLen(s Serve, gpuBytes int64) string {
	prof, err := gpu.LookupProfile(s.Model)
	if err != nil || gpuBytes <= 0 {
		return ""
	}
	fc, err := gpu.Predict(gpu.Config{Profile: prof, GPUMemoryBytes: gpuBytes, KVCacheDType: s.KVCacheDType}, 0)
	if err != nil || fc.LargestMaxModelLen == 0 {
		return ""
	}
	need := ClaudeCodeMaxTokens + MinPromptRoom
	if fc.LargestMaxModelLen >= 65536 {
		return "65536"
	}
	if fc.LargestMaxModelLen >= need {
		return fmt.Sprint(fc.LargestMaxModelLen)
	}
	return ""
}
