package h1_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/h1"
)

// countingServer is an httptest server that counts the connections it got.
func countingServer(h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	DeferCleanup(srv.Close)
	return srv, &conns
}

// rawServer answers each connection's requests with replies, one per
// request in order, then closes the connection when closeAfter is set.
func rawServer(replies []string, closeAfter bool) (string, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(ln.Close)
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for _, reply := range replies {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(c, reply); err != nil {
						return
					}
				}
				if !closeAfter {
					_, _ = io.Copy(io.Discard, br)
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &conns
}

func post(ctx context.Context, t http.RoundTripper, url, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	return t.RoundTrip(req)
}

func readAll(resp *http.Response) (string, error) {
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return string(b), err
}

// recorder is a fallback that records what it was handed.
type recorder struct{ got []string }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = append(r.got, req.Method+" "+req.URL.String())
	return &http.Response{StatusCode: 299, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: req}, nil
}

var _ = Describe("the HTTP/1.1 transport", func() {
	var t *h1.Transport
	BeforeEach(func() {
		t = h1.New(http.DefaultTransport)
		DeferCleanup(t.CloseIdleConnections)
	})

	It("sends the request as net/http would: method, path and query, headers in their values' order, Host, Content-Length, body", func(ctx SpecContext) {
		var seen *http.Request
		var seenBody []byte
		srv, _ := countingServer(func(w http.ResponseWriter, r *http.Request) {
			seen = r
			seenBody, _ = io.ReadAll(r.Body)
			w.Header().Add("X-Multi", "a")
			w.Header().Add("X-Multi", "b")
			_, _ = io.WriteString(w, "ok")
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions?x=1&y=%20", bytes.NewReader([]byte(`{"a":1}`)))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Add("X-Forwarded", "one")
		req.Header.Add("X-Forwarded", "two")
		req.Header.Set("Authorization", "Bearer k")
		resp, err := t.RoundTrip(req)
		Expect(err).NotTo(HaveOccurred())
		Expect(readAll(resp)).To(Equal("ok"))
		Expect(resp.StatusCode).To(Equal(200))
		Expect(resp.Header.Values("X-Multi")).To(Equal([]string{"a", "b"}))
		Expect(seen.Method).To(Equal("POST"))
		Expect(seen.URL.RequestURI()).To(Equal("/v1/chat/completions?x=1&y=%20"))
		Expect(seen.Header.Values("X-Forwarded")).To(Equal([]string{"one", "two"}))
		Expect(seen.Header.Get("Authorization")).To(Equal("Bearer k"))
		Expect(seen.Host).To(Equal(strings.TrimPrefix(srv.URL, "http://")))
		Expect(seen.ContentLength).To(BeEquivalentTo(7))
		Expect(string(seenBody)).To(Equal(`{"a":1}`))
	})

	DescribeTable("reads each framing to its end and keeps the connection only when it may",
		func(ctx SpecContext, reply, body string, reused bool) {
			url, conns := rawServer([]string{reply, reply, reply}, true)
			for range 3 {
				resp, err := post(ctx, t, url, "{}")
				Expect(err).NotTo(HaveOccurred())
				Expect(readAll(resp)).To(Equal(body))
			}
			if reused {
				Expect(conns.Load()).To(BeEquivalentTo(1))
			} else {
				Expect(conns.Load()).To(BeEquivalentTo(3))
			}
		},
		Entry("Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", true),
		Entry("chunked, with a trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: t\r\n\r\n", "hello", true),
		Entry("an informational reply first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", true),
		Entry("no content", "HTTP/1.1 204 No Content\r\n\r\n", "", true),
		Entry("Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "ok", false),
		Entry("HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", false),
	)

	It("reads a reply delimited by the server closing", func(ctx SpecContext) {
		url, _ := rawServer([]string{"HTTP/1.1 200 OK\r\n\r\nuntil close"}, true)
		resp, err := post(ctx, t, url, "{}")
		Expect(err).NotTo(HaveOccurred())
		Expect(readAll(resp)).To(Equal("until close"))
	})

	DescribeTable("reports a reply cut short as an error, never as a clean end",
		func(ctx SpecContext, reply string) {
			url, _ := rawServer([]string{reply}, true)
			resp, err := post(ctx, t, url, "{}")
			Expect(err).NotTo(HaveOccurred())
			_, err = readAll(resp)
			Expect(err).To(MatchError(io.ErrUnexpectedEOF))
		},
		Entry("Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"),
		Entry("chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"),
	)

	It("sends again, on a new connection, a request whose kept connection the server had closed", func(ctx SpecContext) {
		// One reply per connection, then the server closes it: the second
		// request finds its kept connection dead.
		url, conns := rawServer([]string{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}, true)
		for range 3 {
			resp, err := post(ctx, t, url, `{"same":"body"}`)
			Expect(err).NotTo(HaveOccurred())
			Expect(readAll(resp)).To(Equal("ok"))
			time.Sleep(20 * time.Millisecond) // let the close arrive
		}
		Expect(conns.Load()).To(BeEquivalentTo(3))
	})

	It("does not send again a request on a new connection it dialled", func(ctx SpecContext) {
		url, conns := rawServer(nil, true) // reads nothing, answers nothing
		_, err := post(ctx, t, url, "{}")
		Expect(err).To(HaveOccurred())
		Expect(conns.Load()).To(BeEquivalentTo(1))
	})

	It("closes instead of reusing a connection idle longer than IdleTimeout", func(ctx SpecContext) {
		t.IdleTimeout = 30 * time.Millisecond
		srv, conns := countingServer(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
		for range 2 {
			resp, err := post(ctx, t, srv.URL, "{}")
			Expect(err).NotTo(HaveOccurred())
			Expect(readAll(resp)).To(Equal("ok"))
			time.Sleep(60 * time.Millisecond)
		}
		Expect(conns.Load()).To(BeEquivalentTo(2))
	})

	It("does not reuse a connection whose body was closed before its end", func(ctx SpecContext) {
		srv, conns := countingServer(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, strings.Repeat("x", 1<<20)) })
		for range 2 {
			resp, err := post(ctx, t, srv.URL, "{}")
			Expect(err).NotTo(HaveOccurred())
			_, _ = resp.Body.Read(make([]byte, 10))
			Expect(resp.Body.Close()).To(Succeed())
		}
		Expect(conns.Load()).To(BeEquivalentTo(2))
	})

	It("gives up on a cancelled request, waiting for headers or reading the body", func(ctx SpecContext) {
		release := make(chan struct{})
		srv, _ := countingServer(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/body" {
				_, _ = io.WriteString(w, "first")
				w.(http.Flusher).Flush()
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		DeferCleanup(func() { close(release) }) // before the server's Close, which waits for handlers
		c1, cancel1 := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel1()
		start := time.Now()
		_, err := post(c1, t, srv.URL+"/head", "{}")
		Expect(err).To(MatchError(context.DeadlineExceeded))
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second))

		c2, cancel2 := context.WithCancel(ctx)
		resp, err := post(c2, t, srv.URL+"/body", "{}")
		Expect(err).NotTo(HaveOccurred())
		buf := make([]byte, 5)
		_, err = io.ReadFull(resp.Body, buf)
		Expect(err).NotTo(HaveOccurred())
		cancel2()
		_, err = resp.Body.Read(buf)
		Expect(err).To(HaveOccurred())
		Expect(resp.Body.Close()).To(Succeed())
	})

	It("bounds the wait for headers with ResponseHeaderTimeout, as a timeout net.Error", func(ctx SpecContext) {
		t.ResponseHeaderTimeout = 50 * time.Millisecond
		release := make(chan struct{})
		srv, _ := countingServer(func(http.ResponseWriter, *http.Request) { <-release })
		DeferCleanup(func() { close(release) }) // before the server's Close, which waits for handlers
		_, err := post(ctx, t, srv.URL, "{}")
		var ne net.Error
		Expect(errors.As(err, &ne)).To(BeTrue(), fmt.Sprint(err))
		Expect(ne.Timeout()).To(BeTrue())
		Expect(err.Error()).To(ContainSubstring("response headers"))
	})

	It("does not send again a request whose reply timed out on a kept connection", func(ctx SpecContext) {
		var calls atomic.Int32
		release := make(chan struct{})
		srv, _ := countingServer(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) > 1 {
				<-release
			}
			_, _ = io.WriteString(w, "ok")
		})
		DeferCleanup(func() { close(release) }) // before the server's Close, which waits for handlers
		resp, err := post(ctx, t, srv.URL, "{}")
		Expect(err).NotTo(HaveOccurred())
		Expect(readAll(resp)).To(Equal("ok"))
		t.ResponseHeaderTimeout = 50 * time.Millisecond
		_, err = post(ctx, t, srv.URL, "{}")
		Expect(err).To(HaveOccurred())
		Consistently(calls.Load, 200*time.Millisecond).Should(BeEquivalentTo(2))
	})

	DescribeTable("hands what it does not serve to the fallback",
		func(ctx SpecContext, mk func() *http.Request) {
			rec := &recorder{}
			t.Fallback = rec
			resp, err := t.RoundTrip(mk())
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.StatusCode).To(Equal(299))
			Expect(rec.got).To(HaveLen(1))
		},
		Entry("https", func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1:1/v1", strings.NewReader("{}"))
			return r
		}),
		Entry("a body of unknown length", func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/v1", io.MultiReader(strings.NewReader("{}")))
			return r
		}),
		Entry("a header value that would split the request", func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/v1", strings.NewReader("{}"))
			r.Header["X-Bad"] = []string{"a\r\nX-Injected: 1"}
			return r
		}),
		Entry("Expect: 100-continue", func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/v1", strings.NewReader("{}"))
			r.Header.Set("Expect", "100-continue")
			return r
		}),
	)

	It("serves many concurrent callers over its pool without mixing their replies", func(ctx SpecContext) {
		srv, conns := countingServer(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) })
		errs := make(chan error, 32)
		for i := range 32 {
			go func() {
				for j := range 50 {
					want := fmt.Sprintf(`{"caller":%d,"call":%d}`, i, j)
					resp, err := post(ctx, t, srv.URL, want)
					if err == nil {
						var got string
						got, err = readAll(resp)
						if err == nil && got != want {
							err = fmt.Errorf("got %q, want %q", got, want)
						}
					}
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range 32 {
			Expect(<-errs).NotTo(HaveOccurred())
		}
		Expect(conns.Load()).To(BeNumerically("<=", 32))
	})
})
