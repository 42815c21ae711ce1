package proxy_test

import (
	"context"
	"encoding/json"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// startProxy starts a proxy in front of upstream with st as its store.
func startProxy(ctx context.Context, upstream string, st proxy.Store, mod func(*proxy.Options)) *proxy.Proxy {
	opts := proxy.Options{Upstream: upstream, Store: st}
	if mod != nil {
		mod(&opts)
	}
	p, err := proxy.New(opts)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	ExpectWithOffset(1, p.Start(ctx)).To(Succeed())
	DeferCleanup(p.Close)
	return p
}

var storeKinds = []TableEntry{
	Entry("memory store", "memory"),
	Entry("file store", "file"),
}

func newStore(kind string) testStore {
	if kind == "memory" {
		return store.NewMemoryStore()
	}
	fs, err := store.NewFileStore(GinkgoT().TempDir())
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	DeferCleanup(fs.Close)
	return fs
}

var _ = Describe("chat completions capture", func() {
	var up *stubVLLM
	BeforeEach(func() {
		up = newStubVLLM()
		DeferCleanup(up.Close)
	})

	DescribeTable("records one call and strips tokens from the reply",
		func(ctx SpecContext, kind string, requestIDs bool) {
			st := newStore(kind)
			p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.RequestTokenIDs = requestIDs })
			body := map[string]any{"model": "stub-model", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
			r := do(ctx, "POST", p.URL()+"/ng-rollout/r1/training-token-capture/v1/chat/completions", mustJSON(body), nil)
			Expect(r.Status).To(Equal(200), string(r.Body))
			Expect(tokenKeysIn(r.Body)).To(BeFalse(), string(r.Body))
			got := r.JSON()
			msg := got["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
			Expect(msg["content"]).To(Equal("hello there"))

			By("asking upstream for token information, non-streaming")
			sent := up.generations()[0].Body
			Expect(sent).To(HaveKeyWithValue("logprobs", true))
			Expect(sent).To(HaveKeyWithValue("top_logprobs", BeNumerically("==", 0)))
			Expect(sent).To(HaveKeyWithValue("return_tokens_as_token_ids", true))
			Expect(sent).NotTo(HaveKey("stream"))
			if requestIDs {
				Expect(sent).To(HaveKeyWithValue("return_token_ids", true))
				Expect(up.tokenize).To(Equal(0))
			} else {
				Expect(sent).NotTo(HaveKey("return_token_ids"))
				Expect(up.tokenize).To(Equal(1))
			}

			es := entries(ctx, st, "r1")
			Expect(es).To(HaveLen(1))
			e := es[0]
			wantGen, wantLP := generated("hello there")
			Expect(e.PromptTokenIDs).To(Equal(promptIDs(sent)))
			Expect(e.GenerationTokenIDs).To(Equal(wantGen))
			Expect(e.GenerationLogProbs).To(Equal(wantLP))
			Expect(e.ModelCallID).To(MatchRegexp(`^[0-9a-f]{32}$`))
			Expect(*e.ResponseID).To(Equal("chatcmpl-0123456789abcdef"))
			Expect(*e.ParentResolution).To(Equal(record.ResolutionRoot))
			Expect(e.OutputItems).To(HaveLen(1))
			Expect(e.OutputItems[0]).To(HaveKeyWithValue("type", "message"))
			Expect(e.OutputItems[0]).NotTo(HaveKey("generation_token_ids"))
			Expect(*e.TokenItemIndex).To(Equal(0))
			Expect(*e.CumLen).To(Equal(len(e.PromptTokenIDs) + len(e.GenerationTokenIDs)))
			Expect(e.SchemaVersion).To(Equal(record.SchemaVersion))
			Expect(incomplete(ctx, st, "r1")).To(BeFalse())
		},
		Entry("memory store, prompt via /tokenize", "memory", false),
		Entry("memory store, prompt via return_token_ids", "memory", true),
		Entry("file store, prompt via /tokenize", "file", false),
		Entry("file store, prompt via return_token_ids", "file", true),
	)

	DescribeTable("chains a continuation to its parent",
		func(ctx SpecContext, kind string) {
			st := newStore(kind)
			p := startProxy(ctx, up.URL(), st, nil)
			up.script(stubReply{ToolCalls: [][2]string{{"get_weather", `{"city": "Paris"}`}}}, stubReply{Content: "It is sunny."})
			url := p.URL() + "/ng-rollout/r2/training-token-capture/v1/chat/completions"
			msgs := []any{map[string]any{"role": "user", "content": "weather in Paris?"}}
			tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}}}
			r1 := do(ctx, "POST", url, mustJSON(map[string]any{"messages": msgs, "tools": tools}), nil)
			Expect(r1.Status).To(Equal(200))
			asst := r1.JSON()["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
			Expect(asst["tool_calls"]).To(HaveLen(1))
			call := asst["tool_calls"].([]any)[0].(map[string]any)
			msgs = append(msgs, asst, map[string]any{"role": "tool", "tool_call_id": call["id"], "content": "sunny"})
			r2 := do(ctx, "POST", url, mustJSON(map[string]any{"messages": msgs, "tools": tools}), nil)
			Expect(r2.Status).To(Equal(200))

			es := entries(ctx, st, "r2")
			Expect(es).To(HaveLen(2))
			Expect(*es[1].ParentResolution).To(Equal(record.ResolutionResolved), es[1].ParentResolutionReason)
			Expect(*es[1].ParentCallID).To(Equal(es[0].ModelCallID))
		},
		storeKinds,
	)

	It("streams a synthetic SSE reply built from the complete upstream reply with --buffered-streams", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.BufferedStreams = true })
		up.script(stubReply{Reasoning: "think", Content: "the answer", ToolCalls: [][2]string{{"f", `{"a": 1}`}}})
		body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}, "stream": true,
			"stream_options": map[string]any{"include_usage": true}}
		r := do(ctx, "POST", p.URL()+"/ng-rollout/r3/training-token-capture/v1/chat/completions", mustJSON(body), nil)
		Expect(r.Status).To(Equal(200))
		Expect(r.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
		Expect(up.generations()[0].Body).NotTo(HaveKey("stream"))
		Expect(up.generations()[0].Body).NotTo(HaveKey("stream_options"))
		Expect(tokenKeysIn(r.Body)).To(BeFalse())
		evs := parseSSE(r.Body)
		Expect(evs[len(evs)-1].Data).To(Equal("[DONE]"))
		var content, reasoning, finish, toolName string
		var usage bool
		for _, ev := range evs[:len(evs)-1] {
			var ch map[string]any
			Expect(json.Unmarshal([]byte(ev.Data), &ch)).To(Succeed())
			Expect(ch["object"]).To(Equal("chat.completion.chunk"))
			if ch["usage"] != nil {
				usage = true
			}
			for _, c := range ch["choices"].([]any) {
				c := c.(map[string]any)
				d := c["delta"].(map[string]any)
				if s, ok := d["content"].(string); ok {
					content += s
				}
				if s, ok := d["reasoning"].(string); ok {
					reasoning += s
				}
				if tcs, ok := d["tool_calls"].([]any); ok {
					toolName = tcs[0].(map[string]any)["function"].(map[string]any)["name"].(string)
				}
				if f, ok := c["finish_reason"].(string); ok {
					finish = f
				}
			}
		}
		Expect(content).To(Equal("the answer"))
		Expect(reasoning).To(Equal("think"))
		Expect(toolName).To(Equal("f"))
		Expect(finish).To(Equal("tool_calls"))
		Expect(usage).To(BeTrue())
		Expect(entries(ctx, st, "r3")).To(HaveLen(1))
	})

	It("keeps logprobs for a client that asked for them", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, up.URL(), st, nil)
		body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}, "logprobs": true}
		r := do(ctx, "POST", p.URL()+"/ng-rollout/r4/training-token-capture/v1/chat/completions", mustJSON(body), nil)
		Expect(r.Status).To(Equal(200))
		choice := r.JSON()["choices"].([]any)[0].(map[string]any)
		Expect(choice["logprobs"]).To(HaveKey("content"))
		Expect(string(r.Body)).NotTo(ContainSubstring("generation_token_ids"))
	})

	It("applies the sampling pin and forwards end-to-end headers", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) {
			o.SamplingOverrides = map[string]any{"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_tokens": 100}
			o.UpstreamAPIKey = "up-key"
		})
		body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}, "temperature": 1.5, "max_tokens": 5000}
		r := do(ctx, "POST", p.URL()+"/ng-rollout/r5/training-token-capture/v1/chat/completions", mustJSON(body),
			map[string]string{"X-Fake-Script": "s1", "Authorization": "Bearer client-key", "Accept-Encoding": "br, zstd", "Connection": "keep-alive, X-Drop", "X-Drop": "1"})
		Expect(r.Status).To(Equal(200))
		got := up.generations()[0]
		Expect(got.Body).To(HaveKeyWithValue("temperature", 0.6))
		Expect(got.Body).To(HaveKeyWithValue("top_p", 0.95))
		Expect(got.Body).To(HaveKeyWithValue("top_k", BeNumerically("==", 20)))
		Expect(got.Body).To(HaveKeyWithValue("max_tokens", BeNumerically("==", 100)))
		Expect(got.Header.Get("X-Fake-Script")).To(Equal("s1"))
		Expect(got.Header.Get("Authorization")).To(Equal("Bearer up-key"))
		Expect(got.Header.Get("Accept-Encoding")).NotTo(ContainSubstring("br"))
		Expect(got.Header.Get("X-Drop")).To(BeEmpty())

		By("keeping a smaller client max_tokens under the cap")
		body["max_tokens"] = 10
		do(ctx, "POST", p.URL()+"/ng-rollout/r5/training-token-capture/v1/chat/completions", mustJSON(body), nil)
		Expect(up.generations()[1].Body).To(HaveKeyWithValue("max_tokens", BeNumerically("==", 10)))
	})

	DescribeTable("decodes compressed upstream replies",
		func(ctx SpecContext, encoding string) {
			up.encoding = encoding
			st := store.NewMemoryStore()
			p := startProxy(ctx, up.URL(), st, nil)
			body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}}
			r := do(ctx, "POST", p.URL()+"/ng-rollout/r6/training-token-capture/v1/chat/completions", mustJSON(body),
				map[string]string{"Accept-Encoding": "gzip, deflate, br, zstd"})
			Expect(r.Status).To(Equal(200), string(r.Body))
			Expect(r.JSON()["choices"]).To(HaveLen(1))
			Expect(entries(ctx, st, "r6")).To(HaveLen(1))
			By("also on forwarded routes")
			m := do(ctx, "GET", p.URL()+"/v1/models", nil, nil)
			Expect(m.Status).To(Equal(200))
			Expect(m.JSON()["object"]).To(Equal("list"))
		},
		Entry("gzip", "gzip"),
		Entry("deflate", "deflate"),
	)

	It("forwards untagged and summary-only traffic without capturing", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, up.URL(), st, nil)
		body := mustJSON(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}})
		r := do(ctx, "POST", p.URL()+"/v1/chat/completions", body, nil)
		Expect(r.Status).To(Equal(200))
		r = do(ctx, "POST", p.URL()+"/ng-rollout/r7/v1/chat/completions", body, nil)
		Expect(r.Status).To(Equal(200))
		for _, req := range up.generations() {
			Expect(req.Body).NotTo(HaveKey("logprobs"))
		}
		Expect(entries(ctx, st, "r7")).To(BeEmpty())
		Expect(incomplete(ctx, st, "r7")).To(BeFalse())
	})

	It("serves plain forwarding when no store is configured", func(ctx SpecContext) {
		p := startProxy(ctx, up.URL(), nil, nil)
		body := mustJSON(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}})
		r := do(ctx, "POST", p.URL()+"/ng-rollout/r8/training-token-capture/v1/chat/completions", body, nil)
		Expect(r.Status).To(Equal(200))
		Expect(up.generations()[0].Body).NotTo(HaveKey("logprobs"))
		Expect(strings.Contains(string(r.Body), "hello there")).To(BeTrue())
	})
})
