package proxy_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
)

// stalledRead posts body with the fake's stall fault and reads the reply to
// its end, returning what arrived, the read error and how long it took.
func stalledRead(ctx context.Context, url string, body []byte) (int, []byte, error, time.Duration) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Fake-Fault", vllm.FaultStall)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	got, rerr := io.ReadAll(resp.Body)
	return resp.StatusCode, got, rerr, time.Since(start)
}

var _ = Describe("a stream that stalls after its headers", func() {
	var fake *vllm.Server
	BeforeEach(func() {
		// The fake stalls halfway through its tokens for far longer than
		// the proxy's bound; only the proxy can end the call early.
		f, err := vllm.New(vllm.Options{ServedModelNames: []string{"policy"},
			Lengths: vllm.Lengths{Mean: 12, StdDev: 0.01, Min: 12}, Faults: vllm.Faults{Stall: 20 * time.Second}})
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Start(context.Background())).To(Succeed())
		DeferCleanup(f.Close)
		fake = f
	})
	idle := func(o *proxy.Options) { o.Limits.StreamIdleTimeout = 300 * time.Millisecond }

	DescribeTable("is cut after --stream-idle-timeout with an error naming it, and its rollout marked incomplete",
		func(ctx SpecContext, path, body string) {
			st := store.NewMemoryStore()
			p := startProxy(ctx, fake.URL(), st, idle)
			status, got, rerr, took := stalledRead(ctx, p.URL()+"/ng-rollout/s1/training-token-capture"+path, []byte(body))
			Expect(status).To(Equal(200))
			Expect(took).To(BeNumerically("<", 5*time.Second), "the proxy waited for the stalled engine")
			Expect(rerr).To(HaveOccurred(), "the client read a clean end of a stalled stream: %s", got)
			Expect(string(got)).To(ContainSubstring("--stream-idle-timeout"))
			Expect(incomplete(ctx, st, "s1")).To(BeTrue())
			Expect(entries(ctx, st, "s1")).To(BeEmpty())
		},
		Entry("chat", "/v1/chat/completions", `{"model":"policy","stream":true,"messages":[{"role":"user","content":"hi"}]}`),
		Entry("messages", "/v1/messages", `{"model":"policy","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`),
		Entry("responses", "/v1/responses", `{"model":"policy","stream":true,"input":"hi"}`),
	)

	It("cuts a relayed (plain) stream too", func(ctx SpecContext) {
		p := startProxy(ctx, fake.URL(), store.NewMemoryStore(), idle)
		status, got, rerr, took := stalledRead(ctx, p.URL()+"/v1/chat/completions",
			[]byte(`{"model":"policy","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		Expect(status).To(Equal(200))
		Expect(took).To(BeNumerically("<", 5*time.Second))
		Expect(rerr).To(HaveOccurred(), "the client read a clean end of a stalled stream: %s", got)
	})

	It("defaults to --upstream-timeout", func(ctx SpecContext) {
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.Limits.UpstreamTimeout = 300 * time.Millisecond })
		_, got, rerr, took := stalledRead(ctx, p.URL()+"/ng-rollout/s2/training-token-capture/v1/chat/completions",
			[]byte(`{"model":"policy","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		Expect(took).To(BeNumerically("<", 5*time.Second))
		Expect(rerr).To(HaveOccurred())
		Expect(string(got)).To(ContainSubstring("300ms"))
		Expect(incomplete(ctx, st, "s2")).To(BeTrue())
	})

	It("refuses a negative bound, naming the flag", func() {
		_, err := proxy.New(proxy.Options{Upstream: fake.URL(), Store: store.NewMemoryStore(),
			Limits: proxy.Limits{StreamIdleTimeout: -time.Second}})
		Expect(err).To(MatchError(ContainSubstring("--stream-idle-timeout -1s is negative")))
	})

	It("leaves a slow but steady stream alone", func(ctx SpecContext) {
		f, err := vllm.New(vllm.Options{ServedModelNames: []string{"policy"}, Lengths: vllm.Lengths{Mean: 8, StdDev: 0.01, Min: 8},
			Timing: vllm.Timing{InterTokenLatency: 100 * time.Millisecond}})
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Start(context.Background())).To(Succeed())
		DeferCleanup(f.Close)
		st := store.NewMemoryStore()
		p := startProxy(ctx, f.URL(), st, func(o *proxy.Options) { o.Limits.StreamIdleTimeout = 300 * time.Millisecond })
		r := do(ctx, "POST", p.URL()+"/ng-rollout/s3/training-token-capture/v1/chat/completions",
			[]byte(`{"model":"policy","stream":true,"messages":[{"role":"user","content":"hi"}]}`), nil)
		Expect(r.Status).To(Equal(200))
		Expect(string(r.Body)).To(HaveSuffix("data: [DONE]\n\n"))
		Expect(entries(ctx, st, "s3")).To(HaveLen(1))
	})
})
