package vllm_test

import (
	"bytes"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
)

var _ = Describe("bad input", func() {
	var s *vllm.Server
	BeforeEach(func() { s = startFake(vllm.Options{MaxModelLen: 100, MaxBodyBytes: 4096}) })

	type want struct {
		status  int
		typ     string
		param   any
		message string // exact, or a prefix when it ends with "..."
	}
	check := func(r reply, w want) {
		GinkgoHelper()
		Expect(r.status).To(Equal(w.status), string(r.body))
		e := errorOf(r)
		Expect(e["type"]).To(Equal(w.typ))
		Expect(e["code"]).To(BeNumerically("==", w.status))
		if w.param == nil {
			Expect(e["param"]).To(BeNil())
		} else {
			Expect(e["param"]).To(Equal(w.param))
		}
		if p, ok := strings.CutSuffix(w.message, "..."); ok {
			Expect(e["message"]).To(HavePrefix(p))
		} else {
			Expect(e["message"]).To(Equal(w.message))
		}
	}

	DescribeTable("raw bodies",
		func(contentType, body string, w want) {
			check(do(http.MethodPost, s.URL()+"/v1/chat/completions", contentType, []byte(body)), w)
		},
		Entry("malformed JSON", "application/json", `{"messages": [`, want{400, "Bad Request", "body.14", "1 validation error:\n  {'type': 'json_invalid', 'loc': ('body', 14), 'msg': 'JSON decode error'..."}),
		Entry("missing messages", "application/json", `{"model": "x"}`, want{400, "Bad Request", "body.messages", "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required', 'input': {'model': 'x'}}"}),
		Entry("wrong type", "application/json", `{"messages": [], "temperature": "hot"}`, want{400, "Bad Request", "body.temperature", "1 validation error:\n  {'type': 'float_parsing', 'loc': ('body', 'temperature')..."}),
		Entry("wrong content type", "text/plain", `{}`, want{400, "Bad Request", nil, "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"}),
		Entry("no content type", "", `{}`, want{400, "Bad Request", nil, "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"}),
		Entry("oversized body", "application/json", `{"messages":[{"role":"user","content":"`+strings.Repeat("a", 5000)+`"}]}`, want{413, "Request Entity Too Large", nil, "Request body exceeds the limit of 4096 bytes."}),
	)

	msgs := []any{map[string]any{"role": "user", "content": "hello"}}
	DescribeTable("semantic checks on chat requests",
		func(body map[string]any, w want) {
			if _, ok := body["messages"]; !ok {
				body["messages"] = msgs
			}
			check(post(s.URL()+"/v1/chat/completions", body), w)
		},
		Entry("unknown model", map[string]any{"model": "gpt-9"}, want{404, "NotFoundError", "model", "The model `gpt-9` does not exist."}),
		Entry("max_tokens above the window", map[string]any{"max_tokens": 101}, want{400, "BadRequestError", "max_tokens", "max_tokens=101 cannot be greater than max_model_len=max_total_tokens=100. Please request fewer output tokens. (parameter=max_tokens, value=101)"}),
		Entry("max_completion_tokens above the window", map[string]any{"max_completion_tokens": 200}, want{400, "BadRequestError", "max_completion_tokens", "max_completion_tokens=200 cannot be greater than max_model_len=max_total_tokens=100. Please request fewer output tokens. (parameter=max_completion_tokens, value=200)"}),
		Entry("prompt + max_tokens over the window", map[string]any{"max_tokens": 95}, want{400, "BadRequestError", "input_tokens", "This model's maximum context length is 100 tokens. However, you requested 95 output tokens and your prompt contains 10 input tokens, for a total of 105 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=10)"}),
		Entry("prompt one over: 'at least'", map[string]any{"max_tokens": 91}, want{400, "BadRequestError", "input_tokens", "This model's maximum context length is 100 tokens. However, you requested 91 output tokens and your prompt contains at least 10 input tokens, for a total of at least 101 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=10)"}),
		Entry("max_tokens 0", map[string]any{"max_tokens": 0}, want{400, "BadRequestError", "max_tokens", "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"}),
		Entry("temperature negative", map[string]any{"temperature": -0.5}, want{400, "BadRequestError", "temperature", "temperature must be non-negative, got -0.5. (parameter=temperature, value=-0.5)"}),
		Entry("temperature above 2", map[string]any{"temperature": 3}, want{400, "BadRequestError", "temperature", "temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)"}),
		Entry("temperature far above 2, in Python's positional float form", map[string]any{"temperature": 1234567}, want{400, "BadRequestError", "temperature", "temperature must be in [0, 2], got 1234567.0. (parameter=temperature, value=1234567.0)"}),
		Entry("temperature at 1e16, where Python switches to an exponent", map[string]any{"temperature": 1e16}, want{400, "BadRequestError", "temperature", "temperature must be in [0, 2], got 1e+16. (parameter=temperature, value=1e+16)"}),
		Entry("tiny top_p in Python's exponent form", map[string]any{"top_p": -0.00001}, want{400, "BadRequestError", "top_p", "top_p must be in (0, 1], got -1e-05. (parameter=top_p, value=-1e-05)"}),
		Entry("top_p 0", map[string]any{"top_p": 0}, want{400, "BadRequestError", "top_p", "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)"}),
		Entry("top_k -2", map[string]any{"top_k": -2}, want{400, "BadRequestError", "top_k", "top_k must be 0 (disable), or at least 1, got -2. (parameter=top_k, value=-2)"}),
		Entry("n 0", map[string]any{"n": 0}, want{400, "BadRequestError", "n", "n must be at least 1, got 0. (parameter=n, value=0)"}),
		Entry("n 2 greedy", map[string]any{"n": 2, "temperature": 0}, want{400, "BadRequestError", nil, "n must be 1 when using greedy sampling, got 2."}),
		Entry("empty stop string", map[string]any{"stop": []string{""}}, want{400, "BadRequestError", "stop", "stop cannot contain an empty string. (parameter=stop)"}),
		Entry("top_logprobs without logprobs", map[string]any{"top_logprobs": 2}, want{400, "BadRequestError", "top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)"}),
		Entry("top_logprobs above 20", map[string]any{"logprobs": true, "top_logprobs": 21}, want{400, "BadRequestError", nil, "Requested sample logprobs of 21, which is greater than max allowed: 20"}),
		Entry("stream_options without stream", map[string]any{"stream_options": map[string]any{"include_usage": true}}, want{400, "BadRequestError", nil, "Stream options can only be defined when `stream=True`."}),
		Entry("prompt_logprobs with stream", map[string]any{"stream": true, "prompt_logprobs": 1}, want{400, "BadRequestError", "prompt_logprobs", "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)"}),
		Entry("bad role", map[string]any{"messages": []any{map[string]any{"role": "wizard", "content": "x"}}}, want{400, "BadRequestError", "messages", "messages[0]: unknown role..."}),
	)

	It("rejects an unknown fault name in the header", func() {
		r := post(s.URL()+"/v1/chat/completions", map[string]any{"messages": msgs}, "X-Fake-Fault", "boom")
		check(r, want{400, "BadRequestError", nil, `unknown X-Fake-Fault "boom"`})
	})

	It("defaults max_tokens to the rest of the window", func() {
		s2 := startFake(vllm.Options{MaxModelLen: 30, Lengths: vllm.Lengths{Mean: 1000, StdDev: 1}})
		m := post(s2.URL()+"/v1/chat/completions", map[string]any{"messages": msgs}).json()
		u := m["usage"].(map[string]any)
		Expect(u["total_tokens"]).To(BeNumerically("==", 30))
		Expect(firstChoice(m)["finish_reason"]).To(Equal("length"))
	})

	It("survives random garbage without crashing", func() {
		for _, body := range []string{"", "null", "[]", "123", `{"messages": null}`, `{"messages": [1,2]}`, `{"messages": [{"role": 5}]}`, `{"messages":[{"role":"user","content":{"a":1}}]}`, "\xff\xfe"} {
			r := do(http.MethodPost, s.URL()+"/v1/chat/completions", "application/json", []byte(body))
			Expect(r.status).To(BeNumerically(">=", 400), body)
			Expect(r.status).To(BeNumerically("<", 500), body)
		}
		Expect(get(s.URL() + "/health").status).To(Equal(http.StatusOK))
		_ = bytes.MinRead
	})
})
