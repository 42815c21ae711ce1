package proxy_test

import (
	"bytes"
	"io"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
)

// post sends body with an explicit Content-Type ("" sends none).
func post(ctx SpecContext, url, contentType string, body []byte) reply {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

var _ = Describe("requests vLLM rejects get vLLM's error, and nothing is recorded", func() {
	const prefix = "/ng-rollout/v1r/training-token-capture"
	chat := func(stream any) []byte {
		return mustJSON(map[string]any{"model": "policy", "stream": stream, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	}

	It("answers a missing or wrong content type exactly as vLLM does", func(ctx SpecContext) {
		fake := startFake()
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, nil)
		for _, ct := range []string{"", "text/plain"} {
			direct := post(ctx, fake.URL()+"/v1/chat/completions", ct, chat(false))
			via := post(ctx, p.URL()+prefix+"/v1/chat/completions", ct, chat(false))
			Expect(via.Status).To(Equal(direct.Status))
			Expect(via.JSON()).To(Equal(direct.JSON()))
		}
		Expect(post(ctx, p.URL()+prefix+"/v1/chat/completions", "application/json; charset=utf-8", chat(false)).Status).To(Equal(200))
		Expect(entries(ctx, st, "v1r")).To(HaveLen(1))
		Expect(incomplete(ctx, st, "v1r")).To(BeFalse())
	})

	It("answers Messages without a JSON content type in Anthropic's envelope", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		st := store.NewMemoryStore()
		p := startProxy(ctx, up.URL(), st, nil)
		r := post(ctx, p.URL()+prefix+"/v1/messages", "", mustJSON(map[string]any{"model": "m", "max_tokens": 5, "messages": []any{}}))
		Expect(r.Status).To(Equal(400))
		Expect(r.JSON()).To(HaveKeyWithValue("type", "error"))
		Expect(r.JSON()["error"]).To(HaveKeyWithValue("message", ContainSubstring("Only 'application/json' is allowed")))
		ids, _ := st.Rollouts(ctx)
		Expect(ids).To(BeEmpty())
	})

	DescribeTable("stream follows pydantic's lax booleans, like vLLM",
		func(ctx SpecContext, stream any, wantStatus int, wantSSE bool) {
			up := newStubVLLM()
			DeferCleanup(up.Close)
			st := store.NewMemoryStore()
			p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.RequestTokenIDs = true })
			r := do(ctx, "POST", p.URL()+prefix+"/v1/chat/completions", chat(stream), nil)
			Expect(r.Status).To(Equal(wantStatus), string(r.Body))
			if wantStatus != 200 {
				e := r.JSON()["error"].(map[string]any)
				Expect(e).To(HaveKeyWithValue("type", "Bad Request"))
				Expect(e).To(HaveKeyWithValue("param", "body.stream"))
				Expect(e["message"]).To(HavePrefix("1 validation error:\n  {'type': 'bool_parsing', 'loc': ('body', 'stream')"))
				Expect(up.requests()).To(BeEmpty())
				ids, _ := st.Rollouts(ctx)
				Expect(ids).To(BeEmpty())
				return
			}
			Expect(r.Header.Get("Content-Type") == "text/event-stream; charset=utf-8").To(Equal(wantSSE))
			Expect(entries(ctx, st, "v1r")).To(HaveLen(1))
		},
		Entry(`"yes" streams`, "yes", 200, true),
		Entry(`"False" does not`, "False", 200, false),
		Entry(`1 streams`, 1, 200, true),
		Entry(`"maybe" is rejected`, "maybe", 400, false),
		Entry(`2 is rejected`, 2, 400, false),
		Entry(`an object is rejected`, map[string]any{}, 400, false),
	)

	It("refuses a Messages content block it cannot render instead of dropping it", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		st := store.NewMemoryStore()
		p := startProxy(ctx, up.URL(), st, nil)
		body := mustJSON(map[string]any{"model": "m", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "summarise"},
			map[string]any{"type": "document", "source": map[string]any{"type": "text", "media_type": "text/plain", "data": "x"}},
		}}}})
		r := do(ctx, "POST", p.URL()+prefix+"/v1/messages", body, nil)
		Expect(r.Status).To(Equal(400))
		Expect(r.JSON()["error"]).To(HaveKeyWithValue("type", "invalid_request_error"))
		Expect(r.JSON()["error"]).To(HaveKeyWithValue("message", ContainSubstring("document")))
		Expect(up.requests()).To(BeEmpty())
		ids, _ := st.Rollouts(ctx)
		Expect(ids).To(BeEmpty())
	})
})
