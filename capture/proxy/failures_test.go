package proxy_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("failure rules and bad input", func() {
	var (
		up *stubVLLM
		st *store.MemoryStore
		p  *proxy.Proxy
	)
	const chatPath = "/ng-rollout/f1/training-token-capture/v1/chat/completions"
	chatBody := mustJSON(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}})

	BeforeEach(func() {
		up = newStubVLLM()
		DeferCleanup(up.Close)
		st = store.NewMemoryStore()
		p = startProxy(context.Background(), up.URL(), st, func(o *proxy.Options) { o.MaxBodyBytes = 64 << 10 })
	})

	nothingWritten := func(ctx context.Context) {
		ids, err := st.Rollouts(ctx)
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
		ExpectWithOffset(1, ids).To(BeEmpty())
	}

	Describe("harness probes and non-generating routes", func() {
		DescribeTable("are answered and never mark the rollout",
			func(ctx SpecContext, method, path string, wantStatus int, reachesUpstream bool) {
				r := do(ctx, method, p.URL()+path, nil, map[string]string{"User-Agent": "Bun/1.4.4"})
				Expect(r.Status).To(Equal(wantStatus), string(r.Body))
				Expect(up.generations()).To(BeEmpty())
				if !reachesUpstream {
					Expect(up.requests()).To(BeEmpty())
				}
				nothingWritten(ctx)
			},
			Entry("HEAD on the base URL (2.1.197)", "HEAD", "/ng-rollout/f1/training-token-capture", 200, false),
			Entry("HEAD /api/hello (2.1.328)", "HEAD", "/ng-rollout/f1/training-token-capture/api/hello", 200, false),
			Entry("GET /v1/models", "GET", "/ng-rollout/f1/training-token-capture/v1/models", 200, true),
			Entry("GET /health", "GET", "/ng-rollout/f1/training-token-capture/health", 200, true),
			Entry("unknown path under the training prefix", "POST", "/ng-rollout/f1/training-token-capture/v1/embeddings", 404, false),
			Entry("wrong method on a model route", "GET", "/ng-rollout/f1/training-token-capture/v1/chat/completions", 405, false),
		)
	})

	DescribeTable("route grammar",
		func(ctx SpecContext, path string, wantStatus int, wantCaptured bool) {
			r := do(ctx, "POST", p.URL()+path, chatBody, nil)
			Expect(r.Status).To(Equal(wantStatus), string(r.Body))
			if wantCaptured {
				Expect(entries(ctx, st, "f1")).To(HaveLen(1))
				Expect(up.generations()[0].Body).To(HaveKey("logprobs"))
			} else {
				nothingWritten(ctx)
			}
		},
		Entry("training prefix", chatPath, 200, true),
		Entry("training prefix with a doubled slash", "/ng-rollout/f1/training-token-capture//v1/chat/completions", 200, true),
		Entry("rollout prefix without the training segment", "/ng-rollout/f1/v1/chat/completions", 200, false),
		Entry("training segment with nothing after it", "/ng-rollout/f1/training-token-capture", 404, false),
		Entry("empty rollout id is not a prefix", "/ng-rollout//v1/chat/completions", 404, false),
		Entry("unprefixed", "/v1/chat/completions", 200, false),
	)

	DescribeTable("bad input gets a clear error and writes nothing",
		func(ctx SpecContext, path string, body []byte, wantStatus int, wantMsg string) {
			r := do(ctx, "POST", p.URL()+path, body, nil)
			Expect(r.Status).To(Equal(wantStatus))
			Expect(string(r.Body)).To(ContainSubstring(wantMsg))
			Expect(up.generations()).To(BeEmpty())
			nothingWritten(ctx)
		},
		Entry("invalid rollout id", "/ng-rollout/bad%20id/training-token-capture/v1/chat/completions", chatBody, 400, "invalid rollout id"),
		Entry("malformed JSON", chatPath, []byte(`{"messages": [`), 400, "not a JSON object"),
		Entry("JSON that is not an object", chatPath, []byte(`[1,2]`), 400, "not a JSON object"),
		Entry("messages missing", chatPath, []byte(`{"model":"m"}`), 400, "messages must be a list"),
		Entry("body over the limit", chatPath, []byte(`{"messages":"`+strings.Repeat("x", 70<<10)+`"}`), 413, "exceeds the proxy's limit"),
		Entry("n > 1 on the capture path", chatPath, []byte(`{"messages":[{"role":"user","content":"q"}],"n":2}`), 400, "n must be absent or 1"),
		Entry("Messages body that cannot be translated", "/ng-rollout/f1/training-token-capture/v1/messages",
			[]byte(`{"model":"m","max_tokens":5,"messages":[{"role":"robot","content":"x"}]}`), 400, "invalid_request_error"),
	)

	Context("when an API key is configured", func() {
		BeforeEach(func() {
			p = startProxy(context.Background(), up.URL(), st, func(o *proxy.Options) { o.APIKey = "sekrit" })
		})
		DescribeTable("checks the key",
			func(ctx SpecContext, path string, hdr map[string]string, wantStatus int, wantBody string) {
				body := chatBody
				if strings.Contains(path, "messages") {
					body = mustJSON(map[string]any{"model": "m", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "q"}}})
				}
				r := do(ctx, "POST", p.URL()+path, body, hdr)
				Expect(r.Status).To(Equal(wantStatus))
				Expect(string(r.Body)).To(ContainSubstring(wantBody))
			},
			Entry("no key", chatPath, nil, 401, "API key"),
			Entry("wrong bearer", chatPath, map[string]string{"Authorization": "Bearer nope"}, 401, "API key"),
			Entry("wrong x-api-key on Messages", "/ng-rollout/f1/training-token-capture/v1/messages", map[string]string{"x-api-key": "nope"}, 401, "authentication_error"),
			Entry("right bearer", chatPath, map[string]string{"Authorization": "Bearer sekrit"}, 200, "hello there"),
			Entry("right x-api-key", "/ng-rollout/f1/training-token-capture/v1/messages", map[string]string{"x-api-key": "sekrit"}, 200, "hello there"),
		)
	})

	It("passes an upstream error through and marks the rollout incomplete", func(ctx SpecContext) {
		errBody := `{"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}`
		up.script(stubReply{Status: 500, ErrBody: errBody})
		r := do(ctx, "POST", p.URL()+chatPath, chatBody, nil)
		Expect(r.Status).To(Equal(500))
		Expect(string(r.Body)).To(Equal(errBody))
		Expect(entries(ctx, st, "f1")).To(BeEmpty())
		Expect(incomplete(ctx, st, "f1")).To(BeTrue())
	})

	It("answers 502 when upstream cannot be reached and marks the rollout incomplete", func(ctx SpecContext) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		dead := "http://" + ln.Addr().String()
		Expect(ln.Close()).To(Succeed())
		p2 := startProxy(ctx, dead, st, nil)
		r := do(ctx, "POST", p2.URL()+chatPath, chatBody, nil)
		Expect(r.Status).To(Equal(502))
		Expect(string(r.Body)).To(ContainSubstring("upstream request failed"))
		Expect(incomplete(ctx, st, "f1")).To(BeTrue())
	})

	It("serves a reply without token ids but marks the rollout incomplete", func(ctx SpecContext) {
		up.script(stubReply{Content: "fine", NoLogprob: true})
		r := do(ctx, "POST", p.URL()+chatPath, chatBody, nil)
		Expect(r.Status).To(Equal(200))
		Expect(string(r.Body)).To(ContainSubstring("fine"))
		Expect(entries(ctx, st, "f1")).To(BeEmpty())
		Expect(incomplete(ctx, st, "f1")).To(BeTrue())
	})

	It("survives an upstream reply whose tool_calls are all malformed on the Responses route", func(ctx SpecContext) {
		up.script(stubReply{RawToolCalls: []any{1, "x"}})
		body := mustJSON(map[string]any{"input": "q"})
		r := do(ctx, "POST", p.URL()+"/ng-rollout/f1/training-token-capture/v1/responses", body, nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		out, ok := r.JSON()["output"].([]any)
		Expect(ok).To(BeTrue())
		Expect(out).To(HaveLen(1))
		Expect(out[0]).To(HaveKeyWithValue("type", "message"))
		es := entries(ctx, st, "f1")
		Expect(es).To(HaveLen(1))
		Expect(es[0].GenerationTokenIDs).NotTo(BeEmpty())
		Expect(incomplete(ctx, st, "f1")).To(BeFalse())
	})

	It("fails the call before generation when begin_call fails", func(ctx SpecContext) {
		_, err := st.Freeze(ctx, "f1")
		Expect(err).NotTo(HaveOccurred())
		r := do(ctx, "POST", p.URL()+chatPath, chatBody, nil)
		Expect(r.Status).To(Equal(410))
		Expect(string(r.Body)).To(ContainSubstring(`rollout \"f1\" is frozen`))
		Expect(up.generations()).To(BeEmpty())
		Expect(incomplete(ctx, st, "f1")).To(BeFalse())
	})

	// Above 32 KB a chat request's messages are decoded beside the engine
	// call, not before it: every answer must stay the one a small request
	// gets.
	long := strings.Repeat("x", 40<<10)
	DescribeTable("records an unreadable conversation as UNRESOLVED lookup_error without failing the call",
		func(ctx SpecContext, content string) {
			body := fmt.Appendf(nil, `{"messages":[{"role":"user","content":%q},"not an object"]}`, content)
			r := do(ctx, "POST", p.URL()+chatPath, body, nil)
			Expect(r.Status).To(Equal(200))
			es := entries(ctx, st, "f1")
			Expect(es).To(HaveLen(1))
			Expect(*es[0].ParentResolution).To(Equal(record.ResolutionUnresolved))
			Expect(es[0].ParentResolutionReason).To(Equal("lookup_error"))
		},
		Entry("a small request", "q"),
		Entry("a request over 32 KB", long),
	)

	DescribeTable("refuses a chat body whose messages are not a list of valid JSON, before anything reaches the engine",
		func(ctx SpecContext, body, message string) {
			r := do(ctx, "POST", p.URL()+chatPath, []byte(body), nil)
			Expect(r.Status).To(Equal(400), string(r.Body))
			Expect(string(r.Body)).To(ContainSubstring(message))
			Expect(up.generations()).To(BeEmpty())
			Expect(entries(ctx, st, "f1")).To(BeEmpty())
		},
		Entry("messages an object, small", `{"messages":{"role":"user","content":"q"}}`, "messages must be a list of message objects"),
		Entry("messages an object, over 32 KB", `{"messages":{"role":"user","content":"`+long+`"}}`, "messages must be a list of message objects"),
		Entry("broken JSON inside a message, small", `{"messages":[{"role":"user","content":"q"},{"role":}]}`, "request body is not a JSON object"),
		Entry("broken JSON inside a message, over 32 KB", `{"messages":[{"role":"user","content":"`+long+`"},{"role":}]}`, "request body is not a JSON object"),
		Entry("a bad escape inside a message, over 32 KB", `{"messages":[{"role":"user","content":"`+long+`\q"}]}`, "request body is not a JSON object"),
	)

	Describe("retries (Claude Code resends the identical body)", func() {
		It("after a 529, the retry is captured as a new call; only the failed attempt makes the rollout incomplete", func(ctx SpecContext) {
			up.script(stubReply{Status: 529, ErrBody: `{"error":{"message":"Overloaded","type":"overloaded","code":529}}`}, stubReply{Content: "hi!"})
			body := readFixture("claude-code/v2.1.328/say-hi/call-01.request.json")
			url := p.URL() + "/ng-rollout/f1/training-token-capture/v1/messages?beta=true"
			r1 := do(ctx, "POST", url, body, nil)
			Expect(r1.Status).To(Equal(529))
			Expect(r1.JSON()["error"]).To(HaveKeyWithValue("type", "overloaded_error"))
			r2 := do(ctx, "POST", url, body, nil)
			Expect(r2.Status).To(Equal(200))
			snap, err := st.Freeze(ctx, "f1")
			Expect(err).NotTo(HaveOccurred())
			Expect(snap.Entries).To(HaveLen(1))
			Expect(*snap.Entries[0].ParentResolution).To(Equal(record.ResolutionRoot))
			// The failed attempt left an intent without a record (§3.7).
			Expect(snap.Incomplete).To(BeTrue())
		})

		It("after a cut stream, the resent continuation resolves to the same parent (retry siblings)", func(ctx SpecContext) {
			url := p.URL() + "/ng-rollout/f1/training-token-capture/v1/chat/completions"
			first := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}}
			r1 := do(ctx, "POST", url, mustJSON(first), nil)
			asst := r1.JSON()["choices"].([]any)[0].(map[string]any)["message"]
			second := mustJSON(map[string]any{"messages": []any{first["messages"].([]any)[0], asst, map[string]any{"role": "user", "content": "more"}}})
			Expect(do(ctx, "POST", url, second, nil).Status).To(Equal(200))
			Expect(do(ctx, "POST", url, second, nil).Status).To(Equal(200))
			es := entries(ctx, st, "f1")
			Expect(es).To(HaveLen(3))
			Expect(es[1].ModelCallID).NotTo(Equal(es[2].ModelCallID))
			for _, e := range es[1:] {
				Expect(*e.ParentResolution).To(Equal(record.ResolutionResolved))
				Expect(*e.ParentCallID).To(Equal(es[0].ModelCallID))
			}
			Expect(incomplete(ctx, st, "f1")).To(BeFalse())
		})
	})
})

var _ = Describe("closing the proxy", func() {
	It("leaves no upstream keep-alive connection (nor its goroutines) behind", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		baseline := goleak.IgnoreCurrent()
		p, err := proxy.New(proxy.Options{Upstream: up.URL(), Store: store.NewMemoryStore()})
		Expect(err).NotTo(HaveOccurred())
		Expect(p.Start(ctx)).To(Succeed())
		body := mustJSON(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		Expect(do(ctx, "POST", p.URL()+"/ng-rollout/c1/training-token-capture/v1/chat/completions", body, nil).Status).To(Equal(200))
		Expect(up.generations()).To(HaveLen(1), "an upstream connection must have been opened for this check to mean anything")
		Expect(p.Close()).To(Succeed())
		Eventually(func() error { return goleak.Find(baseline) }).WithTimeout(3 * time.Second).Should(Succeed())
	})
})

var _ = Describe("the lineage indexes a proxy keeps", func() {
	trackedRollouts := func(p *proxy.Proxy) float64 {
		families, err := p.Registry().Gather()
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
		for _, f := range families {
			if f.GetName() == "capbench_proxy_tracked_rollouts" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		Fail("no capbench_proxy_tracked_rollouts gauge")
		return 0
	}

	It("are bounded by MaxTrackedRollouts, and an evicted one is rebuilt from the store", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		st := store.NewMemoryStore()
		p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.MaxTrackedRollouts = 2 })
		url := func(id string) string {
			return p.URL() + "/ng-rollout/" + id + "/training-token-capture/v1/chat/completions"
		}
		question := map[string]any{"role": "user", "content": "q"}
		var firstReplyOfA any
		for _, id := range []string{"a", "b", "c"} {
			r := do(ctx, "POST", url(id), mustJSON(map[string]any{"messages": []any{question}}), nil)
			Expect(r.Status).To(Equal(200), string(r.Body))
			if id == "a" {
				firstReplyOfA = r.JSON()["choices"].([]any)[0].(map[string]any)["message"]
			}
			Expect(trackedRollouts(p)).To(BeNumerically("<=", 2), "after rollout %s", id)
		}
		Expect(trackedRollouts(p)).To(Equal(2.0))

		// "a" was the least recently used and was dropped; its continuation
		// must still find its parent.
		next := map[string]any{"messages": []any{question, firstReplyOfA, map[string]any{"role": "user", "content": "more"}}}
		Expect(do(ctx, "POST", url("a"), mustJSON(next), nil).Status).To(Equal(200))
		es := entries(ctx, st, "a")
		Expect(es).To(HaveLen(2))
		Expect(*es[1].ParentResolution).To(Equal(record.ResolutionResolved))
		Expect(*es[1].ParentCallID).To(Equal(es[0].ModelCallID))
		Expect(trackedRollouts(p)).To(Equal(2.0))
	})

	It("are evicted in batches, so the scan over tracked rollouts runs once per capacity/8 new rollouts", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		p := startProxy(ctx, up.URL(), store.NewMemoryStore(), func(o *proxy.Options) { o.MaxTrackedRollouts = 16 })
		call := func(i int) {
			url := fmt.Sprintf("%s/ng-rollout/batch-%d/training-token-capture/v1/chat/completions", p.URL(), i)
			r := do(ctx, "POST", url, mustJSON(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}}), nil)
			Expect(r.Status).To(Equal(200), string(r.Body))
		}
		for i := range 16 {
			call(i)
		}
		Expect(trackedRollouts(p)).To(Equal(16.0))
		call(16) // over capacity: down to 16 - 16/8 = 14 in one eviction
		Expect(trackedRollouts(p)).To(Equal(14.0))
		call(17)
		call(18) // back at capacity, no eviction yet
		Expect(trackedRollouts(p)).To(Equal(16.0))
	})

	It("forget a rollout the store deleted, so a reused rollout id resolves to its new calls", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		st := store.NewMemoryStore()
		p := startProxy(ctx, up.URL(), st, nil)
		url := p.URL() + "/ng-rollout/again/training-token-capture/v1/chat/completions"
		question := map[string]any{"role": "user", "content": "q"}
		// Every round replays the same conversation, so the deleted rounds'
		// calls are identical to the new ones; a stale index picks the
		// smallest call id among them, which is soon a deleted one.
		for round := range 6 {
			r := do(ctx, "POST", url, mustJSON(map[string]any{"messages": []any{question}}), nil)
			Expect(r.Status).To(Equal(200), string(r.Body))
			reply := r.JSON()["choices"].([]any)[0].(map[string]any)["message"]
			next := map[string]any{"messages": []any{question, reply, map[string]any{"role": "user", "content": "more"}}}
			Expect(do(ctx, "POST", url, mustJSON(next), nil).Status).To(Equal(200))
			es := entries(ctx, st, "again")
			Expect(es).To(HaveLen(2))
			Expect(*es[1].ParentResolution).To(Equal(record.ResolutionResolved),
				"round %d: %s", round, es[1].ParentResolutionReason)
			Expect(*es[1].ParentCallID).To(Equal(es[0].ModelCallID))
			Expect(st.Delete(ctx, "again")).To(Succeed())
		}
	})

	It("refuses a negative bound", func() {
		_, err := proxy.New(proxy.Options{Upstream: "http://127.0.0.1:1", MaxTrackedRollouts: -1})
		Expect(err).To(MatchError(ContainSubstring("MaxTrackedRollouts -1 is negative")))
	})
})
