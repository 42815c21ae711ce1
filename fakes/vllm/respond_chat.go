package vllm

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// writeWhole writes a non-streaming response (chat or completion).
func (s *Server) writeWhole(ctx context.Context, w http.ResponseWriter, j *job, o *outcome) {
	n := len(o.gen.ids)
	if n > 1 {
		if err := s.sleep(ctx, o.itl*time.Duration(n-1)); err != nil {
			s.finishRecord(j, o, "abort")
			return
		}
	}
	switch j.fault {
	case FaultStall:
		s.finishRecord(j, o, "abort")
		s.stall(ctx)
	case FaultDropMidStream:
		s.finishRecord(j, o, "abort")
		panic(http.ErrAbortHandler)
	}
	bp := s.getBuf()
	defer s.putBuf(bp)
	b := (*bp)[:0]
	if j.chat {
		b = s.appendChatResponse(b, j, o)
	} else {
		b = s.appendCompletionResponse(b, j, o)
	}
	if j.fault == FaultTruncatedJSON {
		b = b[:len(b)/2]
	}
	*bp = b
	s.finishRecord(j, o, o.finish)
	writeJSONBytes(w, http.StatusOK, b)
}

func (s *Server) appendChatResponse(b []byte, j *job, o *outcome) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, j.id)
	b = append(b, `,"object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, j.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, s.model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	content, reasoning, calls := s.messageParts(j, o)
	b = appendNullableString(b, content)
	b = append(b, `,"refusal":null,"annotations":null,"audio":null,"function_call":null`...)
	if len(calls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, c := range calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendJSONString(b, c.id)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendJSONString(b, c.name)
			b = append(b, `,"arguments":`...)
			b = appendJSONString(b, c.arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	b = append(b, `,"reasoning":`...)
	b = appendNullableString(b, reasoning)
	b = append(b, `},"logprobs":`...)
	if o.logprobs {
		b = append(b, `{"content":[`...)
		b = s.appendChatLogprobs(b, j, o, 0, len(o.gen.ids))
		b = append(b, "]}"...)
	} else {
		b = append(b, "null"...)
	}
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
	b = append(b, `,"routed_experts":null}],"service_tier":null,"system_fingerprint":`...)
	b = appendJSONString(b, s.fingerprint)
	b = append(b, `,"usage":`...)
	b = appendUsage(b, len(j.promptIDs), len(o.gen.ids))
	b = append(b, `,"prompt_tokens_details":null,"completion_tokens_details":`...)
	if j.mode.reasoning { // vLLM reports the count whenever a reasoning parser is configured
		b = append(b, `{"reasoning_tokens":`...)
		b = strconv.AppendInt(b, int64(o.reasonN), 10)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `},"prompt_logprobs":`...)
	b = s.appendPromptLogprobs(b, j)
	b = append(b, `,"prompt_token_ids":`...)
	if j.returnTokenIDs {
		b = appendInts(b, j.promptIDs)
	} else {
		b = append(b, "null"...)
	}
	return append(b, `,"prompt_text":null,"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}`...)
}

// messageParts is the non-streaming message: content, reasoning, tool calls.
func (s *Server) messageParts(j *job, o *outcome) (content, reasoning *string, calls []parsedCall) {
	p := &o.parsed
	switch j.toolChoice {
	case "named", "required":
		empty := ""
		return &empty, nil, s.constrainedCalls(j, o)
	}
	if p.hasReasoning && j.includeReasoning {
		r := p.visible[p.reasonStart:p.reasonEnd]
		reasoning = &r
	}
	if !p.contentNull {
		content = &p.nonStreamContent // o outlives the reply it is written into
	}
	return content, reasoning, p.calls
}

// constrainedCalls turns guided-decoding output into tool calls.
func (s *Server) constrainedCalls(j *job, o *outcome) []parsedCall {
	text := o.parsed.visible
	if j.toolChoice == "named" {
		return []parsedCall{{id: j.mode.newCallID(), name: j.namedTool, arguments: text}}
	}
	var arr []struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(text), &arr); err != nil {
		return nil
	}
	calls := make([]parsedCall, 0, len(arr))
	for _, a := range arr {
		args, err := pythonJSON(a.Parameters)
		if err != nil {
			args = string(a.Parameters)
		}
		calls = append(calls, parsedCall{id: j.mode.newCallID(), name: a.Name, arguments: args})
	}
	return calls
}

// appendChatLogprobs writes logprob entries for tokens [from, to).
func (s *Server) appendChatLogprobs(b []byte, j *job, o *outcome, from, to int) []byte {
	var alts []tokenLP
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		id := o.gen.ids[i]
		lp := o.gen.logprobs[i]
		text := s.tok.TokenString(id)
		b = append(b, `{"token":`...)
		b = s.appendTokenName(b, j, id, text)
		b = append(b, `,"logprob":`...)
		b = appendPyFloat(b, lp)
		b = append(b, `,"bytes":`...)
		b = appendBytesArray(b, text)
		b = append(b, `,"top_logprobs":[`...)
		if j.topLogprobs > 0 {
			b = s.appendTopEntry(b, j, id, lp)
			alts = s.eng.alternatives(o.gen.seed, i, id, lp, j.topLogprobs, alts)
			for _, a := range alts {
				b = append(b, ',')
				b = s.appendTopEntry(b, j, a.id, a.lp)
			}
		}
		b = append(b, "]}"...)
	}
	return b
}

func (s *Server) appendTopEntry(b []byte, j *job, id int, lp float64) []byte {
	text := s.tok.TokenString(id)
	b = append(b, `{"token":`...)
	b = s.appendTokenName(b, j, id, text)
	b = append(b, `,"logprob":`...)
	b = appendPyFloat(b, lp)
	b = append(b, `,"bytes":`...)
	if j.tokensAsIDs {
		// vLLM quirk: top entries carry the bytes of the "token_id:N" string.
		b = appendBytesArray(b, "token_id:"+strconv.Itoa(id))
	} else {
		b = appendBytesArray(b, text)
	}
	return append(b, '}')
}

func (s *Server) appendTokenName(b []byte, j *job, id int, text string) []byte {
	if j.tokensAsIDs {
		b = append(b, `"token_id:`...)
		b = strconv.AppendInt(b, int64(id), 10)
		return append(b, '"')
	}
	return appendJSONString(b, text)
}

// appendPromptLogprobs writes vLLM's prompt_logprobs list: null for the
// first token, then {"<id>": {"logprob", "rank", "decoded_token"}} holding
// the prompt token (rank 1 here) and runners-up up to k entries.
func (s *Server) appendPromptLogprobs(b []byte, j *job) []byte {
	if j.promptLogprobs < 0 {
		return append(b, "null"...)
	}
	seed := hashIDs(j.seed^0x7072, j.promptIDs)
	var alts []tokenLP
	b = append(b, '[')
	for i, id := range j.promptIDs {
		if i == 0 {
			b = append(b, "null"...)
			continue
		}
		b = append(b, ',', '{')
		lp := sampledLogprob(seed, i, id)
		b = appendPromptLogprob(b, s, id, lp, 1)
		alts = s.eng.alternatives(seed, i, id, lp, j.promptLogprobs, alts)
		for r, a := range alts {
			b = append(b, ',')
			b = appendPromptLogprob(b, s, a.id, a.lp, r+2)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendPromptLogprob(b []byte, s *Server, id int, lp float64, rank int) []byte {
	b = append(b, '"')
	b = strconv.AppendInt(b, int64(id), 10)
	b = append(b, `":{"logprob":`...)
	b = appendPyFloat(b, lp)
	b = append(b, `,"rank":`...)
	b = strconv.AppendInt(b, int64(rank), 10)
	b = append(b, `,"decoded_token":`...)
	b = appendJSONString(b, s.tok.TokenString(id))
	return append(b, '}')
}
