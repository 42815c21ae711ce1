package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
)

// rawRequest writes head (and body) on a fresh connection and reads one
// reply, failing after d.
func rawRequest(addr, head string, d time.Duration) (*http.Response, []byte, error) {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, head); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return u.Host
}

var _ = Describe("the proxy's guard", func() {
	var (
		up *stubVLLM
		st testStore
	)
	BeforeEach(func() {
		up = newStubVLLM()
		DeferCleanup(up.Close)
		st = store.NewMemoryStore()
	})

	Context("routing on the decoded path", func() {
		DescribeTable("never forwards a path holding an encoded '?', '#' or a control character",
			func(ctx SpecContext, rawPath string) {
				p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) {
					o.SamplingOverrides = map[string]any{"temperature": 0.25}
					o.Model = "pinned"
				})
				resp, body, err := rawRequest(hostOf(p.URL()), "POST "+rawPath+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
					fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(hiBody))+hiBody, 5*time.Second)
				Expect(err).NotTo(HaveOccurred())
				Expect(resp.StatusCode).To(Equal(404), string(body))
				Expect(string(body)).To(ContainSubstring(`"code":404`))
				Expect(up.generations()).To(BeEmpty(), "the engine was called past --sampling-override and --model")
			},
			Entry("%3F", "/v1/chat/completions%3Fx=1"),
			Entry("%23", "/v1/chat/completions%23frag"),
			Entry("%3F under a rollout prefix", "/ng-rollout/r1/training-token-capture/v1/chat/completions%3Fx=1"),
			Entry("CRLF", "/v1/chat%0D%0Acompletions"),
			Entry("NUL", "/v1/chat/completions%00"),
		)
	})

	Context("forwarding", func() {
		It("relays only vLLM's API surface, never a fake's control routes", func(ctx SpecContext) {
			p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.UpstreamAPIKey = "upstream-secret" })
			for _, c := range []struct {
				method, path string
				status       int
			}{
				{"GET", "/fake/ledger", 404},
				{"PUT", "/fake/scripts", 404},
				{"GET", "/v1/../fake/ledger", 404},
				{"POST", "/v1/load_lora_adapter", 404},
				{"POST", "/invocations", 404},
				{"POST", "/version", 405},
			} {
				r := do(ctx, c.method, p.URL()+c.path, []byte(`{}`), nil)
				Expect(r.Status).To(Equal(c.status), c.method+" "+c.path+": "+string(r.Body))
			}
			for _, rq := range up.requests() {
				Expect(rq.Path).NotTo(HavePrefix("/fake"))
				Expect(rq.Path).NotTo(ContainSubstring("lora"))
			}
			Expect(up.requests()).To(BeEmpty())

			r := do(ctx, "POST", p.URL()+"/tokenize", []byte(`{"prompt":"x"}`), nil)
			Expect(r.Status).To(Equal(200), string(r.Body))
			r = do(ctx, "GET", p.URL()+"/v1/responses/resp_abc123", nil, nil)
			Expect(r.Status).To(Equal(404)) // the stub's own 404: it was forwarded
			Expect(up.requests()).To(HaveLen(2))
		})
	})

	Context("credentials", func() {
		DescribeTable("reads the Bearer scheme case-insensitively (RFC 9110)",
			func(ctx SpecContext, header string, want int) {
				p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.APIKey = "sekrit" })
				r := do(ctx, "POST", p.URL()+"/v1/chat/completions", chatBodyFor("q"), map[string]string{"Authorization": header})
				Expect(r.Status).To(Equal(want), string(r.Body))
			},
			Entry("bearer", "bearer sekrit", 200),
			Entry("BEARER with two spaces", "BEARER  sekrit", 200),
			Entry("Bearer", "Bearer sekrit", 200),
			Entry("another scheme", "Basic sekrit", 401),
			Entry("no token", "Bearer ", 401),
		)

		It("mints rollout tokens as docs/proxy-security.md writes them", func() {
			// hmac.new(b"trainer-secret", b"capbench rollout token v1\x00" + b"rollout-7", sha256).hexdigest()
			Expect(proxy.RolloutToken("trainer-secret", "rollout-7")).To(Equal("6d13860a6c9ef7593bb79f2017d77dae26262eec36ec9e6054ac9e1cbc0cd1f3"))
		})

		Context("with a rollout secret", func() {
			var p *proxy.Proxy
			const capPath = "/ng-rollout/r1/training-token-capture/v1/chat/completions"
			BeforeEach(func() {
				p = startProxy(context.Background(), up.URL(), st, func(o *proxy.Options) { o.RolloutSecret = "trainer-secret" })
			})
			DescribeTable("checks the rollout's token on every call",
				func(ctx SpecContext, hdr map[string]string, want int) {
					r := do(ctx, "POST", p.URL()+capPath, chatBodyFor("q"), hdr)
					Expect(r.Status).To(Equal(want), string(r.Body))
					if want != 200 {
						Expect(string(r.Body)).To(ContainSubstring("rollout token"))
						Expect(up.generations()).To(BeEmpty())
						Expect(entries(ctx, st, "r1")).To(BeEmpty())
						Expect(incomplete(ctx, st, "r1")).To(BeFalse(), "a refused call must not mask the rollout")
						return
					}
					Expect(entries(ctx, st, "r1")).To(HaveLen(1))
					Expect(up.generations()[0].Header.Get(proxy.RolloutTokenHeader)).To(BeEmpty(), "the token went upstream")
				},
				Entry("no token", nil, 401),
				Entry("another rollout's token", map[string]string{proxy.RolloutTokenHeader: proxy.RolloutToken("trainer-secret", "r2")}, 401),
				Entry("a token from another secret", map[string]string{proxy.RolloutTokenHeader: proxy.RolloutToken("other", "r1")}, 401),
				Entry("the token in its header", map[string]string{proxy.RolloutTokenHeader: proxy.RolloutToken("trainer-secret", "r1")}, 200),
				Entry("the token as the Bearer key", map[string]string{"Authorization": "Bearer " + proxy.RolloutToken("trainer-secret", "r1")}, 200),
				Entry("the token as x-api-key", map[string]string{"x-api-key": proxy.RolloutToken("trainer-secret", "r1")}, 200),
			)
			It("leaves unprefixed calls (never recorded) alone", func(ctx SpecContext) {
				r := do(ctx, "POST", p.URL()+"/v1/chat/completions", chatBodyFor("q"), nil)
				Expect(r.Status).To(Equal(200), string(r.Body))
			})
		})
	})

	Context("request bodies", func() {
		DescribeTable("answers a model call without a JSON content type as vLLM does, before any capture work",
			func(ctx SpecContext, path, contentType string, want string) {
				p := startProxy(ctx, up.URL(), st, nil)
				req, err := http.NewRequestWithContext(ctx, "POST", p.URL()+path, strings.NewReader(hiBody))
				Expect(err).NotTo(HaveOccurred())
				if contentType != "" {
					req.Header.Set("Content-Type", contentType)
				}
				resp, err := http.DefaultClient.Do(req)
				Expect(err).NotTo(HaveOccurred())
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				Expect(resp.StatusCode).To(Equal(400))
				Expect(string(b)).To(MatchJSON(want))
				Expect(up.requests()).To(BeEmpty())
				Expect(incomplete(ctx, st, "r1")).To(BeFalse())
			},
			Entry("none", "/ng-rollout/r1/training-token-capture/v1/chat/completions", "",
				`{"error":{"message":"1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed","type":"Bad Request","param":null,"code":400}}`),
			Entry("text/plain", "/v1/completions", "text/plain",
				`{"error":{"message":"1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed","type":"Bad Request","param":null,"code":400}}`),
			Entry("none, Messages", "/ng-rollout/r1/training-token-capture/v1/messages", "",
				`{"type":"error","error":{"type":"invalid_request_error","message":"1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"}}`),
		)
		It("accepts application/json with parameters", func(ctx SpecContext) {
			p := startProxy(ctx, up.URL(), st, nil)
			r := do(ctx, "POST", p.URL()+"/v1/chat/completions", []byte(hiBody), map[string]string{"Content-Type": "application/json; charset=utf-8"})
			Expect(r.Status).To(Equal(200), string(r.Body))
		})

		It("refuses a body over --max-body-bytes from its Content-Length, before reading it, in vLLM's error envelope", func(ctx SpecContext) {
			p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.MaxBodyBytes = 1 << 10 })
			// Headers only: a proxy that waits for the 10 MB never answers.
			resp, body, err := rawRequest(hostOf(p.URL()), "POST /ng-rollout/r1/training-token-capture/v1/chat/completions HTTP/1.1\r\n"+
				"Host: x\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n", 3*time.Second)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.StatusCode).To(Equal(413))
			Expect(string(body)).To(MatchJSON(`{"error":{"message":"request body of 10000000 bytes exceeds the proxy's limit of 1024 bytes (--max-body-bytes)",` +
				`"type":"Request Entity Too Large","param":null,"code":413}}`))
			Expect(incomplete(ctx, st, "r1")).To(BeFalse())
		})

		It("queues bodies over the in-flight budget, then answers 503 with Retry-After", func(ctx SpecContext) {
			p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) {
				o.MaxBodyBytes = 1000
				o.Limits.MaxInflightBodyBytes = 1000
				o.Limits.AdmissionWait = 300 * time.Millisecond
			})
			// A slow sender holds 900 bytes of the budget while its body trickles in.
			c, err := net.Dial("tcp", hostOf(p.URL()))
			Expect(err).NotTo(HaveOccurred())
			defer c.Close()
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"%s"}]}`, strings.Repeat("a", 900-len(hiBody)+2))
			Expect(body).To(HaveLen(900))
			_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
				"Content-Length: 900\r\n\r\n"+body[:100])
			Expect(err).NotTo(HaveOccurred())
			time.Sleep(100 * time.Millisecond)

			start := time.Now()
			r := do(ctx, "POST", p.URL()+"/v1/chat/completions", chatBodyFor(strings.Repeat("b", 200)), nil)
			Expect(r.Status).To(Equal(503), string(r.Body))
			Expect(time.Since(start)).To(BeNumerically(">=", 250*time.Millisecond), "it did not queue")
			Expect(r.Header.Get("Retry-After")).NotTo(BeEmpty())
			Expect(string(r.Body)).To(ContainSubstring("--max-inflight-body-bytes"))

			// Once the slow body is in, the budget is free again.
			_, err = io.WriteString(c, body[100:])
			Expect(err).NotTo(HaveOccurred())
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.StatusCode).To(Equal(200))
			r = do(ctx, "POST", p.URL()+"/v1/chat/completions", chatBodyFor(strings.Repeat("b", 200)), nil)
			Expect(r.Status).To(Equal(200), string(r.Body))
		})

		It("ends a body that stalls, with an error naming --read-body-timeout", func(ctx SpecContext) {
			p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.Limits.ReadBodyTimeout = 300 * time.Millisecond })
			start := time.Now()
			resp, body, err := rawRequest(hostOf(p.URL()), "POST /ng-rollout/r1/training-token-capture/v1/chat/completions HTTP/1.1\r\n"+
				"Host: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"messages\":", 5*time.Second)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.StatusCode).To(Equal(400))
			Expect(string(body)).To(ContainSubstring("--read-body-timeout"))
			Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second))
			Expect(up.generations()).To(BeEmpty())
		})
	})

	Context("connections", func() {
		DescribeTable("caps connections at half the descriptors by default",
			func(nofile uint64, want int) { Expect(proxy.DefaultMaxConnectionsFor(nofile)).To(Equal(want)) },
			Entry("unknown", uint64(0), proxy.DefaultMaxConnections),
			Entry("1024", uint64(1024), 512),
			Entry("825", uint64(825), 412),
			Entry("tiny", uint64(10), 16),
			Entry("a million", uint64(1<<20), proxy.DefaultMaxConnections),
		)

		It("closes a connection that does not finish its headers within --read-header-timeout", func(ctx SpecContext) {
			p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.Limits.ReadHeaderTimeout = 200 * time.Millisecond })
			c, err := net.Dial("tcp", hostOf(p.URL()))
			Expect(err).NotTo(HaveOccurred())
			defer c.Close()
			_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			_, err = io.ReadAll(c)
			Expect(err).NotTo(HaveOccurred(), "the proxy kept the half-sent request open")
		})

		It("does not let a flood of idle keep-alive connections lock out a real caller", func(ctx SpecContext) {
			p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) { o.Limits.MaxConnections = 8 })
			var idle []net.Conn
			defer func() {
				for _, c := range idle {
					c.Close()
				}
			}()
			for range 8 {
				c, err := net.Dial("tcp", hostOf(p.URL()))
				Expect(err).NotTo(HaveOccurred())
				idle = append(idle, c)
				_, err = io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
				Expect(err).NotTo(HaveOccurred())
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				Expect(err).NotTo(HaveOccurred())
				resp.Body.Close()
			}
			resp, body, err := rawRequest(hostOf(p.URL()), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
				fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(hiBody))+hiBody, 3*time.Second)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.StatusCode).To(Equal(200), string(body))
		})

		It("holds no more connections than --max-connections", func(ctx SpecContext) {
			p := startProxy(ctx, up.URL(), st, func(o *proxy.Options) {
				o.Limits.MaxConnections = 4
				o.Limits.ReadHeaderTimeout = 400 * time.Millisecond
			})
			// Silent connections: none is idle, so a fifth waits until the
			// header timeout ends one.
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range 4 {
				c, err := net.Dial("tcp", hostOf(p.URL()))
				Expect(err).NotTo(HaveOccurred())
				conns = append(conns, c)
			}
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			r := do(ctx, "GET", p.URL()+"/health", nil, nil)
			Expect(r.Status).To(Equal(200))
			Expect(time.Since(start)).To(BeNumerically(">=", 250*time.Millisecond), "a fifth connection was served at once")
		})
	})

	Context("the upstream", func() {
		It("gives up after --upstream-timeout with a 504 that names it", func(ctx SpecContext) {
			slow := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-time.After(5 * time.Second):
				case <-r.Context().Done():
				}
			})}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			Expect(err).NotTo(HaveOccurred())
			go func() { _ = slow.Serve(ln) }()
			DeferCleanup(slow.Close)
			p := startProxy(ctx, "http://"+ln.Addr().String(), st, func(o *proxy.Options) { o.Limits.UpstreamTimeout = 200 * time.Millisecond })
			r := do(ctx, "POST", p.URL()+"/ng-rollout/r1/training-token-capture/v1/chat/completions", chatBodyFor("q"), nil)
			Expect(r.Status).To(Equal(504), string(r.Body))
			Expect(string(r.Body)).To(ContainSubstring("--upstream-timeout"))
			Expect(string(r.Body)).NotTo(ContainSubstring(ln.Addr().String()))
			Expect(incomplete(ctx, st, "r1")).To(BeTrue())
		})

		It("never shows the upstream URL in an error", func(ctx SpecContext) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			Expect(err).NotTo(HaveOccurred())
			dead := ln.Addr().String()
			Expect(ln.Close()).To(Succeed())
			p := startProxy(ctx, "http://"+dead, st, nil)
			for _, path := range []string{"/v1/chat/completions", "/ng-rollout/r1/training-token-capture/v1/chat/completions", "/tokenize", "/v1/models"} {
				r := do(ctx, "POST", p.URL()+path, chatBodyFor("q"), nil)
				if path == "/v1/models" {
					r = do(ctx, "GET", p.URL()+path, nil, nil)
				}
				Expect(r.Status).To(Equal(502), path)
				Expect(string(r.Body)).NotTo(ContainSubstring(dead), path)
				Expect(string(r.Body)).To(ContainSubstring("<upstream>"), path)
			}
		})
	})

	It("never shows the capture directory in an error", func(ctx SpecContext) {
		dir := filepath.Join(GinkgoT().TempDir(), "captures")
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		// The directory turns into a file: every write fails with its path.
		Expect(os.RemoveAll(dir)).To(Succeed())
		Expect(os.WriteFile(dir, nil, 0o600)).To(Succeed())
		p := startProxy(ctx, up.URL(), fs, nil)
		r := do(ctx, "POST", p.URL()+"/ng-rollout/r1/training-token-capture/v1/chat/completions", chatBodyFor("q"), nil)
		Expect(r.Status).To(BeNumerically(">=", 400), string(r.Body))
		Expect(string(r.Body)).NotTo(ContainSubstring(dir))
	})
})

// hiBody is a minimal chat request.
const hiBody = `{"messages":[{"role":"user","content":"hi"}]}`

// chatBodyFor is a one-message chat request.
func chatBodyFor(text string) []byte {
	return mustJSON(map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": text}}})
}
