package vllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/capbench/capbench/fakes/chattemplate"
	"github.com/capbench/capbench/internal/pyfmt"
)

// chatRequest holds the chat fields the fake reads; unknown fields are
// ignored, as vLLM does.
type chatRequest struct {
	Messages             []chatMessage      `json:"messages"`
	Model                string             `json:"model"`
	MaxTokens            *int               `json:"max_tokens"`
	MaxCompletionTokens  *int               `json:"max_completion_tokens"`
	Logprobs             *bool              `json:"logprobs"`
	TopLogprobs          *int               `json:"top_logprobs"`
	N                    *int               `json:"n"`
	Seed                 *int64             `json:"seed"`
	Stop                 json.RawMessage    `json:"stop"`
	Stream               bool               `json:"stream"`
	StreamOptions        *streamOptions     `json:"stream_options"`
	Temperature          *float64           `json:"temperature"`
	TopP                 *float64           `json:"top_p"`
	TopK                 *int               `json:"top_k"`
	MinP                 *float64           `json:"min_p"`
	PresencePenalty      *float64           `json:"presence_penalty"`
	FrequencyPenalty     *float64           `json:"frequency_penalty"`
	RepetitionPenalty    *float64           `json:"repetition_penalty"`
	Tools                *[]json.RawMessage `json:"tools"`
	ToolChoice           json.RawMessage    `json:"tool_choice"`
	ParallelToolCalls    *bool              `json:"parallel_tool_calls"`
	AddGenerationPrompt  *bool              `json:"add_generation_prompt"`
	ContinueFinalMessage bool               `json:"continue_final_message"`
	ChatTemplateKwargs   map[string]any     `json:"chat_template_kwargs"`
	ReturnTokensAsIDs    *bool              `json:"return_tokens_as_token_ids"`
	ReturnTokenIDs       bool               `json:"return_token_ids"`
	IncludeReasoning     *bool              `json:"include_reasoning"`
	PromptLogprobs       *int               `json:"prompt_logprobs"`
	MinTokens            *int               `json:"min_tokens"`
	StopTokenIDs         []int              `json:"stop_token_ids"`
	IncludeStopStr       bool               `json:"include_stop_str_in_output"`
}

type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// job is one validated generation request, chat or completion.
type job struct {
	chat          bool
	id            string
	created       int64
	promptIDs     []int
	maxTokens     int // effective cap
	maxTokensSeen int // for the max_tokens histogram
	seed          int64
	turn          *Turn
	forced        *string

	stream, includeUsage, continuousUsage bool
	logprobs                              bool
	topLogprobs                           int
	tokensAsIDs                           bool
	returnTokenIDs                        bool
	includeReasoning                      bool
	mode                                  parseMode
	toolChoice                            string // none|auto|required|named
	namedTool                             string
	fault                                 string
	echoPrompt                            string // completions echo
	promptLogprobs                        int    // -1 = not requested
	stops                                 []string
	stopTokenIDs                          []int
	includeStop                           bool
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	serveGeneration(s, w, r, s.prepareChat)
}

func (s *Server) prepareChat(r *http.Request, req *chatRequest, body []byte) (*job, *apiError) {
	if req.Messages == nil {
		var input any
		_ = json.Unmarshal(body, &input)
		return nil, pydanticError("missing", []any{"body", "messages"}, "Field required", input, nil)
	}
	if ae := s.checkModel(req.Model); ae != nil {
		return nil, ae
	}
	if req.StreamOptions != nil && !req.Stream {
		return nil, plainBadRequest("Stream options can only be defined when `stream=True`.")
	}
	logprobs := req.Logprobs != nil && *req.Logprobs
	top := 0
	if req.TopLogprobs != nil {
		top = *req.TopLogprobs
		if top != 0 && !logprobs {
			return nil, badRequest("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
		}
		if top < 0 && top != -1 {
			return nil, badRequest("`top_logprobs` must be a positive value or -1.", "top_logprobs", strconv.Itoa(top))
		}
		if top > maxLogprobs {
			return nil, plainBadRequest(fmt.Sprintf("Requested sample logprobs of %d, which is greater than max allowed: %d", top, maxLogprobs))
		}
		if top == -1 {
			top = maxLogprobs
		}
	}
	if req.PromptLogprobs != nil && req.Stream {
		return nil, badRequest("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
	}
	addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	if addGen && req.ContinueFinalMessage {
		return nil, plainBadRequest("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	choice, named, ae := s.toolGate(req.Tools, req.ToolChoice)
	if ae != nil {
		return nil, ae
	}
	tools, ae := decodeTools(req.Tools)
	if ae != nil {
		return nil, ae
	}
	prompt, msgs, assistants, ae := s.renderChat(req, tools, addGen, headerValue(r.Header, headerScript) != "")
	if ae != nil {
		return nil, ae
	}
	promptIDs := s.encodePrompt(prompt)
	maxParam, paramName := req.MaxTokens, "max_tokens"
	if req.MaxCompletionTokens != nil {
		maxParam, paramName = req.MaxCompletionTokens, "max_completion_tokens"
	}
	maxTokens, ae := s.checkContext(len(promptIDs), maxParam, paramName)
	if ae != nil {
		return nil, ae
	}
	if ae := checkSampling(maxTokens, req.Temperature, req.TopP, req.TopK, req.MinP, req.PresencePenalty, req.FrequencyPenalty, req.RepetitionPenalty, req.N, req.Stop, req.MinTokens); ae != nil {
		return nil, ae
	}
	j := &job{
		chat:             true,
		id:               requestID("chatcmpl-", r),
		created:          time.Now().Unix(),
		promptIDs:        promptIDs,
		maxTokens:        maxTokens,
		maxTokensSeen:    maxTokens,
		seed:             s.opts.Seed,
		stream:           req.Stream,
		logprobs:         logprobs,
		topLogprobs:      top,
		tokensAsIDs:      s.opts.ReturnTokensAsTokenIDs,
		returnTokenIDs:   req.ReturnTokenIDs,
		includeReasoning: req.IncludeReasoning == nil || *req.IncludeReasoning,
		toolChoice:       choice,
		namedTool:        named,
	}
	if req.Seed != nil {
		j.seed = *req.Seed
	}
	if req.ReturnTokensAsIDs != nil {
		j.tokensAsIDs = *req.ReturnTokensAsIDs
	}
	if req.StreamOptions != nil {
		j.includeUsage = req.StreamOptions.IncludeUsage
		j.continuousUsage = req.StreamOptions.ContinuousUsageStats
	}
	j.stops, j.stopTokenIDs, j.includeStop = parseStops(req.Stop), req.StopTokenIDs, req.IncludeStopStr
	if j.promptLogprobs, ae = promptLogprobsParam(req.PromptLogprobs); ae != nil {
		return nil, ae
	}
	thinkingOn := true
	if v, ok := req.ChatTemplateKwargs["enable_thinking"].(bool); ok && !v && !s.tmpl.thinking() {
		thinkingOn = false
	}
	j.mode = parseMode{
		reasoning: s.opts.ReasoningParser != "" && thinkingOn,
		needsOpen: !s.tmpl.thinking(),
		hermes:    choice == "auto" && s.toolParserOn(),
		parallel:  req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		newCallID: func() string { return prefixedHex("chatcmpl-tool-") },
	}
	if ae := s.attachScript(r, j, assistants, msgs); ae != nil {
		return nil, ae
	}
	if choice == "required" || choice == "named" {
		j.forced = s.constrainedToolText(j, tools)
	}
	return j, nil
}

func (s *Server) toolParserOn() bool {
	return s.opts.EnableAutoToolChoice && s.opts.ToolCallParser != ""
}

func (s *Server) checkModel(name string) *apiError {
	if name == "" {
		return nil
	}
	for _, n := range s.opts.ServedModelNames {
		if n == name {
			return nil
		}
	}
	return notFoundModel(name)
}

// toolGate applies vLLM's tool_choice validation and gatekeeping: any
// choice but "none" needs tools, and "auto" needs --enable-auto-tool-choice
// and --tool-call-parser.
func (s *Server) toolGate(reqTools *[]json.RawMessage, toolChoice json.RawMessage) (choice, named string, ae *apiError) {
	hasTools := reqTools != nil
	if hasTools && len(*reqTools) == 0 {
		return "", "", badRequest("`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.", "tools")
	}
	raw := strings.TrimSpace(string(toolChoice))
	switch {
	case raw == "" || raw == "null":
		if hasTools {
			choice = "auto"
		} else {
			choice = "none"
		}
	case raw[0] == '"':
		var v string
		_ = json.Unmarshal(toolChoice, &v)
		switch v {
		case "none", "auto", "required":
			choice = v
		default:
			return "", "", badRequest(fmt.Sprintf("Invalid value for `tool_choice`: %s! Only named tools, \"none\", \"auto\" or \"required\" are supported.", v), "tool_choice")
		}
	case raw[0] == '{':
		var v struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(toolChoice, &v); err != nil || v.Function.Name == "" {
			return "", "", pydanticError("model_type", []any{"body", "tool_choice"}, "Input should be a valid dictionary or instance of ChatCompletionNamedToolChoiceParam", string(toolChoice), nil)
		}
		choice, named = "named", v.Function.Name
	default:
		return "", "", pydanticError("string_type", []any{"body", "tool_choice"}, "Input should be a valid string", string(toolChoice), nil)
	}
	if choice != "none" && !hasTools {
		return "", "", badRequest("When using `tool_choice`, `tools` must be set.", "tool_choice")
	}
	if choice == "named" {
		found := false
		for _, t := range *reqTools {
			var tool struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(t, &tool) == nil && tool.Function.Name == named {
				found = true
			}
		}
		if !found {
			return "", "", badRequest("The tool specified in `tool_choice` does not match any of the specified `tools`", "tool_choice")
		}
	}
	if !s.toolParserOn() {
		switch choice {
		case "auto":
			return "", "", plainBadRequest(`"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`)
		case "required":
			return "", "", plainBadRequest(`tool_choice="required" requires --tool-call-parser to be set`)
		case "named":
			return "", "", plainBadRequest(fmt.Sprintf(`tool_choice=function "%s" requires --tool-call-parser to be set`, named))
		}
	}
	return choice, named, nil
}

// chatMessage decodes one message without building a generic map for
// every field; content and tool_calls stay raw unless they are plain.
type chatMessage struct {
	Role             json.RawMessage `json:"role"`
	Content          json.RawMessage `json:"content"`
	Reasoning        json.RawMessage `json:"reasoning"`
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	ToolCallID       json.RawMessage `json:"tool_call_id"`
	Name             json.RawMessage `json:"name"`
}

// roleValues are the chat roles as ready-made values (read only).
var roleValues = map[string]any{"system": "system", "user": "user", "assistant": "assistant", "tool": "tool"}

// rawValue turns a raw JSON field into what the template expects: strings
// and null decoded, anything else left raw for the template to inspect.
func rawValue(r json.RawMessage) (any, bool) {
	if len(r) == 0 {
		return nil, false
	}
	switch r[0] {
	case '"':
		if v, ok := roleValues[string(r[1:len(r)-1])]; ok {
			return v, true // every message has a role: no copy and no boxing for the four
		}
		if s, ok := rawString(r); ok {
			return s, true
		}
	case 'n':
		return nil, true
	case '{', '[':
		return r, true
	}
	var v any
	_ = json.Unmarshal(r, &v)
	return v, true
}

// normalizeMessages builds the template's messages and counts assistant
// messages (the script turn index); the template itself flattens content
// parts and maps reasoning_content.
func normalizeMessages(in []chatMessage) ([]map[string]any, int) {
	out := make([]map[string]any, len(in))
	assistants := 0
	for i, m := range in {
		msg := make(map[string]any, 4)
		for _, f := range [...]struct {
			key string
			raw json.RawMessage
		}{{"role", m.Role}, {"content", m.Content}, {"reasoning", m.Reasoning}, {"reasoning_content", m.ReasoningContent}, {"tool_calls", m.ToolCalls}, {"tool_call_id", m.ToolCallID}, {"name", m.Name}} {
			if v, ok := rawValue(f.raw); ok {
				msg[f.key] = v
			}
		}
		if msg["role"] == "assistant" {
			assistants++
		}
		out[i] = msg
	}
	return out, assistants
}

// renderChat renders the chat prompt. Plain messages skip the template's
// maps, unless a script's routes will look at the messages (scripted): msgs
// are then nil, and assistants 0 (it only picks a script's turn).
func (s *Server) renderChat(req *chatRequest, tools []map[string]any, addGen, scripted bool) (prompt string, msgs []map[string]any, assistants int, ae *apiError) {
	var err error
	if plain, ok := plainMessages(req.Messages); ok && !scripted {
		prompt, err = s.tmpl.renderPlain(plain, tools, addGen)
	} else {
		msgs, assistants = normalizeMessages(req.Messages)
		prompt, err = s.tmpl.renderPrompt(msgs, tools, addGen, req.ChatTemplateKwargs)
	}
	if err != nil {
		return "", nil, 0, asAPIError(err)
	}
	return prompt, msgs, assistants, nil
}

// plainMessages is the messages as the template's plain form, when each
// has a string role and a string content and no reasoning,
// reasoning_content or tool_calls (null counts as absent, as for the
// template); ok is false otherwise.
func plainMessages(in []chatMessage) (out []chattemplate.PlainMessage, ok bool) {
	if len(in) == 0 {
		return nil, false
	}
	out = make([]chattemplate.PlainMessage, len(in))
	for i, m := range in {
		if !absent(m.Reasoning) || !absent(m.ReasoningContent) || !absent(m.ToolCalls) {
			return nil, false
		}
		role, okRole := rawString(m.Role)
		content, okContent := rawString(m.Content)
		if !okRole || !okContent {
			return nil, false
		}
		out[i] = chattemplate.PlainMessage{Role: role, Content: content}
	}
	return out, true
}

func absent(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }

// rawString is a raw JSON string's value; the chat roles every message
// carries come without a copy.
func rawString(r json.RawMessage) (string, bool) {
	if len(r) < 2 || r[0] != '"' {
		return "", false
	}
	switch string(r[1 : len(r)-1]) {
	case "system":
		return "system", true
	case "user":
		return "user", true
	case "assistant":
		return "assistant", true
	case "tool":
		return "tool", true
	}
	if bytes.IndexByte(r, '\\') < 0 { // no escapes: the bytes between the quotes are the string
		return string(r[1 : len(r)-1]), true
	}
	var s string
	err := json.Unmarshal(r, &s)
	return s, err == nil
}

// requestID is prefix plus the client's X-Request-Id, else plus random hex.
func requestID(prefix string, r *http.Request) string {
	if v := headerValue(r.Header, headerRequestID); v != "" {
		return prefix + v
	}
	return prefixedHex(prefix)
}

// checkContext applies vLLM's context-length rules; it returns the
// effective max_tokens.
func (s *Server) checkContext(promptLen int, maxParam *int, paramName string) (int, *apiError) {
	L := s.maxModelLen
	M := 0
	if maxParam != nil {
		M = *maxParam
	}
	if maxParam != nil && M > L {
		return 0, badRequest(fmt.Sprintf("%s=%d cannot be greater than max_model_len=max_total_tokens=%d. Please request fewer output tokens.", paramName, M, L), paramName, strconv.Itoa(M))
	}
	if promptLen > L-max(M, 0) {
		q := ""
		if promptLen == L-max(M, 0)+1 {
			q = "at least "
		}
		return 0, badRequest(fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d output tokens and your prompt contains %s%d input tokens, for a total of %s%d tokens. Please reduce the length of the input prompt or the number of requested output tokens.", L, M, q, promptLen, q, promptLen+M), "input_tokens", strconv.Itoa(promptLen))
	}
	if maxParam == nil {
		return L - promptLen, nil
	}
	return M, nil
}

func pyFloat(f float64) string { return pyfmt.Float(f) }

// checkSampling applies vLLM's SamplingParams validation messages.
func checkSampling(maxTokens int, temp, topP *float64, topK *int, minP, presence, frequency, repetition *float64, n *int, stop json.RawMessage, minTokens *int) *apiError {
	if maxTokens < 1 {
		return badRequest(fmt.Sprintf("max_tokens must be at least 1, got %d.", maxTokens), "max_tokens", strconv.Itoa(maxTokens))
	}
	if temp != nil {
		t := *temp
		switch {
		case math.IsNaN(t) || math.IsInf(t, 0):
			return badRequest(fmt.Sprintf("temperature must be a finite number, got %s.", pyFloat(t)), "temperature", pyFloat(t))
		case t < 0:
			return badRequest(fmt.Sprintf("temperature must be non-negative, got %s.", pyFloat(t)), "temperature", pyFloat(t))
		case t > 2:
			return badRequest(fmt.Sprintf("temperature must be in [0, 2], got %s.", pyFloat(t)), "temperature", pyFloat(t))
		}
	}
	if topP != nil && (*topP <= 0 || *topP > 1) {
		return badRequest(fmt.Sprintf("top_p must be in (0, 1], got %s.", pyFloat(*topP)), "top_p", pyFloat(*topP))
	}
	if topK != nil && *topK < -1 {
		return badRequest(fmt.Sprintf("top_k must be 0 (disable), or at least 1, got %d.", *topK), "top_k", strconv.Itoa(*topK))
	}
	if minP != nil && (*minP < 0 || *minP > 1) {
		return badRequest(fmt.Sprintf("min_p must be in [0, 1], got %s.", pyFloat(*minP)), "min_p", pyFloat(*minP))
	}
	if presence != nil && (*presence < -2 || *presence > 2) {
		return badRequest(fmt.Sprintf("presence_penalty must be in [-2, 2], got %s.", pyFloat(*presence)), "presence_penalty", pyFloat(*presence))
	}
	if frequency != nil && (*frequency < -2 || *frequency > 2) {
		return badRequest(fmt.Sprintf("frequency_penalty must be in [-2, 2], got %s.", pyFloat(*frequency)), "frequency_penalty", pyFloat(*frequency))
	}
	if repetition != nil && *repetition <= 0 {
		return badRequest(fmt.Sprintf("repetition_penalty must be greater than zero, got %s.", pyFloat(*repetition)), "repetition_penalty", pyFloat(*repetition))
	}
	if n != nil {
		switch {
		case *n < 1:
			return badRequest(fmt.Sprintf("n must be at least 1, got %d.", *n), "n", strconv.Itoa(*n))
		case *n > 1 && temp != nil && *temp < 1e-5:
			return plainBadRequest(fmt.Sprintf("n must be 1 when using greedy sampling, got %d.", *n))
		case *n > 1:
			return &apiError{Status: http.StatusNotImplemented, Type: "NotImplementedError", Message: "the fake vLLM serves n=1 only"}
		}
	}
	if len(stop) > 0 {
		var one string
		var many []string
		if json.Unmarshal(stop, &one) == nil {
			many = []string{one}
		} else if err := json.Unmarshal(stop, &many); err != nil && string(stop) != "null" {
			return pydanticError("list_type", []any{"body", "stop"}, "Input should be a valid list", string(stop), nil)
		}
		for _, s := range many {
			if s == "" {
				return badRequest("stop cannot contain an empty string.", "stop")
			}
		}
	}
	if minTokens != nil && *minTokens > maxTokens {
		return badRequest(fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%d, got %d.", maxTokens, *minTokens), "min_tokens", strconv.Itoa(*minTokens))
	}
	return nil
}

// attachScript picks the script turn (X-Fake-Script) and the fault for a job.
// msgs are the chat messages the script's routes look at (nil for
// completions).
func (s *Server) attachScript(r *http.Request, j *job, assistants int, msgs []map[string]any) *apiError {
	if ae := s.pickScript(r, j, assistants, msgs); ae != nil {
		return ae
	}
	if f := headerValue(r.Header, headerFault); f != "" {
		if !knownFaults[f] {
			return plainBadRequest(fmt.Sprintf("unknown X-Fake-Fault %q", f))
		}
		j.fault = f
	}
	if j.fault == "" && s.opts.Faults.Rate > 0 && unit(splitmix64(uint64(time.Now().UnixNano()))) < s.opts.Faults.Rate {
		k := s.opts.Faults.Kinds
		j.fault = k[int(splitmix64(uint64(time.Now().UnixNano()))%uint64(len(k)))]
	}
	return nil
}

// constrainedToolText is what guided decoding makes the model write for
// tool_choice required (a JSON array) or a named tool (the arguments).
func (s *Server) constrainedToolText(j *job, tools []map[string]any) *string {
	var calls []ScriptToolCall
	if j.turn != nil {
		calls = j.turn.ToolCalls
	}
	if j.toolChoice == "named" {
		args := "{}"
		for _, c := range calls {
			if c.Name == j.namedTool {
				args = c.Arguments
				break
			}
		}
		return &args
	}
	if len(calls) == 0 && len(tools) > 0 {
		if fn, ok := tools[0]["function"].(map[string]any); ok {
			name, _ := fn["name"].(string)
			calls = []ScriptToolCall{{Name: name, Arguments: "{}"}}
		}
	}
	var b strings.Builder
	b.WriteString("[")
	for i, c := range calls {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`{"name": `)
		b.Write(appendJSONString(nil, c.Name))
		b.WriteString(`, "parameters": ` + c.Arguments + "}")
	}
	b.WriteString("]")
	out := b.String()
	return &out
}

// decodeTools keeps each tool's description and parameters as raw JSON so the
// template renders them in the client's key order, as Python would.
func decodeTools(raws *[]json.RawMessage) ([]map[string]any, *apiError) {
	if raws == nil {
		return nil, nil
	}
	out := make([]map[string]any, 0, len(*raws))
	for i, raw := range *raws {
		var t struct {
			Type     *string `json:"type"`
			Function *struct {
				Name        *string         `json:"name"`
				Description json.RawMessage `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
				Strict      json.RawMessage `json:"strict"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, pydanticError("model_type", []any{"body", "tools", i}, "Input should be a valid dictionary or instance of ChatCompletionToolsParam", string(raw), nil)
		}
		if t.Function == nil {
			return nil, pydanticError("missing", []any{"body", "tools", i, "function"}, "Field required", string(raw), nil)
		}
		if t.Function.Name == nil {
			return nil, pydanticError("missing", []any{"body", "tools", i, "function", "name"}, "Field required", string(raw), nil)
		}
		fn := map[string]any{"name": *t.Function.Name}
		if len(t.Function.Description) > 0 && string(t.Function.Description) != "null" {
			var d string
			if err := json.Unmarshal(t.Function.Description, &d); err != nil {
				return nil, pydanticError("string_type", []any{"body", "tools", i, "function", "description"}, "Input should be a valid string", string(t.Function.Description), nil)
			}
			fn["description"] = d
		}
		if len(t.Function.Parameters) > 0 && string(t.Function.Parameters) != "null" {
			fn["parameters"] = t.Function.Parameters
		}
		if len(t.Function.Strict) > 0 && string(t.Function.Strict) != "null" {
			fn["strict"] = t.Function.Strict
		}
		typ := "function"
		if t.Type != nil {
			typ = *t.Type
		}
		out = append(out, map[string]any{"type": typ, "function": fn})
	}
	return out, nil
}

// asAPIError keeps an *apiError as it is and turns anything else into a 400.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return plainBadRequest(err.Error())
}

// parseStops reads `stop` (a string or a list; validated before).
func parseStops(raw json.RawMessage) []string {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(raw, &many)
	return many
}

// promptLogprobsParam validates prompt_logprobs (-1 when absent).
func promptLogprobsParam(v *int) (int, *apiError) {
	if v == nil {
		return -1, nil
	}
	if *v < -1 {
		return 0, badRequest("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", strconv.Itoa(*v))
	}
	if *v > maxLogprobs {
		return 0, plainBadRequest(fmt.Sprintf("Requested prompt logprobs of %d, which is greater than max allowed: %d", *v, maxLogprobs))
	}
	if *v == -1 {
		return maxLogprobs, nil
	}
	return *v, nil
}
