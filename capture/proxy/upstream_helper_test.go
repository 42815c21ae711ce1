package proxy_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
)

// seenRequest is one request the stub upstream received.
type seenRequest struct {
	Path   string
	Header http.Header
	Body   map[string]any
	Raw    []byte // the body as sent
}

// stubReply is what the stub answers to one chat call.
type stubReply struct {
	Content   string
	Reasoning string
	ToolCalls [][2]string // name, arguments
	Finish    string
	Status    int    // non-200 answers with an error body
	ErrBody   string // raw error body for Status
	NoLogprob bool
	// RawToolCalls, when set, is sent as message.tool_calls as is (a
	// malformed upstream reply).
	RawToolCalls []any
}

// stubVLLM is a tiny vLLM-shaped upstream: chat and completions with
// logprobs as token_id:<n>, return_token_ids, /tokenize, /v1/models, /health.
type stubVLLM struct {
	srv *httptest.Server

	mu       sync.Mutex
	seen     []seenRequest
	replies  []stubReply // consumed in order; the last repeats
	calls    int
	encoding string // "gzip" or "deflate": compress every reply
	tokenize int
}

func newStubVLLM() *stubVLLM {
	s := &stubVLLM{replies: []stubReply{{Content: "hello there"}}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

func (s *stubVLLM) URL() string { return s.srv.URL }
func (s *stubVLLM) Close()      { s.srv.Close() }

func (s *stubVLLM) script(r ...stubReply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = r
	s.calls = 0
}

func (s *stubVLLM) requests() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.seen...)
}

// generations are the requests for model calls (chat and completions).
func (s *stubVLLM) generations() []seenRequest {
	var out []seenRequest
	for _, r := range s.requests() {
		if r.Path == "/v1/chat/completions" || r.Path == "/v1/completions" {
			out = append(out, r)
		}
	}
	return out
}

func (s *stubVLLM) next() stubReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.replies[min(s.calls, len(s.replies)-1)]
	s.calls++
	return r
}

// promptIDs derives deterministic prompt ids from the request messages.
func promptIDs(body map[string]any) []int {
	b, _ := json.Marshal(body["messages"])
	if p, ok := body["prompt"].(string); ok {
		b = []byte(p)
	}
	ids := []int{1}
	for i := 0; i < len(b); i += 7 {
		ids = append(ids, 100+int(b[i]))
	}
	return ids
}

func (s *stubVLLM) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	s.mu.Lock()
	s.seen = append(s.seen, seenRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Raw: raw})
	enc := s.encoding
	s.mu.Unlock()
	var out any
	switch r.URL.Path {
	case "/health":
		w.WriteHeader(200)
		return
	case "/v1/models":
		out = map[string]any{"object": "list", "data": []any{map[string]any{"id": "stub-model", "object": "model"}}}
	case "/tokenize":
		s.mu.Lock()
		s.tokenize++
		s.mu.Unlock()
		ids := promptIDs(body)
		out = map[string]any{"count": len(ids), "max_model_len": 4096, "tokens": ids, "token_strs": nil}
	case "/v1/chat/completions":
		rep := s.next()
		if rep.Status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rep.Status)
			_, _ = io.WriteString(w, rep.ErrBody)
			return
		}
		out = chatReply(body, rep)
		if body["stream"] == true {
			writeChatChunks(w, out.(map[string]any))
			return
		}
	case "/v1/completions":
		rep := s.next()
		out = completionReply(body, rep)
	default:
		w.WriteHeader(404)
		_, _ = io.WriteString(w, `{"detail":"Not Found"}`)
		return
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	// Compressed whatever the request advertised, as a misbehaving server
	// or a middlebox might.
	switch enc {
	case "gzip":
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(b)
		_ = zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		b = buf.Bytes()
	case "deflate":
		var buf bytes.Buffer
		zw := zlib.NewWriter(&buf)
		_, _ = zw.Write(b)
		_ = zw.Close()
		w.Header().Set("Content-Encoding", "deflate")
		b = buf.Bytes()
	}
	_, _ = w.Write(b)
}

// writeChatChunks streams a chat reply the way vLLM does: a role chunk with
// the prompt ids, then the reasoning, content and tool calls (all token ids
// and log-probs on the first generating chunk), a finish chunk and [DONE].
func writeChatChunks(w http.ResponseWriter, resp map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(200)
	choice := resp["choices"].([]any)[0].(map[string]any)
	msg := choice["message"].(map[string]any)
	frame := func(delta map[string]any, extra map[string]any, top map[string]any) {
		c := map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": nil, "token_ids": nil}
		for k, v := range extra {
			c[k] = v
		}
		ch := map[string]any{"id": resp["id"], "object": "chat.completion.chunk", "created": resp["created"], "model": resp["model"], "choices": []any{c}}
		for k, v := range top {
			ch[k] = v
		}
		b, _ := json.Marshal(ch)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	frame(map[string]any{"role": "assistant", "content": ""}, nil, map[string]any{"prompt_token_ids": resp["prompt_token_ids"]})
	tokens := map[string]any{"logprobs": choice["logprobs"], "token_ids": choice["token_ids"]}
	if r, ok := msg["reasoning"].(string); ok && r != "" {
		frame(map[string]any{"reasoning": r}, tokens, nil)
		tokens = nil
	}
	if c, ok := msg["content"].(string); ok && c != "" {
		frame(map[string]any{"content": c}, tokens, nil)
		tokens = nil
	}
	calls, _ := msg["tool_calls"].([]any)
	for i, tc := range calls {
		call, ok := tc.(map[string]any)
		if !ok {
			continue
		}
		fn := call["function"].(map[string]any)
		frame(map[string]any{"tool_calls": []any{map[string]any{"id": call["id"], "type": "function", "index": i, "function": map[string]any{"name": fn["name"]}}}}, tokens, nil)
		tokens = nil
		frame(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": fn["arguments"]}}}}, nil, nil)
	}
	if tokens != nil {
		frame(map[string]any{"content": ""}, tokens, nil)
	}
	frame(map[string]any{}, map[string]any{"finish_reason": choice["finish_reason"], "stop_reason": choice["stop_reason"]}, nil)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// generated returns ids and log-probs for a reply text (one token per
// 4 bytes, plus EOS).
func generated(text string) ([]int, []float64) {
	var ids []int
	var lps []float64
	for i := 0; i < len(text); i += 4 {
		ids = append(ids, 1000+int(text[i]))
		lps = append(lps, -0.25)
	}
	return append(ids, 151645), append(lps, -0.01)
}

func chatReply(body map[string]any, rep stubReply) map[string]any {
	msg := map[string]any{"role": "assistant", "content": rep.Content, "reasoning": nil}
	if rep.Content == "" {
		msg["content"] = nil
	}
	if rep.Reasoning != "" {
		msg["reasoning"] = rep.Reasoning
	}
	finish := rep.Finish
	if finish == "" {
		finish = "stop"
	}
	text := rep.Reasoning + rep.Content
	if len(rep.ToolCalls) > 0 {
		var calls []any
		for i, tc := range rep.ToolCalls {
			calls = append(calls, map[string]any{"id": fmt.Sprintf("chatcmpl-tool-%016d", i+1), "type": "function",
				"function": map[string]any{"name": tc[0], "arguments": tc[1]}})
			text += tc[0] + tc[1]
		}
		msg["tool_calls"] = calls
		if rep.Finish == "" {
			finish = "tool_calls"
		}
	}
	if rep.RawToolCalls != nil {
		msg["tool_calls"] = rep.RawToolCalls
	}
	gen, lps := generated(text)
	choice := map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish, "stop_reason": nil, "token_ids": nil}
	prompt := promptIDs(body)
	resp := map[string]any{"id": "chatcmpl-0123456789abcdef", "object": "chat.completion", "created": 1789754678, "model": "stub-model",
		"choices": []any{choice}, "prompt_token_ids": nil,
		"usage": map[string]any{"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(gen), "completion_tokens": len(gen)}}
	if body["logprobs"] == true && !rep.NoLogprob {
		var content []any
		for i, id := range gen {
			tok := fmt.Sprintf("tok%d", id)
			if body["return_tokens_as_token_ids"] == true {
				tok = fmt.Sprintf("token_id:%d", id)
			}
			content = append(content, map[string]any{"token": tok, "logprob": lps[i], "bytes": []int{}, "top_logprobs": []any{}})
		}
		choice["logprobs"] = map[string]any{"content": content}
	}
	if body["return_token_ids"] == true {
		resp["prompt_token_ids"] = prompt
		choice["token_ids"] = gen
	}
	return resp
}

func completionReply(body map[string]any, rep stubReply) map[string]any {
	gen, lps := generated(rep.Content)
	choice := map[string]any{"index": 0, "text": rep.Content, "logprobs": nil, "finish_reason": "stop", "stop_reason": nil,
		"token_ids": nil, "prompt_token_ids": nil}
	if n, ok := body["logprobs"].(float64); ok && n >= 0 && !rep.NoLogprob {
		var toks []any
		var vals []any
		for i, id := range gen {
			toks = append(toks, fmt.Sprintf("token_id:%d", id))
			vals = append(vals, lps[i])
		}
		choice["logprobs"] = map[string]any{"tokens": toks, "token_logprobs": vals, "text_offset": []any{}, "top_logprobs": []any{}}
	}
	if body["return_token_ids"] == true {
		choice["prompt_token_ids"] = promptIDs(body)
		choice["token_ids"] = gen
	}
	return map[string]any{"id": "cmpl-0123456789abcdef", "object": "text_completion", "created": 1789754678, "model": "stub-model",
		"choices": []any{choice}, "usage": map[string]any{"prompt_tokens": 3, "total_tokens": 3 + len(gen), "completion_tokens": len(gen)}}
}
