package vllm_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/internal/h1"
)

// trivialServer answers every request with one canned body: the peer the
// fake's throughput is compared with (the "trivial Go server").
func trivialServer(b *testing.B, body []byte) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// rawClient is a wrk-like load client: pre-encoded HTTP/1.1 requests on
// keep-alive connections, replies read by Content-Length, so the client
// costs little next to the servers it compares.
type rawClient struct {
	conns []*rawConn
}

type rawConn struct {
	c   net.Conn
	r   *bufio.Reader
	req []byte
}

func dialRaw(b *testing.B, addr, path string, payload []byte, n int) *rawClient {
	b.Helper()
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, addr, len(payload), payload)
	rc := &rawClient{}
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		rc.conns = append(rc.conns, &rawConn{c: c, r: bufio.NewReaderSize(c, 64<<10), req: req})
	}
	return rc
}

// do sends one request and reads the whole reply.
func (c *rawConn) do() error {
	if _, err := c.c.Write(c.req); err != nil {
		return err
	}
	status, err := c.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(status, []byte("HTTP/1.1 200")) {
		return fmt.Errorf("status %q", strings.TrimSpace(string(status)))
	}
	length, chunked := -1, false
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		switch {
		case !ok:
		case strings.EqualFold(string(k), "Content-Length"):
			length, _ = strconv.Atoi(strings.TrimSpace(string(v)))
		case strings.EqualFold(string(k), "Transfer-Encoding"):
			chunked = strings.EqualFold(strings.TrimSpace(string(v)), "chunked")
		}
	}
	if length < 0 {
		if chunked {
			return c.discardChunks()
		}
		return fmt.Errorf("reply without Content-Length or chunked encoding")
	}
	_, err = c.r.Discard(length)
	return err
}

// discardChunks reads a chunked body (a streamed reply) to its end.
func (c *rawConn) discardChunks() error {
	if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(c.r)); err != nil {
		return err
	}
	return h1.SkipTrailer(c.r)
}

// burst runs perConn requests on every connection at once and returns the
// wall time.
func (rc *rawClient) burst(perConn int) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make(chan error, len(rc.conns))
	start := time.Now()
	for _, c := range rc.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perConn {
				if err := c.do(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	return d, <-errs
}

// BenchmarkNonStreamingVsTrivial measures the fake's non-streaming chat
// throughput at concurrency 64 against a trivial Go server that returns the
// same bytes, in alternating bursts in one run (the machine is shared, so
// only the ratio means much). Goal (issue 14): fake/trivial >= 0.8.
func BenchmarkNonStreamingVsTrivial(b *testing.B) {
	payload := []byte(`{"model":"Qwen/Qwen3-4B-Thinking-2507","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}`)
	fake, err := vllm.New(vllm.Options{Lengths: vllm.Lengths{Mean: 100000, StdDev: 1}}) // the default ledger bound, as users run it
	if err != nil {
		b.Fatal(err)
	}
	if err := fake.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fake.Close() })
	fakeAddr := strings.TrimPrefix(fake.URL(), "http://")
	// The peer returns the fake's own reply, so both move the same bytes.
	probe := dialRaw(b, fakeAddr, "/v1/chat/completions", payload, 1).conns[0]
	if _, err := probe.c.Write(probe.req); err != nil {
		b.Fatal(err)
	}
	resp, err := http.ReadResponse(probe.r, nil)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	trivialAddr := trivialServer(b, body)

	const conns, perConn = benchConcurrency, 20
	fc := dialRaw(b, fakeAddr, "/v1/chat/completions", payload, conns)
	tc := dialRaw(b, trivialAddr, "/v1/chat/completions", payload, conns)
	var fakeTime, trivialTime time.Duration
	b.ResetTimer()
	for b.Loop() {
		d, err := fc.burst(perConn)
		if err != nil {
			b.Fatal("fake: ", err)
		}
		fakeTime += d
		d, err = tc.burst(perConn)
		if err != nil {
			b.Fatal("trivial: ", err)
		}
		trivialTime += d
	}
	reqs := float64(b.N * conns * perConn)
	b.ReportMetric(reqs/fakeTime.Seconds(), "fake-req/s")
	b.ReportMetric(reqs/trivialTime.Seconds(), "trivial-req/s")
	b.ReportMetric(trivialTime.Seconds()/fakeTime.Seconds(), "fake/trivial")
}

// BenchmarkLedgerLongPrompts fills the ledger with generations of a
// 2000-token prompt, as a long-rollout load test does, and reports what an
// entry costs in the packed ring (LedgerEntry values cost 8 bytes a token
// plus their headers, and the garbage collector scanned every one).
func BenchmarkLedgerLongPrompts(b *testing.B) {
	s, err := vllm.New(vllm.Options{LedgerMaxBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"model":"Qwen/Qwen3-4B-Thinking-2507","messages":[{"role":"user","content":"` + strings.Repeat("token ", 2000) + `"}],"max_tokens":8}`)
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(payload))
		req.Header.Set("Content-Type", "application/json")
		w := &discardWriter{h: http.Header{}}
		s.Handler().ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
	entries, bytes, _ := s.LedgerStats()
	led := s.Ledger()
	tokens := 0
	for _, e := range led {
		tokens += len(e.PromptTokenIDs) + len(e.GeneratedTokenIDs)
	}
	b.ReportMetric(float64(bytes)/float64(entries), "ledger-B/entry")
	b.ReportMetric(float64(bytes)/float64(tokens), "ledger-B/token")
}

type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(b), nil
}
func (w *discardWriter) WriteHeader(code int) { w.status = code }
