package vllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

type tokenizeRequest struct {
	Model                string             `json:"model"`
	Prompt               *string            `json:"prompt"`
	Messages             []chatMessage      `json:"messages"`
	AddSpecialTokens     *bool              `json:"add_special_tokens"`
	AddGenerationPrompt  *bool              `json:"add_generation_prompt"`
	ContinueFinalMessage bool               `json:"continue_final_message"`
	ReturnTokenStrs      bool               `json:"return_token_strs"`
	Tools                *[]json.RawMessage `json:"tools"`
	ChatTemplateKwargs   map[string]any     `json:"chat_template_kwargs"`
}

// handleTokenize serves both /tokenize forms; the chat form renders tools
// exactly as chat completions do, so counts match usage.prompt_tokens.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, ae := s.readJSONBody(r)
	if ae != nil {
		writeAPIError(w, ae)
		return
	}
	var req tokenizeRequest
	if ae := decodeBody(body, &req); ae != nil {
		writeAPIError(w, ae)
		return
	}
	if ae := s.checkModel(req.Model); ae != nil {
		writeAPIError(w, ae)
		return
	}
	var ids []int
	switch {
	case req.Messages != nil:
		addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		if addGen && req.ContinueFinalMessage {
			writeAPIError(w, plainBadRequest("Cannot set both `continue_final_message` and `add_generation_prompt` to True."))
			return
		}
		msgs, _ := normalizeMessages(req.Messages)
		tools, ae := decodeTools(req.Tools)
		if ae != nil {
			writeAPIError(w, ae)
			return
		}
		prompt, err := s.tmpl.renderPrompt(msgs, tools, addGen, req.ChatTemplateKwargs)
		if err != nil {
			writeAPIError(w, asAPIError(err))
			return
		}
		ids = s.encodePrompt(prompt)
	case req.Prompt != nil:
		ids = s.tok.Encode(*req.Prompt)
	default:
		var input any
		_ = json.Unmarshal(body, &input)
		writeAPIError(w, pydanticError("missing", []any{"body", "prompt"}, "Field required", input, nil))
		return
	}
	b := fmt.Appendf(nil, `{"count":%d,"max_model_len":%d,"tokens":`, len(ids), s.maxModelLen)
	b = appendInts(b, ids)
	b = append(b, `,"token_strs":`...)
	if req.ReturnTokenStrs {
		b = append(b, '[')
		for i, id := range ids {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, s.tok.TokenString(id))
		}
		b = append(b, ']')
	} else {
		b = append(b, "null"...)
	}
	writeJSONBytes(w, http.StatusOK, append(b, '}'))
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	body, ae := s.readJSONBody(r)
	if ae != nil {
		writeAPIError(w, ae)
		return
	}
	var req struct {
		Model  string `json:"model"`
		Tokens []int  `json:"tokens"`
	}
	if ae := decodeBody(body, &req); ae != nil {
		writeAPIError(w, ae)
		return
	}
	if req.Tokens == nil {
		var input any
		_ = json.Unmarshal(body, &input)
		writeAPIError(w, pydanticError("missing", []any{"body", "tokens"}, "Field required", input, nil))
		return
	}
	if ae := s.checkModel(req.Model); ae != nil {
		writeAPIError(w, ae)
		return
	}
	for i, id := range req.Tokens {
		if id < 0 {
			writeAPIError(w, pydanticError("greater_than_equal", []any{"body", "tokens", i}, "Input should be greater than or equal to 0", id, map[string]any{"ge": 0}))
			return
		}
		if id >= s.tok.VocabSize() {
			writeAPIError(w, badRequest("Token id "+strconv.Itoa(id)+" is out of vocabulary", "tokens", strconv.Itoa(id)))
			return
		}
	}
	b := append([]byte(`{"prompt":`), appendJSONString(nil, s.tok.Decode(req.Tokens))...)
	writeJSONBytes(w, http.StatusOK, append(b, '}'))
}
