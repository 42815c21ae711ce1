package bench_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
)

const goodStream = `data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}

data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hel"}}]}

data: {"id":"c1","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}

data: {"id":"c1","choices":[],"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}

data: [DONE]

`

// sseServer answers with body (or status) and remembers request bodies.
type sseServer struct {
	mu     sync.Mutex
	bodies []map[string]any
	paths  []string
}

func (s *sseServer) start(status int, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		s.mu.Lock()
		s.bodies, s.paths = append(s.bodies, m), append(s.paths, r.URL.Path)
		s.mu.Unlock()
		w.WriteHeader(status)
		for _, part := range strings.SplitAfter(body, "\n\n") {
			_, _ = io.WriteString(w, part)
			w.(http.Flusher).Flush()
			time.Sleep(2 * time.Millisecond)
		}
	}))
	DeferCleanup(srv.Close)
	return srv
}

func sendOne(url string, stream bool, extra map[string]any, prefix string) bench.Sample {
	return sendVia(false, url, stream, extra, prefix)
}

func sendVia(netHTTP bool, url string, stream bool, extra map[string]any, prefix string) bench.Sample {
	bodies, err := bench.BuildChatBodies(bench.ChatSpec{Model: "m", Prompt: bench.Dist{Kind: "fixed", A: 10}, Output: bench.Dist{Kind: "fixed", A: 16}, Stream: stream, Extra: extra, Variants: 1})
	Expect(err).NotTo(HaveOccurred())
	w := &bench.ChatWorkload{Client: bench.NewHTTPClient(1), Bodies: bodies, Stream: stream, NetHTTP: netHTTP,
		Endpoints: map[bench.Path]bench.Endpoint{bench.PathTarget: {Base: url + "/v1/", RolloutPrefix: prefix}}}
	var s bench.Sample
	w.Send(GinkgoT().Context(), 3, bench.PathTarget, time.Now(), &s)
	return s
}

var _ = Describe("ChatWorkload", func() {
	It("reads a stream the way vLLM bench does: TTFT at the first chunk with choices, one ITL gap per later chunk, server usage", func() {
		srv := &sseServer{}
		url := srv.start(200, goodStream).URL
		s := sendOne(url, true, map[string]any{"ignore_eos": true, "min_tokens": 16}, "")
		Expect(s.OK()).To(BeTrue(), s.Error)
		Expect(s.FirstTokenNS).To(BeNumerically(">", s.StartNS))
		Expect(s.ChunkGapsUS).To(HaveLen(2))
		Expect(s.OutputTokens).To(Equal(3))
		Expect(s.PromptTokens).To(Equal(7))
		Expect(s.TokenSource).To(Equal("usage"))
		By("sending extra body fields verbatim, and dropping the pasted /v1")
		Expect(srv.paths).To(Equal([]string{"/v1/chat/completions"}))
		Expect(srv.bodies[0]).To(HaveKeyWithValue("ignore_eos", true))
		Expect(srv.bodies[0]).To(HaveKeyWithValue("min_tokens", 16.0))
		Expect(srv.bodies[0]).To(HaveKeyWithValue("stream_options", map[string]any{"include_usage": true}))
	})

	It("reads the same through net/http (https targets) as through the raw client", func() {
		srv := &sseServer{}
		url := srv.start(200, goodStream).URL
		a, b := sendVia(true, url, true, nil, ""), sendVia(false, url, true, nil, "")
		Expect(a.OK()).To(BeTrue(), a.Error)
		Expect([]int{a.OutputTokens, a.PromptTokens, len(a.ChunkGapsUS)}).To(Equal([]int{b.OutputTokens, b.PromptTokens, len(b.ChunkGapsUS)}))
	})

	DescribeTable("reuses one connection for successive calls",
		func(stream bool) {
			var conns atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if stream {
					_, _ = io.WriteString(w, goodStream[:40])
					w.(http.Flusher).Flush() // a chunked reply
					_, _ = io.WriteString(w, goodStream[40:])
					return
				}
				_, _ = io.WriteString(w, `{"usage":{"prompt_tokens":1,"completion_tokens":3}}`)
			}))
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			DeferCleanup(srv.Close)
			bodies, err := bench.BuildChatBodies(bench.ChatSpec{Prompt: bench.Dist{Kind: "fixed", A: 1}, Output: bench.Dist{Kind: "fixed", A: 1}, Variants: 1})
			Expect(err).NotTo(HaveOccurred())
			w := &bench.ChatWorkload{Bodies: bodies, Stream: stream, Endpoints: map[bench.Path]bench.Endpoint{bench.PathTarget: {Base: srv.URL}}}
			for range 5 {
				var s bench.Sample
				w.Send(GinkgoT().Context(), 0, bench.PathTarget, time.Now(), &s)
				Expect(s.OK()).To(BeTrue(), s.Error)
				Expect(s.OutputTokens).To(Equal(3))
			}
			w.Close()
			Expect(conns.Load()).To(BeEquivalentTo(1))
		},
		Entry("whole replies", false),
		Entry("chunked streams", true),
	)

	It("sends each job through its own capture rollout", func() {
		srv := &sseServer{}
		s := sendOne(srv.start(200, goodStream).URL, true, nil, "load")
		Expect(s.RolloutID).To(Equal("load-0-3"))
		Expect(srv.paths).To(Equal([]string{"/ng-rollout/load-0-3/training-token-capture/v1/chat/completions"}))
	})

	It("counts chunks when the server sends no usage", func() {
		srv := &sseServer{}
		noUsage := strings.Replace(goodStream, `data: {"id":"c1","choices":[],"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}`+"\n\n", "", 1)
		s := sendOne(srv.start(200, noUsage).URL, true, nil, "")
		Expect(s.OK()).To(BeTrue(), s.Error)
		Expect(s.OutputTokens).To(Equal(3))
		Expect(s.TokenSource).To(Equal("chunks"))
	})

	DescribeTable("classifies failures",
		func(status int, body string, stream bool, kind bench.ErrorKind, part string) {
			srv := &sseServer{}
			s := sendOne(srv.start(status, body).URL, stream, nil, "")
			Expect(s.ErrorKind).To(Equal(kind))
			Expect(s.Error).To(ContainSubstring(part))
		},
		Entry("a 503", 503, `{"error":{"message":"overloaded"}}`, true, bench.ErrHTTP5xx, "overloaded"),
		Entry("a 400", 400, `{"error":{"message":"too long"}}`, false, bench.ErrHTTP4xx, "status 400"),
		Entry("an in-stream error event", 200, "data: {\"error\":{\"message\":\"engine died\"}}\n\ndata: [DONE]\n\n", true, bench.ErrStream, "engine died"),
		Entry("a stream cut before [DONE]", 200, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", true, bench.ErrStream, "without [DONE]"),
		Entry("a reply without usage", 200, `{"choices":[]}`, false, bench.ErrDecode, "no usage"),
	)

	It("refuses extra fields the workload sets itself", func() {
		_, err := bench.BuildChatBodies(bench.ChatSpec{Prompt: bench.Dist{Kind: "fixed", A: 1}, Output: bench.Dist{Kind: "fixed", A: 1}, Extra: map[string]any{"max_tokens": 5}})
		Expect(err).To(MatchError(ContainSubstring("--body-field max_tokens")))
	})
})
