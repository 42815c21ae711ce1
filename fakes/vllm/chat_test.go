package vllm_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/textproto"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/tokenizer"
	"github.com/capbench/capbench/fakes/vllm"
)

const eosID = 151645

var _ = Describe("chat completions, non-streaming", func() {
	var (
		s   *vllm.Server
		tok *tokenizer.Tokenizer
	)
	BeforeEach(func() {
		s = startFake(vllm.Options{Seed: 7})
		tok = tokenizer.New()
	})

	It("has vLLM 0.29's field order, nulls and usage order", func() {
		r := post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"max_tokens": 8}))
		Expect(r.status).To(Equal(http.StatusOK))
		Expect(r.header.Get("Content-Type")).To(Equal("application/json"))
		Expect(string(r.body)).To(MatchRegexp(`^\{"id":"chatcmpl-[0-9a-f]{16}","object":"chat.completion","created":\d+,"model":"Qwen/Qwen3-4B-Thinking-2507","choices":\[\{"index":0,"message":\{"role":"assistant","content":"[^"]*","refusal":null,"annotations":null,"audio":null,"function_call":null,"reasoning":null\},"logprobs":null,"finish_reason":"(stop|length)","stop_reason":null,"token_ids":null,"routed_experts":null\}\],"service_tier":null,"system_fingerprint":"vllm-0\.29\.0-[0-9a-f]{8}","usage":\{"prompt_tokens":\d+,"total_tokens":\d+,"completion_tokens":\d+,"prompt_tokens_details":null,"completion_tokens_details":null\},"prompt_logprobs":null,"prompt_token_ids":null,"prompt_text":null,"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null\}$`))
	})

	It("uses X-Request-Id for the response id", func() {
		m := post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"max_tokens": 2}), "X-Request-Id", "abc123").json()
		Expect(m["id"]).To(Equal("chatcmpl-abc123"))
	})

	It("reads request headers sent in lower case, as Node and Python clients send them", func() {
		send := func(key, value string) (int, map[string]any) {
			req, err := http.NewRequest(http.MethodPost, s.URL()+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
			Expect(err).NotTo(HaveOccurred())
			req.Header = http.Header{"content-type": {"application/json"}, key: {value}} // written to the wire as given
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			var m map[string]any
			Expect(json.NewDecoder(resp.Body).Decode(&m)).To(Succeed())
			return resp.StatusCode, m
		}
		status, m := send("x-request-id", "lower1")
		Expect(status).To(Equal(http.StatusOK))
		Expect(m["id"]).To(Equal("chatcmpl-lower1"))
		status, m = send("x-fake-fault", "boom")
		Expect(status).To(Equal(http.StatusBadRequest))
		Expect(fmt.Sprint(m)).To(ContainSubstring(`unknown X-Fake-Fault`))
		status, m = send("x-fake-script", "no-such-script")
		Expect(status).To(Equal(http.StatusBadRequest), fmt.Sprint(m))
	})

	It("looks up header keys in the canonical form net/http stores them in", func() {
		for _, k := range vllm.CanonicalHeaderKeys {
			Expect(textproto.CanonicalMIMEHeaderKey(k)).To(Equal(k))
		}
	})

	It("returns prompt and generation ids that are the tokenizer's encoding", func() {
		m := post(s.URL()+"/v1/chat/completions", userChat("Tell me a story", map[string]any{"return_token_ids": true, "max_tokens": 400})).json()
		prompt := toInts(m["prompt_token_ids"])
		Expect(prompt).To(Equal(tok.Encode("<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n")))
		ch := firstChoice(m)
		gen := toInts(ch["token_ids"])
		usage := m["usage"].(map[string]any)
		Expect(usage["prompt_tokens"]).To(BeNumerically("==", len(prompt)))
		Expect(usage["completion_tokens"]).To(BeNumerically("==", len(gen)))
		Expect(ch["finish_reason"]).To(Equal("stop"))
		Expect(gen[len(gen)-1]).To(Equal(eosID))
		content := ch["message"].(map[string]any)["content"].(string)
		Expect(gen).To(Equal(tok.Encode(content + "<|im_end|>")))
	})

	It("is deterministic for (seed, prompt) and varies with the seed", func() {
		req := userChat("same prompt", map[string]any{"return_token_ids": true, "logprobs": true})
		a := firstChoice(post(s.URL()+"/v1/chat/completions", req).json())
		b := firstChoice(post(s.URL()+"/v1/chat/completions", req).json())
		Expect(a["token_ids"]).To(Equal(b["token_ids"]))
		Expect(a["logprobs"]).To(Equal(b["logprobs"]))
		req["seed"] = 99
		c := firstChoice(post(s.URL()+"/v1/chat/completions", req).json())
		Expect(c["token_ids"]).NotTo(Equal(a["token_ids"]))
	})

	It("follows max_tokens with finish_reason length", func() {
		m := post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"max_tokens": 3, "return_token_ids": true})).json()
		ch := firstChoice(m)
		Expect(ch["finish_reason"]).To(Equal("length"))
		Expect(toInts(ch["token_ids"])).To(HaveLen(3))
	})

	Describe("log-probs", func() {
		It("gives one finite, non-positive entry per token with k top entries, sampled first", func() {
			m := post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"logprobs": true, "top_logprobs": 3, "return_token_ids": true})).json()
			ch := firstChoice(m)
			ids := toInts(ch["token_ids"])
			content := ch["logprobs"].(map[string]any)["content"].([]any)
			Expect(content).To(HaveLen(len(ids)))
			for i, e := range content {
				entry := e.(map[string]any)
				lp := entry["logprob"].(float64)
				Expect(math.IsInf(lp, 0) || math.IsNaN(lp)).To(BeFalse())
				Expect(lp).To(BeNumerically("<=", 0))
				Expect(entry["token"]).To(Equal(tok.TokenString(ids[i])))
				top := entry["top_logprobs"].([]any)
				Expect(top).To(HaveLen(3))
				Expect(top[0].(map[string]any)["token"]).To(Equal(entry["token"]))
				Expect(top[0].(map[string]any)["logprob"]).To(Equal(lp))
				for _, t := range top[1:] {
					Expect(t.(map[string]any)["logprob"].(float64)).To(BeNumerically("<", lp))
				}
			}
		})

		It("writes token_id:<id> tokens with vLLM's bytes quirk", func() {
			m := post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"logprobs": true, "top_logprobs": 1, "return_tokens_as_token_ids": true, "return_token_ids": true})).json()
			ch := firstChoice(m)
			ids := toInts(ch["token_ids"])
			entry := ch["logprobs"].(map[string]any)["content"].([]any)[0].(map[string]any)
			Expect(entry["token"]).To(Equal("token_id:" + itoa(ids[0])))
			Expect(bytesOf(entry["bytes"])).To(Equal(tok.TokenString(ids[0])))
			top := entry["top_logprobs"].([]any)[0].(map[string]any)
			Expect(bytesOf(top["bytes"])).To(Equal("token_id:" + itoa(ids[0])))
		})

		It("follows --return-tokens-as-token-ids unless the request overrides it", func() {
			s2 := startFake(vllm.Options{ReturnTokensAsTokenIDs: true})
			m := post(s2.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"logprobs": true})).json()
			entry := firstChoice(m)["logprobs"].(map[string]any)["content"].([]any)[0].(map[string]any)
			Expect(entry["token"]).To(HavePrefix("token_id:"))
			Expect(entry["top_logprobs"]).To(BeEmpty())
			m = post(s2.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"logprobs": true, "return_tokens_as_token_ids": false})).json()
			entry = firstChoice(m)["logprobs"].(map[string]any)["content"].([]any)[0].(map[string]any)
			Expect(entry["token"]).NotTo(HavePrefix("token_id:"))
		})
	})

	Describe("the ledger", func() {
		It("records every generation with ids, log-probs and finish reason, in Go and over HTTP", func() {
			m := post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"return_token_ids": true, "logprobs": true})).json()
			ch := firstChoice(m)
			led := s.Ledger()
			Expect(led).To(HaveLen(1))
			e := led[0]
			Expect(e.RequestID).To(Equal(m["id"]))
			Expect(e.PromptTokenIDs).To(Equal(toInts(m["prompt_token_ids"])))
			Expect(e.GeneratedTokenIDs).To(Equal(toInts(ch["token_ids"])))
			Expect(e.FinishReason).To(Equal(ch["finish_reason"]))
			Expect(e.LogProbs).To(HaveLen(len(e.GeneratedTokenIDs)))
			for i, lp := range ch["logprobs"].(map[string]any)["content"].([]any) {
				Expect(e.LogProbs[i]).To(Equal(lp.(map[string]any)["logprob"]))
			}
			Expect(tok.Encode(e.Text)).To(Equal(e.GeneratedTokenIDs))

			var overHTTP []vllm.LedgerEntry
			Expect(json.Unmarshal(get(s.URL()+"/fake/ledger").body, &overHTTP)).To(Succeed())
			Expect(overHTTP).To(HaveLen(1))
			Expect(overHTTP[0].GeneratedTokenIDs).To(Equal(e.GeneratedTokenIDs))
			Expect(string(get(s.URL() + "/fake/ledger").body)).To(ContainSubstring(`"generated_token_ids":[`))
		})
	})
})

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func bytesOf(v any) string {
	list := v.([]any)
	b := make([]byte, len(list))
	for i, x := range list {
		b[i] = byte(x.(float64))
	}
	return string(b)
}

var _ = Describe("stop conditions", func() {
	var s *vllm.Server
	BeforeEach(func() {
		s = startFake(vllm.Options{})
		Expect(s.SetScript(vllm.Script{Name: "count", Turns: []vllm.Turn{{Content: "one two three four five"}}})).To(Succeed())
	})
	chat := func(extra map[string]any) map[string]any {
		extra["return_token_ids"] = true
		return firstChoice(post(s.URL()+"/v1/chat/completions", userChat("count", extra), "X-Fake-Script", "count").json())
	}

	It("stops at a stop string, drops it from the content and names it in stop_reason", func() {
		ch := chat(map[string]any{"stop": []string{" three"}})
		Expect(ch["message"].(map[string]any)["content"]).To(Equal("one two"))
		Expect(ch["finish_reason"]).To(Equal("stop"))
		Expect(ch["stop_reason"]).To(Equal(" three"))
		ids := toInts(ch["token_ids"])
		Expect(ids).NotTo(ContainElement(eosID))
		Expect(s.Ledger()[0].GeneratedTokenIDs).To(Equal(ids))
	})

	It("keeps the stop string with include_stop_str_in_output, streaming too", func() {
		ch := chat(map[string]any{"stop": " three", "include_stop_str_in_output": true})
		Expect(ch["message"].(map[string]any)["content"]).To(Equal("one two three"))
		st := streamChat(s.URL(), userChat("count", map[string]any{"stop": " three"}), "X-Fake-Script", "count")
		Expect(st.content).To(Equal("one two"))
		Expect(st.finish).To(Equal("stop"))
	})

	It("stops at a stop token id and reports the id", func() {
		full := toInts(chat(map[string]any{})["token_ids"])
		ch := chat(map[string]any{"stop_token_ids": []int{full[1]}})
		Expect(toInts(ch["token_ids"])).To(Equal(full[:2]))
		Expect(ch["stop_reason"]).To(BeNumerically("==", full[1]))
	})
})

var _ = Describe("stop conditions with a reasoning parser", func() {
	It("reports finish stop and a consistent reasoning count when a stop string cuts the output", func() {
		s := startFake(vllm.Options{ReasoningParser: "qwen3", ChatTemplateVariant: "thinking"})
		Expect(s.SetScript(vllm.Script{Name: "r", Turns: []vllm.Turn{{Reasoning: "think think", Content: "alpha beta gamma"}}})).To(Succeed())
		m := post(s.URL()+"/v1/chat/completions", userChat("x", map[string]any{"stop": " beta", "max_tokens": 100}), "X-Fake-Script", "r").json()
		ch := firstChoice(m)
		Expect(ch["finish_reason"]).To(Equal("stop"))
		Expect(ch["message"].(map[string]any)["content"]).To(Equal("\n\nalpha"))
		u := m["usage"].(map[string]any)
		Expect(u["completion_tokens_details"].(map[string]any)["reasoning_tokens"]).To(BeNumerically("<", u["completion_tokens"]))
	})
})

var _ = Describe("prompt_logprobs", func() {
	check := func(list []any, prompt []int, k int) {
		GinkgoHelper()
		Expect(list).To(HaveLen(len(prompt)))
		Expect(list[0]).To(BeNil())
		for i, e := range list[1:] {
			entry := e.(map[string]any)
			Expect(len(entry)).To(Equal(max(k, 1)))
			own := entry[itoa(prompt[i+1])].(map[string]any)
			Expect(own["rank"]).To(BeNumerically("==", 1))
			Expect(own["logprob"].(float64)).To(BeNumerically("<=", 0))
		}
	}

	It("lists the prompt tokens with ranks in chat and completions", func() {
		s := startFake(vllm.Options{})
		m := post(s.URL()+"/v1/chat/completions", userChat("hello there", map[string]any{"prompt_logprobs": 2, "return_token_ids": true, "max_tokens": 2})).json()
		check(m["prompt_logprobs"].([]any), toInts(m["prompt_token_ids"]), 2)
		c := post(s.URL()+"/v1/completions", map[string]any{"prompt": "hello there", "prompt_logprobs": 0, "return_token_ids": true, "max_tokens": 2}).json()
		ch := firstChoice(c)
		check(ch["prompt_logprobs"].([]any), toInts(ch["prompt_token_ids"]), 0)
	})
})
