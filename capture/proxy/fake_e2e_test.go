package proxy_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
)

const pathChatT = "/v1/chat/completions"

// startFake starts the fake vLLM with tool calling on.
func startFake() *vllm.Server {
	f, err := vllm.New(vllm.Options{ServedModelNames: []string{"policy"}, EnableAutoToolChoice: true, ToolCallParser: "hermes"})
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	ExpectWithOffset(1, f.Start(context.Background())).To(Succeed())
	DeferCleanup(f.Close)
	return f
}

// ledgerOf waits for n entries in the fake's ledger: the fake records a
// streamed generation just after its [DONE], which the proxy may already
// have relayed.
func ledgerOf(f *vllm.Server, n int) []vllm.LedgerEntry {
	GinkgoHelper()
	Eventually(func() []vllm.LedgerEntry { return f.Ledger() }).Should(HaveLen(n))
	return f.Ledger()
}

// matchesLedger checks a record against the fake's ground truth, and its
// stamped digest against its tokens: the line holds the ids the engine
// sent, the digest the ids the proxy read.
func matchesLedger(e *record.Entry, l vllm.LedgerEntry) {
	ExpectWithOffset(1, e.PromptTokenIDs).To(Equal(l.PromptTokenIDs))
	if e.Digest != nil && !e.PromptIsDelta {
		want, err := record.TokenDigest(append(slices.Clone(l.PromptTokenIDs), l.GeneratedTokenIDs...))
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
		ExpectWithOffset(1, *e.Digest).To(Equal(want), "the digest of the engine's tokens")
	}
	ExpectWithOffset(1, e.GenerationTokenIDs).To(Equal(l.GeneratedTokenIDs))
	ExpectWithOffset(1, e.GenerationLogProbs).To(HaveLen(len(l.LogProbs)))
	for i := range l.LogProbs {
		ExpectWithOffset(1, e.GenerationLogProbs[i]).To(BeNumerically("~", l.LogProbs[i], 1e-9))
	}
}

var _ = Describe("in front of the fake vLLM", func() {
	var fake *vllm.Server
	BeforeEach(func() { fake = startFake() })

	DescribeTable("chat capture records the engine's exact tokens",
		func(ctx SpecContext, kind string, requestIDs, stream, long bool, calls int) {
			st := newStore(kind)
			p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.RequestTokenIDs = requestIDs })
			content := "say hi"
			if long { // over 32 KB: the conversation is decoded beside the engine call
				content = strings.Repeat("say hi, and then say it again. ", 1400)
			}
			msgs := []any{map[string]any{"role": "user", "content": content}}
			for i := range calls {
				// Each call repeats the one before: from the second on, its
				// prompt ids are read after the previous prompt's text.
				if i > 0 {
					msgs = append(msgs, map[string]any{"role": "assistant", "content": "hi"}, map[string]any{"role": "user", "content": "again"})
				}
				body := map[string]any{"model": "policy", "messages": msgs, "stream": stream}
				r := do(ctx, "POST", p.URL()+"/ng-rollout/e1/training-token-capture/v1/chat/completions", mustJSON(body), nil)
				Expect(r.Status).To(Equal(200), string(r.Body))
				Expect(tokenKeysIn(r.Body)).To(BeFalse())
			}
			es := entries(ctx, st, "e1")
			Expect(es).To(HaveLen(calls))
			led := ledgerOf(fake, calls)
			for i := range calls {
				matchesLedger(es[i], led[i])
				Expect(es[i].Model).To(Equal("policy"))
			}
		},
		Entry("memory store, tokenize", "memory", false, false, false, 1),
		Entry("memory store, return_token_ids, streaming", "memory", true, true, false, 1),
		Entry("file store, return_token_ids", "file", true, false, false, 1),
		Entry("file store, tokenize, streaming", "file", false, true, false, 1),
		Entry("a 43 KB conversation, tokenize", "memory", false, false, true, 1),
		Entry("a 43 KB conversation, return_token_ids", "file", true, false, true, 1),
		Entry("a 43 KB conversation, return_token_ids, streaming", "memory", true, true, true, 1),
		Entry("a 43 KB conversation, tokenize, streaming", "file", false, true, true, 1),
		Entry("a 43 KB conversation over four calls, return_token_ids", "file", true, false, true, 4),
		Entry("a 43 KB conversation over four calls, return_token_ids, streaming", "memory", true, true, true, 4),
	)

	It("chains a scripted tool-call conversation", func(ctx SpecContext) {
		Expect(fake.SetScript(vllm.Script{Name: "weather", Turns: []vllm.Turn{
			{ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
			{Content: "Sunny in Paris."},
		}})).To(Succeed())
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.RequestTokenIDs = true })
		url := p.URL() + "/ng-rollout/e2/training-token-capture/v1/chat/completions"
		hdr := map[string]string{"X-Fake-Script": "weather"}
		tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}}
		msgs := []any{map[string]any{"role": "user", "content": "weather?"}}
		r1 := do(ctx, "POST", url, mustJSON(map[string]any{"model": "policy", "messages": msgs, "tools": tools}), hdr)
		Expect(r1.Status).To(Equal(200), string(r1.Body))
		asst := r1.JSON()["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		Expect(asst["tool_calls"]).To(HaveLen(1))
		id := asst["tool_calls"].([]any)[0].(map[string]any)["id"]
		msgs = append(msgs, asst, map[string]any{"role": "tool", "tool_call_id": id, "content": "sunny"})
		r2 := do(ctx, "POST", url, mustJSON(map[string]any{"model": "policy", "messages": msgs, "tools": tools}), hdr)
		Expect(r2.Status).To(Equal(200), string(r2.Body))
		es := entries(ctx, st, "e2")
		Expect(es).To(HaveLen(2))
		Expect(*es[1].ParentResolution).To(Equal(record.ResolutionResolved), es[1].ParentResolutionReason)
		Expect(*es[1].ParentCallID).To(Equal(es[0].ModelCallID))
		led := fake.Ledger()
		matchesLedger(es[0], led[0])
		matchesLedger(es[1], led[1])
	})

	It("serves Claude Code's recorded call through the Messages route", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.Model = "policy"; o.RequestTokenIDs = true })
		body := readFixture("claude-code/v2.1.328/tool-bash/call-01.request.json")
		hdr := fixtureHeaders("claude-code/v2.1.328/say-hi-path-prefix/calls.json", 0)
		r := do(ctx, "POST", p.URL()+"/ng-rollout/e3/training-token-capture/v1/messages?beta=true", body, hdr)
		Expect(r.Status).To(Equal(200), string(r.Body))
		msg, names := anthropicMessage(r.Body)
		Expect(names[0]).To(Equal("message_start"))
		Expect(names[len(names)-1]).To(Equal("message_stop"))
		es := entries(ctx, st, "e3")
		Expect(es).To(HaveLen(1))
		Expect(*es[0].ResponseID).To(Equal(msg["id"]))
		matchesLedger(es[0], ledgerOf(fake, 1)[0])
	})

	DescribeTable("engine faults",
		func(ctx SpecContext, fault string, wantStatus int, wantIncomplete bool) {
			st := store.NewMemoryStore()
			p := startProxy(ctx, fake.URL(), st, nil)
			body := map[string]any{"model": "policy", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
			r := do(ctx, "POST", p.URL()+"/ng-rollout/e4/training-token-capture/v1/chat/completions", mustJSON(body),
				map[string]string{"X-Fake-Fault": fault})
			Expect(r.Status).To(Equal(wantStatus), string(r.Body))
			Expect(entries(ctx, st, "e4")).To(BeEmpty())
			Expect(incomplete(ctx, st, "e4")).To(Equal(wantIncomplete))
		},
		Entry("500", vllm.Fault500, 500, true),
		Entry("503", vllm.Fault503, 503, true),
		Entry("no-logprobs", vllm.FaultNoLogprobs, 200, true),
		Entry("truncated-json", vllm.FaultTruncatedJSON, 502, true),
		Entry("drop-mid-stream", vllm.FaultDropMidStream, 502, true),
	)

	DescribeTable("every route and streaming mode records the engine's tokens and strips them from the reply",
		func(ctx SpecContext, path string, body map[string]any, stream bool) {
			st := store.NewMemoryStore()
			p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.Model = "policy" })
			body["stream"] = stream
			r := do(ctx, "POST", p.URL()+"/ng-rollout/rt/training-token-capture"+path, mustJSON(body), nil)
			Expect(r.Status).To(Equal(200), string(r.Body))
			Expect(tokenKeysIn(r.Body)).To(BeFalse())
			if stream {
				Expect(r.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
				Expect(len(parseSSE(r.Body))).To(BeNumerically(">", 2))
			} else {
				Expect(r.Header.Get("Content-Type")).To(HavePrefix("application/json"))
			}
			es := entries(ctx, st, "rt")
			Expect(es).To(HaveLen(1))
			matchesLedger(es[0], ledgerOf(fake, 1)[0])
			Expect(incomplete(ctx, st, "rt")).To(BeFalse())
		},
		Entry("chat", pathChatT, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}}, false),
		Entry("chat, streaming", pathChatT, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}}, true),
		Entry("completions", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 6}, false),
		Entry("completions, streaming", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 6}, true),
		Entry("responses", "/v1/responses", map[string]any{"input": "hi"}, false),
		Entry("responses, streaming", "/v1/responses", map[string]any{"input": "hi"}, true),
		Entry("messages", "/v1/messages", map[string]any{"max_tokens": 20, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, false),
		Entry("messages, streaming", "/v1/messages", map[string]any{"max_tokens": 20, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, true),
	)

	It("relays untagged streaming chat from the engine as it comes", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, nil)
		body := map[string]any{"model": "policy", "stream": true, "messages": []any{map[string]any{"role": "user", "content": "hi"}},
			"stream_options": map[string]any{"include_usage": true}}
		r := do(ctx, "POST", p.URL()+"/v1/chat/completions", mustJSON(body), nil)
		Expect(r.Status).To(Equal(200))
		evs := parseSSE(r.Body)
		Expect(evs[len(evs)-1].Data).To(Equal("[DONE]"))
		// vLLM's own role chunk carries prompt_token_ids: null, so this is
		// the engine's stream, not a synthetic one.
		Expect(evs[0].Data).To(ContainSubstring(`"prompt_token_ids":null`))
		ids, err := st.Rollouts(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(ids).To(BeEmpty())
	})

	It("answers count_tokens with the engine's token count", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.Model = "policy" })
		body := readFixture("claude-code/v2.1.328/say-hi/call-01.request.json")
		r := do(ctx, "POST", p.URL()+"/ng-rollout/ct/training-token-capture/v1/messages/count_tokens?beta=true", body, nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		n := r.JSON()["input_tokens"].(float64)
		r2 := do(ctx, "POST", p.URL()+"/ng-rollout/ct/training-token-capture/v1/messages?beta=true", body, nil)
		Expect(r2.Status).To(Equal(200))
		Expect(entries(ctx, st, "ct")[0].PromptTokenIDs).To(HaveLen(int(n)))
	})

	It("captures Claude Code's retry after an engine 503 as a new root", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.Model = "policy" })
		body := readFixture("claude-code/v2.1.328/say-hi/call-01.request.json")
		url := p.URL() + "/ng-rollout/rt2/training-token-capture/v1/messages?beta=true"
		r1 := do(ctx, "POST", url, body, map[string]string{"X-Fake-Fault": vllm.Fault503})
		Expect(r1.Status).To(Equal(503))
		Expect(r1.JSON()["error"]).To(HaveKeyWithValue("type", "overloaded_error"))
		r2 := do(ctx, "POST", url, body, nil)
		Expect(r2.Status).To(Equal(200))
		snap, err := st.Freeze(ctx, "rt2")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(1))
		Expect(*snap.Entries[0].ParentResolution).To(Equal(record.ResolutionRoot))
		Expect(snap.Incomplete).To(BeTrue())
	})

	It("serves the Responses and completions routes with capture", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.RequestTokenIDs = true })
		r := do(ctx, "POST", p.URL()+"/ng-rollout/e5/training-token-capture/v1/responses",
			mustJSON(map[string]any{"model": "policy", "input": "hello", "instructions": "be brief"}), nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		obj := r.JSON()
		Expect(obj["object"]).To(Equal("response"))
		Expect(tokenKeysIn(r.Body)).To(BeFalse())
		r = do(ctx, "POST", p.URL()+"/ng-rollout/e5/training-token-capture/v1/completions",
			mustJSON(map[string]any{"model": "policy", "prompt": "Once upon a time", "max_tokens": 8}), nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		Expect(tokenKeysIn(r.Body)).To(BeFalse())
		es := entries(ctx, st, "e5")
		Expect(es).To(HaveLen(2))
		Expect(*es[0].ResponseID).To(Equal(obj["id"]))
		led := fake.Ledger()
		matchesLedger(es[0], led[0])
		matchesLedger(es[1], led[1])
		var items []map[string]any
		b, _ := json.Marshal(es[1].OutputItems)
		Expect(json.Unmarshal(b, &items)).To(Succeed())
		Expect(items).To(HaveLen(1))
		Expect(items[0]["type"]).To(Equal("message"))
	})
})
