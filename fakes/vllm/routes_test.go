package vllm_test

import (
	"net/http"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
)

var _ = Describe("small endpoints", func() {
	var s *vllm.Server
	BeforeEach(func() {
		s = startFake(vllm.Options{ServedModelNames: []string{"qwen3-4b", "alias"}, MaxModelLen: 65536})
	})

	It("answers /health with an empty 200", func() {
		r := get(s.URL() + "/health")
		Expect(r.status).To(Equal(http.StatusOK))
		Expect(r.body).To(BeEmpty())
	})

	It("reports vLLM's version", func() {
		Expect(string(get(s.URL() + "/version").body)).To(Equal(`{"version":"0.29.0"}`))
	})

	It("lists one model card per served name with root and max_model_len", func() {
		m := get(s.URL() + "/v1/models").json()
		data := m["data"].([]any)
		Expect(data).To(HaveLen(2))
		card := data[0].(map[string]any)
		Expect(card["id"]).To(Equal("qwen3-4b"))
		Expect(card["root"]).To(Equal(vllm.DefaultModel))
		Expect(card["max_model_len"]).To(BeNumerically("==", 65536))
		Expect(card["owned_by"]).To(Equal("vllm"))
		perm := card["permission"].([]any)[0].(map[string]any)
		Expect(perm["id"]).To(MatchRegexp(`^modelperm-[0-9a-f]{16}$`))
	})

	It("reports the first served name even when a request uses an alias", func() {
		m := post(s.URL()+"/v1/chat/completions", map[string]any{"model": "alias", "messages": []any{map[string]any{"role": "user", "content": "hi"}}, "max_tokens": 4}).json()
		Expect(m["model"]).To(Equal("qwen3-4b"))
	})

	It("answers unknown paths and wrong methods like Starlette", func() {
		r := get(s.URL() + "/v1/nope")
		Expect(r.status).To(Equal(http.StatusNotFound))
		Expect(string(r.body)).To(Equal(`{"detail":"Not Found"}`))
		r = get(s.URL() + "/v1/chat/completions")
		Expect(r.status).To(Equal(http.StatusMethodNotAllowed))
		Expect(string(r.body)).To(Equal(`{"detail":"Method Not Allowed"}`))
	})

	It("exposes vLLM's metric names with model_name and engine labels", func() {
		post(s.URL()+"/v1/chat/completions", userChat("hello", map[string]any{"model": "qwen3-4b", "max_tokens": 5}))
		body := string(get(s.URL() + "/metrics").body)
		for _, name := range []string{
			"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
			"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
			"vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
			"vllm:e2e_request_latency_seconds_bucket", "vllm:request_queue_time_seconds_bucket",
			"vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket",
			"vllm:request_params_max_tokens_bucket", "vllm:iteration_tokens_total_bucket",
		} {
			Expect(body).To(ContainSubstring(name), name)
		}
		Expect(body).To(ContainSubstring(`vllm:num_requests_running{engine="0",model_name="qwen3-4b"} 0`))
		Expect(body).To(MatchRegexp(`vllm:generation_tokens_total\{engine="0",model_name="qwen3-4b"\} [1-9]`))
	})
})

var _ = Describe("request histograms", func() {
	var s *vllm.Server
	BeforeEach(func() { s = startFake(vllm.Options{Lengths: vllm.Lengths{Mean: 1000, StdDev: 1}}) })

	sample := func(name, le string) float64 {
		GinkgoHelper()
		if le != "" {
			name += `_bucket{engine="0",model_name="` + vllm.DefaultModel + `",le="` + le + `"}`
		} else {
			name += `{engine="0",model_name="` + vllm.DefaultModel + `"}`
		}
		for _, line := range strings.Split(string(get(s.URL()+"/metrics").body), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				Expect(err).NotTo(HaveOccurred())
				return f
			}
		}
		Fail("no sample " + name)
		return 0
	}

	DescribeTable("count a value in the first bucket whose bound is at least the value, as Prometheus's le does",
		func(maxTokens int, wantLE, belowLE string) {
			Expect(post(s.URL()+"/v1/chat/completions", userChat("hello", map[string]any{"max_tokens": maxTokens})).status).To(Equal(http.StatusOK))
			Expect(sample("vllm:request_generation_tokens", wantLE)).To(Equal(1.0))
			if belowLE != "" {
				Expect(sample("vllm:request_generation_tokens", belowLE)).To(Equal(0.0))
			}
			Expect(sample("vllm:request_generation_tokens", "+Inf")).To(Equal(1.0))
			Expect(sample("vllm:request_generation_tokens_sum", "")).To(Equal(float64(maxTokens)))
			Expect(sample("vllm:request_params_max_tokens_count", "")).To(Equal(1.0))
		},
		Entry("on a bound", 5, "5", "2"),
		Entry("between bounds", 7, "10", "5"),
		Entry("in the lowest bucket", 1, "1", ""),
	)

	It("observes no inter-token latency for a one-token reply, one per longer reply", func() {
		post(s.URL()+"/v1/chat/completions", userChat("hello", map[string]any{"max_tokens": 1}))
		Expect(sample("vllm:inter_token_latency_seconds_count", "")).To(Equal(0.0))
		Expect(sample("vllm:e2e_request_latency_seconds_count", "")).To(Equal(1.0))
		post(s.URL()+"/v1/chat/completions", userChat("hello", map[string]any{"max_tokens": 4}))
		Expect(sample("vllm:inter_token_latency_seconds_count", "")).To(Equal(1.0))
		Expect(sample("vllm:request_time_per_output_token_seconds_count", "")).To(Equal(1.0))
		Expect(sample("vllm:e2e_request_latency_seconds_count", "")).To(Equal(2.0))
	})
})

var _ = Describe("API keys", func() {
	var s *vllm.Server
	BeforeEach(func() { s = startFake(vllm.Options{APIKeys: []string{"k1", "k2"}}) })

	It("guards /v1 paths with vLLM's 401 body", func() {
		r := get(s.URL() + "/v1/models")
		Expect(r.status).To(Equal(http.StatusUnauthorized))
		Expect(string(r.body)).To(Equal(`{"error":"Unauthorized"}`))
		Expect(get(s.URL()+"/v1/models", "Authorization", "Bearer wrong").status).To(Equal(http.StatusUnauthorized))
	})

	It("accepts any configured key", func() {
		Expect(get(s.URL()+"/v1/models", "Authorization", "Bearer k2").status).To(Equal(http.StatusOK))
	})

	DescribeTable("guards the fake's control routes too: the ledger holds every prompt and output, scripts steer replies",
		func(method, path string, body []byte) {
			ct := ""
			if body != nil {
				ct = "application/json"
			}
			r := do(method, s.URL()+path, ct, body)
			Expect(r.status).To(Equal(http.StatusUnauthorized))
			Expect(string(r.body)).To(Equal(`{"error":"Unauthorized"}`))
			Expect(do(method, s.URL()+path, ct, body, "Authorization", "Bearer k1").status).To(BeNumerically("<", 300))
		},
		Entry("the ledger", http.MethodGet, "/fake/ledger", nil),
		Entry("the ledger, incrementally", http.MethodGet, "/fake/ledger?after=3", nil),
		Entry("installing a script", http.MethodPut, "/fake/scripts/x", []byte(`{"turns":[{"content":"hi"}]}`)),
	)

	It("leaves /health, /metrics, /version and /tokenize open", func() {
		Expect(get(s.URL() + "/health").status).To(Equal(http.StatusOK))
		Expect(get(s.URL() + "/metrics").status).To(Equal(http.StatusOK))
		Expect(get(s.URL() + "/version").status).To(Equal(http.StatusOK))
		Expect(post(s.URL()+"/tokenize", map[string]any{"prompt": "hello"}).status).To(Equal(http.StatusOK))
	})
})

var _ = Describe("/tokenize and /detokenize", func() {
	var s *vllm.Server
	BeforeEach(func() {
		s = startFake(vllm.Options{EnableAutoToolChoice: true, ToolCallParser: "hermes"})
	})

	It("counts chat prompts exactly like chat usage, tools included", func() {
		msgs := []any{map[string]any{"role": "system", "content": "be brief"}, map[string]any{"role": "user", "content": "weather in Paris?"}}
		tools := []any{weatherTool()}
		tok := post(s.URL()+"/tokenize", map[string]any{"messages": msgs, "tools": tools}).json()
		chat := post(s.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "tools": tools, "max_tokens": 3}).json()
		Expect(tok["count"]).To(Equal(chat["usage"].(map[string]any)["prompt_tokens"]))
		Expect(tok["token_strs"]).To(BeNil())
		Expect(tok["max_model_len"]).To(BeNumerically("==", 262144))
	})

	It("round-trips text through tokens", func() {
		tok := post(s.URL()+"/tokenize", map[string]any{"prompt": "héllo wörld <|im_end|>", "return_token_strs": true}).json()
		ids := tok["tokens"]
		Expect(tok["token_strs"]).To(HaveLen(len(ids.([]any))))
		de := post(s.URL()+"/detokenize", map[string]any{"tokens": ids}).json()
		Expect(de["prompt"]).To(Equal("héllo wörld <|im_end|>"))
	})

	It("rejects negative token ids and both prompt flags", func() {
		r := post(s.URL()+"/detokenize", map[string]any{"tokens": []int{1, -1}})
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(r.json()["error"].(map[string]any)["type"]).To(Equal("Bad Request"))
		r = post(s.URL()+"/tokenize", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}}, "add_generation_prompt": true, "continue_final_message": true})
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(ContainSubstring("Cannot set both"))
	})
})

func weatherTool() map[string]any {
	return map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Weather for a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}},
	}}
}

var _ = strings.TrimSpace
