package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("Responses and completions routes", func() {
	var (
		up *stubVLLM
		st *store.MemoryStore
		p  *proxy.Proxy
	)
	BeforeEach(func() {
		up = newStubVLLM()
		DeferCleanup(up.Close)
		st = store.NewMemoryStore()
		p = startProxy(context.Background(), up.URL(), st, nil)
	})

	It("records a Responses call with the tokens on the last item and replies without them", func(ctx SpecContext) {
		up.script(stubReply{Reasoning: "hmm", Content: "see below", ToolCalls: [][2]string{{"lookup", `{"q": "x"}`}}})
		body := map[string]any{"model": "m", "instructions": "be brief", "input": []any{
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "find x"}}}}}
		r := do(ctx, "POST", p.URL()+"/ng-rollout/rs1/training-token-capture/v1/responses", mustJSON(body), nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		Expect(tokenKeysIn(r.Body)).To(BeFalse())
		obj := r.JSON()
		var types []string
		for _, it := range obj["output"].([]any) {
			types = append(types, it.(map[string]any)["type"].(string))
		}
		Expect(types).To(Equal([]string{"reasoning", "message", "function_call"}))
		sent := up.generations()[0].Body["messages"].([]any)
		Expect(sent[0]).To(HaveKeyWithValue("role", "system"))
		Expect(sent[1]).To(HaveKeyWithValue("content", "find x"))

		es := entries(ctx, st, "rs1")
		Expect(es).To(HaveLen(1))
		Expect(*es[0].TokenItemIndex).To(Equal(2))
		Expect(*es[0].ResponseID).To(Equal(obj["id"]))

		By("chaining the follow-up that echoes the output items")
		input := append(body["input"].([]any), obj["output"].([]any)...)
		fc := obj["output"].([]any)[2].(map[string]any)
		input = append(input, map[string]any{"type": "function_call_output", "call_id": fc["call_id"], "output": "x=1"})
		r2 := do(ctx, "POST", p.URL()+"/ng-rollout/rs1/training-token-capture/v1/responses",
			mustJSON(map[string]any{"model": "m", "instructions": "be brief", "input": input, "stream": true}), nil)
		Expect(r2.Status).To(Equal(200))
		evs := parseSSE(r2.Body)
		names := eventNames(evs)
		Expect(names[0]).To(Equal("response.created"))
		Expect(names).To(ContainElement("response.output_item.done"))
		Expect(names[len(names)-1]).To(Equal("response.completed"))
		Expect(tokenKeysIn(r2.Body)).To(BeFalse())
		es = entries(ctx, st, "rs1")
		Expect(es).To(HaveLen(2))
		Expect(*es[1].ParentResolution).To(Equal(record.ResolutionResolved), es[1].ParentResolutionReason)
	})

	It("records a completions call and streams it when asked", func(ctx SpecContext) {
		up.script(stubReply{Content: " there was a fox"})
		body := map[string]any{"model": "m", "prompt": "Once upon a time", "stream": true}
		r := do(ctx, "POST", p.URL()+"/ng-rollout/cp1/training-token-capture/v1/completions", mustJSON(body), nil)
		Expect(r.Status).To(Equal(200))
		evs := parseSSE(r.Body)
		Expect(evs[len(evs)-1].Data).To(Equal("[DONE]"))
		var text string
		for _, ev := range evs[:len(evs)-1] {
			var ch map[string]any
			Expect(json.Unmarshal([]byte(ev.Data), &ch)).To(Succeed())
			text += ch["choices"].([]any)[0].(map[string]any)["text"].(string)
		}
		Expect(text).To(Equal(" there was a fox"))
		Expect(up.generations()[0].Body).To(HaveKeyWithValue("logprobs", BeNumerically(">=", 1)))
		es := entries(ctx, st, "cp1")
		Expect(es).To(HaveLen(1))
		Expect(es[0].PromptTokenIDs).To(Equal(promptIDs(map[string]any{"prompt": "Once upon a time"})))
		Expect(*es[0].ResponseID).To(Equal("cmpl-0123456789abcdef"))
	})

	It("translates Messages on unprefixed paths without capturing", func(ctx SpecContext) {
		body := map[string]any{"model": "m", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "q"}}}
		r := do(ctx, "POST", p.URL()+"/v1/messages", mustJSON(body), nil)
		Expect(r.Status).To(Equal(200))
		Expect(r.JSON()["type"]).To(Equal("message"))
		Expect(up.generations()[0].Body).NotTo(HaveKey("logprobs"))
		ids, err := st.Rollouts(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(ids).To(BeEmpty())
	})
})

var _ = Describe("lineage across processes and delta records", func() {
	It("resolves a continuation against entries another proxy wrote to the same store", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		dir := GinkgoT().TempDir()
		fs1, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs1.Close)
		fs2, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs2.Close)
		p1 := startProxy(ctx, up.URL(), fs1, nil)
		p2 := startProxy(ctx, up.URL(), fs2, nil)
		path := "/ng-rollout/x1/training-token-capture/v1/chat/completions"
		first := map[string]any{"role": "user", "content": "q"}
		r1 := do(ctx, "POST", p1.URL()+path, mustJSON(map[string]any{"messages": []any{first}}), nil)
		asst := r1.JSON()["choices"].([]any)[0].(map[string]any)["message"]
		r2 := do(ctx, "POST", p2.URL()+path, mustJSON(map[string]any{"messages": []any{first, asst, map[string]any{"role": "user", "content": "again"}}}), nil)
		Expect(r2.Status).To(Equal(200))
		es := entries(ctx, fs1, "x1")
		Expect(es).To(HaveLen(2))
		Expect(*es[1].ParentResolution).To(Equal(record.ResolutionResolved), es[1].ParentResolutionReason)
		Expect(*es[1].ParentCallID).To(Equal(es[0].ModelCallID))
	})

	It("stores delta prompts when asked and still resolves the next call", func(ctx SpecContext) {
		fake := startFake()
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.DeltaRecords = true; o.RequestTokenIDs = true })
		path := "/ng-rollout/d1/training-token-capture/v1/chat/completions"
		msgs := []any{map[string]any{"role": "user", "content": "q"}}
		for range 3 {
			r := do(ctx, "POST", p.URL()+path, mustJSON(map[string]any{"model": "policy", "messages": msgs, "max_tokens": 12}), nil)
			Expect(r.Status).To(Equal(200), string(r.Body))
			msgs = append(msgs, r.JSON()["choices"].([]any)[0].(map[string]any)["message"], map[string]any{"role": "user", "content": "more"})
		}
		es := entries(ctx, st, "d1")
		Expect(es).To(HaveLen(3))
		Expect(es[0].PromptIsDelta).To(BeFalse())
		led := fake.Ledger()
		for i, e := range es {
			Expect(e.Validate()).To(Succeed())
			Expect(*e.CumLen).To(Equal(len(led[i].PromptTokenIDs) + len(led[i].GeneratedTokenIDs)))
			if i > 0 {
				Expect(*e.ParentCallID).To(Equal(es[i-1].ModelCallID))
				Expect(e.PromptIsDelta).To(BeTrue())
				Expect(len(e.PromptTokenIDs)).To(BeNumerically("<", len(led[i].PromptTokenIDs)))
			}
		}
		Expect(incomplete(ctx, st, "d1")).To(BeFalse())
	})
})

var _ = Describe("observability", func() {
	It("counts calls on its own registry and logs rollout and call ids", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		st := store.NewMemoryStore()
		var logs bytes.Buffer
		reg := prometheus.NewRegistry()
		p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) {
			o.Registry = reg
			o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		})
		// A second proxy in the same process has its own registry.
		startProxy(ctx, up.URL(), st, nil)

		body := mustJSON(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}})
		do(ctx, "POST", p.URL()+"/ng-rollout/o1/training-token-capture/v1/chat/completions", body, nil)
		up.script(stubReply{Content: "x", NoLogprob: true})
		do(ctx, "POST", p.URL()+"/ng-rollout/o1/training-token-capture/v1/chat/completions", body, nil)
		do(ctx, "HEAD", p.URL()+"/ng-rollout/o1/training-token-capture", nil, nil)

		m := do(ctx, "GET", p.URL()+"/metrics", nil, nil)
		Expect(m.Status).To(Equal(200))
		text := string(m.Body)
		Expect(text).To(ContainSubstring(`capbench_proxy_calls_total{api="chat",mode="training"} 2`))
		Expect(text).To(ContainSubstring(`capbench_proxy_captured_total 1`))
		Expect(text).To(ContainSubstring(`capbench_proxy_incomplete_total{reason="no_token_ids"} 1`))
		Expect(text).To(ContainSubstring(`capbench_proxy_store_seconds_count{op="put"} 1`))
		Expect(text).To(ContainSubstring(`capbench_proxy_upstream_seconds_count`))

		es := entries(ctx, st, "o1")
		Expect(es).To(HaveLen(1))
		found := false
		for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
			var rec map[string]any
			Expect(json.Unmarshal([]byte(line), &rec)).To(Succeed())
			if rec["msg"] == "call captured" {
				found = true
				Expect(rec).To(HaveKeyWithValue("rollout_id", "o1"))
				Expect(rec).To(HaveKeyWithValue("model_call_id", es[0].ModelCallID))
			}
		}
		Expect(found).To(BeTrue(), logs.String())
	})

	It("keeps the call's ids on its lines when the logger only logs warnings", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		var logs bytes.Buffer
		p := startProxy(ctx, up.URL(), store.NewMemoryStore(), func(o *proxy.Options) {
			o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		up.script(stubReply{Content: "x", NoLogprob: true})
		body := mustJSON(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}})
		do(ctx, "POST", p.URL()+"/ng-rollout/w1/training-token-capture/v1/chat/completions", body, nil)
		var warned map[string]any
		for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
			var rec map[string]any
			Expect(json.Unmarshal([]byte(line), &rec)).To(Succeed())
			Expect(rec["level"]).NotTo(Equal("INFO"), line)
			if rec["msg"] == "rollout marked incomplete" {
				warned = rec
			}
		}
		Expect(warned).To(HaveKeyWithValue("rollout_id", "w1"), logs.String())
		Expect(warned).To(HaveKeyWithValue("api", "chat"))
		Expect(warned).To(HaveKey("model_call_id"))
	})

	It("rejects invalid options with errors naming the field", func() {
		for _, tc := range []struct {
			opts proxy.Options
			want string
		}{
			{proxy.Options{}, "Upstream"},
			{proxy.Options{Upstream: "ftp://x"}, "Upstream"},
			{proxy.Options{Upstream: "http://x", MaxBodyBytes: -1}, "MaxBodyBytes"},
			{proxy.Options{Upstream: "http://x", Port: 70000}, "Port"},
			{proxy.Options{Upstream: "http://x", SamplingOverrides: map[string]any{"logprobs": false}}, "SamplingOverrides"},
		} {
			_, err := proxy.New(tc.opts)
			Expect(err).To(MatchError(ContainSubstring(tc.want)))
		}
	})
})
