package vllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

type completionRequest struct {
	Prompt            json.RawMessage `json:"prompt"`
	Model             string          `json:"model"`
	MaxTokens         *int            `json:"max_tokens"`
	Logprobs          *int            `json:"logprobs"`
	Echo              bool            `json:"echo"`
	Suffix            *string         `json:"suffix"`
	N                 *int            `json:"n"`
	Seed              *int64          `json:"seed"`
	Stop              json.RawMessage `json:"stop"`
	Stream            bool            `json:"stream"`
	StreamOptions     *streamOptions  `json:"stream_options"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	ReturnTokensAsIDs *bool           `json:"return_tokens_as_token_ids"`
	ReturnTokenIDs    bool            `json:"return_token_ids"`
	MinTokens         *int            `json:"min_tokens"`
	PromptLogprobs    *int            `json:"prompt_logprobs"`
	StopTokenIDs      []int           `json:"stop_token_ids"`
	IncludeStopStr    bool            `json:"include_stop_str_in_output"`
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	serveGeneration(s, w, r, s.prepareCompletion)
}

func (s *Server) prepareCompletion(r *http.Request, req *completionRequest, body []byte) (*job, *apiError) {
	if len(req.Prompt) == 0 {
		var input any
		_ = json.Unmarshal(body, &input)
		return nil, pydanticError("missing", []any{"body", "prompt"}, "Field required", input, nil)
	}
	if ae := s.checkModel(req.Model); ae != nil {
		return nil, ae
	}
	if req.StreamOptions != nil && !req.Stream {
		return nil, plainBadRequest("Stream options can only be defined when `stream=True`.")
	}
	if req.Suffix != nil {
		return nil, plainBadRequest("suffix is not currently supported")
	}
	if req.Logprobs != nil && *req.Logprobs < 0 {
		return nil, badRequest("`logprobs` must be a positive value.", "logprobs", strconv.Itoa(*req.Logprobs))
	}
	if req.Logprobs != nil && *req.Logprobs > maxLogprobs {
		return nil, plainBadRequest(fmt.Sprintf("Requested sample logprobs of %d, which is greater than max allowed: %d", *req.Logprobs, maxLogprobs))
	}
	promptIDs, promptText, ae := s.completionPrompt(req.Prompt)
	if ae != nil {
		return nil, ae
	}
	maxParam := req.MaxTokens
	if maxParam == nil {
		d := 16
		maxParam = &d
	}
	maxTokens, ae := s.checkContext(len(promptIDs), maxParam, "max_tokens")
	if ae != nil {
		return nil, ae
	}
	if ae := checkSampling(maxTokens, req.Temperature, req.TopP, req.TopK, req.MinP, req.PresencePenalty, req.FrequencyPenalty, req.RepetitionPenalty, req.N, req.Stop, req.MinTokens); ae != nil {
		return nil, ae
	}
	j := &job{
		id: requestID("cmpl-", r), created: time.Now().Unix(), promptIDs: promptIDs,
		maxTokens: maxTokens, maxTokensSeen: maxTokens, seed: s.opts.Seed, stream: req.Stream,
		logprobs: req.Logprobs != nil, tokensAsIDs: s.opts.ReturnTokensAsTokenIDs,
		returnTokenIDs: req.ReturnTokenIDs, toolChoice: "none",
		mode: parseMode{newCallID: func() string { return "" }},
	}
	if req.Logprobs != nil {
		j.topLogprobs = *req.Logprobs
	}
	j.stops, j.stopTokenIDs, j.includeStop = parseStops(req.Stop), req.StopTokenIDs, req.IncludeStopStr
	if req.PromptLogprobs != nil && req.Stream {
		return nil, badRequest("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
	}
	if j.promptLogprobs, ae = promptLogprobsParam(req.PromptLogprobs); ae != nil {
		return nil, ae
	}
	if req.Echo && !req.ReturnTokenIDs {
		j.echoPrompt = promptText
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
	if ae := s.attachScript(r, j, 0, nil); ae != nil {
		return nil, ae
	}
	if j.turn != nil && !j.turn.Empty { // completions have no chat template: the script text is the output
		text := j.turn.Reasoning + j.turn.Content
		j.forced = &text
	}
	return j, nil
}

// completionPrompt accepts a string or a list of token ids (one prompt only).
func (s *Server) completionPrompt(raw json.RawMessage) ([]int, string, *apiError) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		if text == "" {
			return nil, "", plainBadRequest("Either prompt or prompt_embeds must be provided and non-empty.")
		}
		return s.tok.Encode(text), text, nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil {
		if len(ids) == 0 {
			return nil, "", plainBadRequest("Either prompt or prompt_embeds must be provided and non-empty.")
		}
		for _, id := range ids {
			if id < 0 || id >= s.tok.VocabSize() {
				return nil, "", badRequest(fmt.Sprintf("Token id %d is out of vocabulary", id), "prompt", strconv.Itoa(id))
			}
		}
		return ids, s.tok.Decode(ids), nil
	}
	var many []json.RawMessage
	if err := json.Unmarshal(raw, &many); err == nil {
		if len(many) == 1 {
			return s.completionPrompt(many[0])
		}
		return nil, "", &apiError{Status: http.StatusNotImplemented, Type: "NotImplementedError", Message: "the fake vLLM serves one prompt per request"}
	}
	return nil, "", pydanticError("string_type", []any{"body", "prompt"}, "Input should be a valid string", string(raw), nil)
}

func (s *Server) appendCompletionHead(b []byte, j *job) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, j.id)
	b = append(b, `,"object":"text_completion","created":`...)
	b = strconv.AppendInt(b, j.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, s.model)
	return append(b, ',')
}

func (s *Server) appendCompletionResponse(b []byte, j *job, o *outcome) []byte {
	b = s.appendCompletionHead(b, j)
	b = append(b, `"choices":[{"index":0,"text":`...)
	b = appendJSONString(b, j.echoPrompt+o.parsed.visible)
	b = append(b, `,"logprobs":`...)
	b = s.appendCompletionLogprobs(b, j, o, 0, len(o.gen.ids), len(j.echoPrompt))
	b = append(b, `,"finish_reason":`...)
	b = appendJSONString(b, o.finish)
	b = append(b, `,"stop_reason":`...)
	b = append(b, o.stopReason...)
	b = append(b, `,"token_ids":`...)
	if j.returnTokenIDs {
		b = appendInts(b, o.gen.ids)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"prompt_logprobs":`...)
	b = s.appendPromptLogprobs(b, j)
	b = append(b, `,"prompt_token_ids":`...)
	if j.returnTokenIDs {
		b = appendInts(b, j.promptIDs)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"routed_experts":null}],"service_tier":null,"system_fingerprint":`...)
	b = appendJSONString(b, s.fingerprint)
	b = append(b, `,"usage":`...)
	b = appendUsage(b, len(j.promptIDs), len(o.gen.ids))
	return append(b, `,"prompt_tokens_details":null,"completion_tokens_details":null},"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}`...)
}

// appendCompletionLogprobs writes the legacy logprobs object for [from,to).
func (s *Server) appendCompletionLogprobs(b []byte, j *job, o *outcome, from, to, textBase int) []byte {
	if !o.logprobs {
		return append(b, "null"...)
	}
	b = append(b, `{"text_offset":[`...)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(textBase+o.offsets[i]), 10)
	}
	b = append(b, `],"token_logprobs":[`...)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = appendPyFloat(b, o.gen.logprobs[i])
	}
	b = append(b, `],"tokens":[`...)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		id := o.gen.ids[i]
		b = s.appendTokenName(b, j, id, s.tok.TokenString(id))
	}
	b = append(b, `],"top_logprobs":[`...)
	var alts []tokenLP
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		id, lp := o.gen.ids[i], o.gen.logprobs[i]
		b = append(b, '{')
		b = s.appendTokenName(b, j, id, s.tok.TokenString(id))
		b = append(b, ':')
		b = appendPyFloat(b, lp)
		alts = s.eng.alternatives(o.gen.seed, i, id, lp, j.topLogprobs+1, alts)
		for _, a := range alts {
			b = append(b, ',')
			b = s.appendTokenName(b, j, a.id, s.tok.TokenString(a.id))
			b = append(b, ':')
			b = appendPyFloat(b, a.lp)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

func (s *Server) appendCompletionChunk(b []byte, j *job, o *outcome, pendingFrom, i int, last bool) ([]byte, bool) {
	piece := o.parsed.visible[o.offsets[pendingFrom]:o.offsets[i+1]]
	if piece == "" && !last && !j.returnTokenIDs {
		return b, false
	}
	b = s.appendCompletionHead(b, j)
	b = append(b, `"choices":[{"index":0,"text":`...)
	if pendingFrom == 0 {
		piece = j.echoPrompt + piece
	}
	b = appendJSONString(b, piece)
	b = append(b, `,"logprobs":`...)
	base := 0
	if pendingFrom > 0 {
		base = len(j.echoPrompt)
	}
	b = s.appendCompletionLogprobs(b, j, o, pendingFrom, i+1, base)
	b = append(b, `,"finish_reason":`...)
	if last {
		b = appendJSONString(b, o.finish)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"stop_reason":`...)
	if last {
		b = append(b, o.stopReason...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"prompt_token_ids":`...)
	if j.returnTokenIDs && pendingFrom == 0 {
		b = appendInts(b, j.promptIDs)
	} else {
		b = append(b, "null"...)
	}
	return s.appendChunkTail(b, j, o, pendingFrom, i, last), true
}
