package vllm_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
)

var _ = Describe("faults", func() {
	var s *vllm.Server
	BeforeEach(func() {
		s = startFake(vllm.Options{})
		Expect(s.SetScript(vllm.Script{Name: "long", Turns: []vllm.Turn{{Content: "a b c d e f g h i j k l m n o p", Tokens: 40}}})).To(Succeed())
	})

	DescribeTable("answers error statuses with vLLM's envelope",
		func(fault string, status int, typ string) {
			r := post(s.URL()+"/v1/chat/completions", userChat("x", nil), "X-Fake-Fault", fault)
			Expect(r.status).To(Equal(status))
			Expect(errorOf(r)["type"]).To(Equal(typ))
			Expect(s.Ledger()).To(BeEmpty())
		},
		Entry("500", "500", 500, "InternalServerError"),
		Entry("503", "503", 503, "ServiceUnavailableError"),
	)

	It("drops the connection mid-stream and records an aborted generation", func() {
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"stream":true}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Fake-Fault", "drop-mid-stream")
		req.Header.Set("X-Fake-Script", "long")
		resp, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		Expect(err).To(HaveOccurred())
		Expect(string(body)).To(ContainSubstring(`"delta":{"role":"assistant"`))
		Expect(string(body)).NotTo(ContainSubstring("[DONE]"))
		Eventually(s.Ledger).Should(HaveLen(1))
		Expect(s.Ledger()[0].FinishReason).To(Equal("abort"))
	})

	It("stalls until the client gives up", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"x"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Fake-Fault", "stall")
		_, err := http.DefaultClient.Do(req)
		Expect(err).To(MatchError(ContainSubstring("deadline exceeded")))
	})

	It("ends a stall by itself after Faults.Stall", func() {
		s2 := startFake(vllm.Options{Faults: vllm.Faults{Stall: 20 * time.Millisecond}})
		req, _ := http.NewRequest(http.MethodPost, s2.URL()+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"x"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Fake-Fault", "stall")
		_, err := http.DefaultClient.Do(req)
		Expect(err).To(HaveOccurred())
	})

	It("omits log-probs when asked for them", func() {
		m := post(s.URL()+"/v1/chat/completions", userChat("x", map[string]any{"logprobs": true}), "X-Fake-Fault", "no-logprobs").json()
		Expect(firstChoice(m)["logprobs"]).To(BeNil())
		st := streamChat(s.URL(), userChat("x", map[string]any{"logprobs": true}), "X-Fake-Fault", "no-logprobs")
		Expect(st.logprobs).To(BeZero())
	})

	It("truncates JSON bodies and stream events", func() {
		r := post(s.URL()+"/v1/chat/completions", userChat("x", nil), "X-Fake-Fault", "truncated-json")
		Expect(r.status).To(Equal(http.StatusOK))
		Expect(json.Valid(r.body)).To(BeFalse())
		r = post(s.URL()+"/v1/chat/completions", userChat("x", map[string]any{"stream": true}), "X-Fake-Fault", "truncated-json", "X-Fake-Script", "long")
		bad := 0
		for _, e := range sseEvents(r.body) {
			if e != "[DONE]" && !json.Valid([]byte(e)) {
				bad++
			}
		}
		Expect(bad).To(Equal(1))
	})

	It("injects faults at a rate and from script turns", func() {
		s2 := startFake(vllm.Options{Faults: vllm.Faults{Rate: 1, Kinds: []string{"503"}}})
		for range 3 {
			Expect(post(s2.URL()+"/v1/chat/completions", userChat("x", nil)).status).To(Equal(http.StatusServiceUnavailable))
		}
		Expect(s.SetScript(vllm.Script{Name: "f", Turns: []vllm.Turn{{Content: "ok", Fault: "500"}}})).To(Succeed())
		Expect(post(s.URL()+"/v1/chat/completions", userChat("x", nil), "X-Fake-Script", "f").status).To(Equal(http.StatusInternalServerError))
	})
})

var _ = Describe("completions", func() {
	var s *vllm.Server
	BeforeEach(func() { s = startFake(vllm.Options{}) })

	It("answers a text prompt with vLLM's completion shape and 16 tokens by default", func() {
		r := post(s.URL()+"/v1/completions", map[string]any{"prompt": "Once upon a time", "return_token_ids": true, "logprobs": 2})
		Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		Expect(string(r.body)).To(MatchRegexp(`^\{"id":"cmpl-[0-9a-f]{16}","object":"text_completion","created":\d+,"model":"[^"]+","choices":\[\{"index":0,"text":`))
		m := r.json()
		ch := firstChoice(m)
		ids := toInts(ch["token_ids"])
		Expect(len(ids)).To(BeNumerically("<=", 16))
		Expect(toInts(ch["prompt_token_ids"])).To(HaveLen(int(m["usage"].(map[string]any)["prompt_tokens"].(float64))))
		lp := ch["logprobs"].(map[string]any)
		Expect(lp["tokens"]).To(HaveLen(len(ids)))
		Expect(lp["token_logprobs"]).To(HaveLen(len(ids)))
		Expect(lp["top_logprobs"].([]any)[0]).To(HaveLen(3))
	})

	It("accepts token-id prompts and streams without a role chunk", func() {
		r := post(s.URL()+"/v1/completions", map[string]any{"prompt": []int{100, 200, 300}, "max_tokens": 5, "stream": true, "stream_options": map[string]any{"include_usage": true}, "return_token_ids": true})
		chunks := decodeChunks(sseEvents(r.body))
		first := firstChoice(chunks[0])
		Expect(first).To(HaveKey("text"))
		Expect(toInts(first["prompt_token_ids"])).To(Equal([]int{100, 200, 300}))
		for _, c := range chunks {
			Expect(c["object"]).To(Equal("text_completion"))
		}
		Expect(chunks[len(chunks)-1]["choices"]).To(BeEmpty())
		Expect(chunks[len(chunks)-1]["usage"].(map[string]any)["prompt_tokens"]).To(BeNumerically("==", 3))
	})

	It("rejects suffix, empty prompts and unknown models", func() {
		Expect(errorOf(post(s.URL()+"/v1/completions", map[string]any{"prompt": "x", "suffix": "y"}))["message"]).To(Equal("suffix is not currently supported"))
		Expect(errorOf(post(s.URL()+"/v1/completions", map[string]any{"prompt": ""}))["message"]).To(Equal("Either prompt or prompt_embeds must be provided and non-empty."))
		Expect(post(s.URL()+"/v1/completions", map[string]any{"prompt": "x", "model": "nope"}).status).To(Equal(http.StatusNotFound))
		Expect(errorOf(post(s.URL()+"/v1/completions", map[string]any{"model": "x"}))["param"]).To(Equal("body.prompt"))
	})
})

var _ = Describe("in-stream errors", func() {
	It("sends vLLM's error event with Python spacing, then [DONE]", func() {
		s := startFake(vllm.Options{})
		Expect(s.SetScript(vllm.Script{Name: "long", Turns: []vllm.Turn{{Content: "a b c d e f g h", Tokens: 20}}})).To(Succeed())
		r := post(s.URL()+"/v1/chat/completions", userChat("x", map[string]any{"stream": true}), "X-Fake-Fault", "stream-error", "X-Fake-Script", "long")
		Expect(r.status).To(Equal(http.StatusOK))
		ev := sseEvents(r.body)
		Expect(ev[len(ev)-1]).To(Equal("[DONE]"))
		Expect(ev[len(ev)-2]).To(Equal(`{"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}`))
		Expect(len(ev)).To(BeNumerically(">", 3))
		Expect(post(s.URL()+"/v1/chat/completions", userChat("x", nil), "X-Fake-Fault", "stream-error").status).To(Equal(http.StatusInternalServerError))
	})
})
