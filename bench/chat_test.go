package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
)

// chatServer answers like vLLM's Chat Completions: a JSON body with usage, or
// an SSE stream of content chunks ending with a usage chunk and [DONE].
func chatServer(tokens int, brokenStream bool) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream    bool `json:"stream"`
			MaxTokens int  `json:"max_tokens"`
		}
		if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		if r.Header.Get("X-Fake-Script") == "fail" {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":%d}}`, tokens)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < tokens; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
		}
		if brokenStream {
			return
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"completion_tokens\":%d}}\n\n", tokens)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
}

var _ = Describe("ChatRequest", func() {
	It("counts the server's completion tokens without streaming", func(ctx SpecContext) {
		srv := chatServer(7, false)
		DeferCleanup(srv.Close)
		do, err := bench.ChatRequest(bench.NewHTTPClient(4), bench.ChatTarget{BaseURL: srv.URL, Model: "m", Prompt: "hi", MaxTokens: 16})
		Expect(err).NotTo(HaveOccurred())
		r, err := bench.Run(ctx, bench.Config{Concurrency: 4, Requests: 20}, do)
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Errors).To(BeZero(), r.FirstError)
		Expect(r.Tokens).To(BeEquivalentTo(140))
		Expect(r.TTFT).To(BeNil())
	})

	It("reads a stream to [DONE], taking tokens from the usage chunk and timing the first token", func(ctx SpecContext) {
		srv := chatServer(5, false)
		DeferCleanup(srv.Close)
		do, err := bench.ChatRequest(bench.NewHTTPClient(2), bench.ChatTarget{BaseURL: srv.URL, Model: "m", Prompt: "hi", MaxTokens: 16, Stream: true})
		Expect(err).NotTo(HaveOccurred())
		s, err := do(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Tokens).To(Equal(5))
		Expect(s.TTFT).To(BeNumerically(">", 0))
	})

	It("fails a stream that ends without [DONE]", func(ctx SpecContext) {
		srv := chatServer(3, true)
		DeferCleanup(srv.Close)
		do, err := bench.ChatRequest(bench.NewHTTPClient(1), bench.ChatTarget{BaseURL: srv.URL, MaxTokens: 4, Stream: true})
		Expect(err).NotTo(HaveOccurred())
		_, err = do(ctx)
		Expect(err).To(MatchError(ContainSubstring("without [DONE]")))
	})

	It("reports the status and body of a refused request", func(ctx SpecContext) {
		srv := chatServer(3, false)
		DeferCleanup(srv.Close)
		do, err := bench.ChatRequest(bench.NewHTTPClient(1), bench.ChatTarget{
			BaseURL: srv.URL, MaxTokens: 4, Header: http.Header{"X-Fake-Script": {"fail"}},
		})
		Expect(err).NotTo(HaveOccurred())
		_, err = do(context.Background())
		Expect(err).To(MatchError(ContainSubstring("status 503")))
		Expect(err).To(MatchError(ContainSubstring("overloaded")))
	})

	DescribeTable("rejects an unusable target",
		func(t bench.ChatTarget, want string) {
			_, err := bench.ChatRequest(bench.NewHTTPClient(1), t)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("no URL", bench.ChatTarget{MaxTokens: 1}, "base URL"),
		Entry("no tokens", bench.ChatTarget{BaseURL: "http://127.0.0.1:1"}, "MaxTokens"),
	)

	// A server that flushes the end of the reply before the end of the body,
	// as vLLM does: the chunked terminator arrives after the client has what
	// it needs. The connection is reused only if the client reads to EOF.
	DescribeTable("keeps one connection for a closed loop even when the body ends after the reply",
		func(ctx SpecContext, stream bool) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if stream {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
				} else {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{"usage":{"completion_tokens":3}}`)
				}
				w.(http.Flusher).Flush()
				time.Sleep(time.Millisecond)
				if !stream {
					fmt.Fprint(w, "\n")
				}
			}))
			var conns atomic.Int64
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			DeferCleanup(srv.Close)
			do, err := bench.ChatRequest(bench.NewHTTPClient(1), bench.ChatTarget{BaseURL: srv.URL, MaxTokens: 4, Stream: stream})
			Expect(err).NotTo(HaveOccurred())
			r, err := bench.Run(ctx, bench.Config{Concurrency: 1, Requests: 20}, do)
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Errors).To(BeZero(), r.FirstError)
			Expect(r.Requests).To(Equal(20))
			Expect(conns.Load()).To(BeEquivalentTo(1), "every request opened a new connection")
		},
		Entry("JSON reply", false),
		Entry("stream", true),
	)

	It("does not count a stream cut off by the end of a timed run as a failure", func(ctx SpecContext) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for {
				if _, err := fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}))
		DeferCleanup(srv.Close)
		do, err := bench.ChatRequest(bench.NewHTTPClient(4), bench.ChatTarget{BaseURL: srv.URL, MaxTokens: 4, Stream: true})
		Expect(err).NotTo(HaveOccurred())
		r, err := bench.Run(ctx, bench.Config{Concurrency: 4, Duration: 50 * time.Millisecond}, do)
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Errors).To(BeZero(), r.FirstError)
		Expect(r.Requests).To(BeZero(), "no stream ever finished")
	})
})
