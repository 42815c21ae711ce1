package vllm_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
)

// streamed gathers what a client reassembles from chat chunks.
type streamed struct {
	chunks     []map[string]any
	content    string
	reasoning  string
	tokenIDs   []int
	logprobs   int
	finish     string
	usage      map[string]any
	promptIDs  []int
	toolNames  []string
	toolArgs   map[int]string
	toolIDs    []string
	sawNullCnt bool
}

func streamChat(url string, req map[string]any, headers ...string) streamed {
	GinkgoHelper()
	req["stream"] = true
	r := post(url+"/v1/chat/completions", req, headers...)
	Expect(r.status).To(Equal(http.StatusOK), string(r.body))
	Expect(r.header.Get("Content-Type")).To(Equal("text/event-stream; charset=utf-8"))
	out := streamed{chunks: decodeChunks(sseEvents(r.body)), toolArgs: map[int]string{}}
	for _, c := range out.chunks {
		if p, ok := c["prompt_token_ids"]; ok && p != nil {
			out.promptIDs = toInts(p)
		}
		if u, ok := c["usage"].(map[string]any); ok && len(c["choices"].([]any)) == 0 {
			out.usage = u
		}
		for _, chv := range c["choices"].([]any) {
			ch := chv.(map[string]any)
			d := ch["delta"].(map[string]any)
			if v, ok := d["content"].(string); ok {
				out.content += v
			}
			if v, ok := d["content"]; ok && v == nil {
				out.sawNullCnt = true
			}
			if v, ok := d["reasoning"].(string); ok {
				out.reasoning += v
			}
			if tcs, ok := d["tool_calls"].([]any); ok {
				for _, tcv := range tcs {
					tc := tcv.(map[string]any)
					idx := int(tc["index"].(float64))
					fn := tc["function"].(map[string]any)
					if n, ok := fn["name"].(string); ok {
						out.toolNames = append(out.toolNames, n)
						out.toolIDs = append(out.toolIDs, tc["id"].(string))
					}
					if a, ok := fn["arguments"].(string); ok {
						out.toolArgs[idx] += a
					}
				}
			}
			if ids, ok := ch["token_ids"]; ok && ids != nil {
				out.tokenIDs = append(out.tokenIDs, toInts(ids)...)
			}
			if lp, ok := ch["logprobs"].(map[string]any); ok {
				out.logprobs += len(lp["content"].([]any))
			}
			if f, ok := ch["finish_reason"].(string); ok {
				out.finish = f
			}
		}
	}
	return out
}

var _ = Describe("chat completions, streaming", func() {
	var s *vllm.Server
	BeforeEach(func() { s = startFake(vllm.Options{Seed: 3}) })

	It("has the generation in its ledger by the time the client reads [DONE]", func(ctx SpecContext) {
		body, err := json.Marshal(userChat("hi", map[string]any{"stream": true, "max_tokens": 20}))
		Expect(err).NotTo(HaveOccurred())
		for i := range 50 {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/chat/completions", bytes.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.StatusCode).To(Equal(http.StatusOK))
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				Expect(err).NotTo(HaveOccurred(), "the stream ended before [DONE]")
				if strings.TrimSpace(line) == "data: [DONE]" {
					break
				}
			}
			Expect(s.Ledger()).To(HaveLen(i+1), "stream %d", i)
			_ = resp.Body.Close()
		}
	})

	It("sends vLLM's chunk shapes: role chunk, token chunks, finish, usage, [DONE]", func() {
		Expect(s.SetScript(vllm.Script{Name: "hello", Turns: []vllm.Turn{{Content: "Hello there, how are you?"}}})).To(Succeed())
		r := post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}, "max_tokens": 50}), "X-Fake-Script", "hello")
		ev := sseEvents(r.body)
		Expect(ev[0]).To(MatchRegexp(`^\{"id":"chatcmpl-[0-9a-f]{16}","object":"chat.completion.chunk","created":\d+,"model":"[^"]+","choices":\[\{"index":0,"delta":\{"role":"assistant","content":""\},"logprobs":null,"finish_reason":null\}\],"prompt_token_ids":null,"prompt_text":null\}$`))
		Expect(ev[1]).To(MatchRegexp(`"choices":\[\{"index":0,"delta":\{"content":"[^"]*"\},"logprobs":null,"finish_reason":null,"token_ids":null\}\]\}$`))
		Expect(ev[len(ev)-3]).To(MatchRegexp(`"delta":\{"content":""\},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null\}\]\}$`))
		Expect(ev[len(ev)-2]).To(MatchRegexp(`"choices":\[\],"usage":\{"prompt_tokens":\d+,"total_tokens":\d+,"completion_tokens":\d+\},"system_fingerprint":"vllm-0\.29\.0-[0-9a-f]{8}"\}$`))
		Expect(ev[len(ev)-1]).To(Equal("[DONE]"))
		ids := map[string]bool{}
		for _, c := range decodeChunks(ev) {
			ids[c["id"].(string)] = true
		}
		Expect(ids).To(HaveLen(1))
	})

	It("puts the fingerprint on the finish chunk when usage is off", func() {
		ev := sseEvents(post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"stream": true, "max_tokens": 1000})).body)
		Expect(ev[len(ev)-2]).To(ContainSubstring(`"finish_reason":"stop"`))
		Expect(ev[len(ev)-2]).To(ContainSubstring(`"system_fingerprint":"vllm-0.29.0-`))
	})

	It("streams the same text, ids and log-probs as the non-streaming answer", func() {
		req := func() map[string]any {
			return userChat("compare", map[string]any{"return_token_ids": true, "logprobs": true, "stream_options": map[string]any{"include_usage": true}})
		}
		st := streamChat(s.URL(), req())
		plain := req()
		delete(plain, "stream_options")
		m := post(s.URL()+"/v1/chat/completions", plain).json()
		ch := firstChoice(m)
		Expect(st.content).To(Equal(ch["message"].(map[string]any)["content"]))
		Expect(st.tokenIDs).To(Equal(toInts(ch["token_ids"])))
		Expect(st.promptIDs).To(Equal(toInts(m["prompt_token_ids"])))
		Expect(st.logprobs).To(Equal(len(st.tokenIDs)))
		Expect(st.tokenIDs[len(st.tokenIDs)-1]).To(Equal(eosID))
		Expect(st.usage["completion_tokens"]).To(BeNumerically("==", len(st.tokenIDs)))
		led := s.Ledger()
		Expect(led[0].GeneratedTokenIDs).To(Equal(st.tokenIDs))
	})

	It("adds running usage to every chunk with continuous_usage_stats", func() {
		st := streamChat(s.URL(), userChat("hi", map[string]any{"max_tokens": 5, "stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}}))
		for i, c := range st.chunks {
			Expect(c).To(HaveKey("usage"), "chunk %d", i)
		}
		Expect(st.chunks[0]["usage"].(map[string]any)["completion_tokens"]).To(BeNumerically("==", 0))
	})

	It("carries multi-byte characters whole", func() {
		Expect(s.SetScript(vllm.Script{Name: "utf8", Turns: []vllm.Turn{{Content: "Grüße, 世界! 🎉 ok"}}})).To(Succeed())
		st := streamChat(s.URL(), userChat("x", nil), "X-Fake-Script", "utf8")
		Expect(st.content).To(Equal("Grüße, 世界! 🎉 ok"))
		for _, c := range st.chunks {
			for _, chv := range c["choices"].([]any) {
				if v, ok := chv.(map[string]any)["delta"].(map[string]any)["content"].(string); ok {
					Expect(strings.ContainsRune(v, '\uFFFD')).To(BeFalse())
				}
			}
		}
	})
})
