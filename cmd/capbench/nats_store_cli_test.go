package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/deploy/k8s"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/internal/natstest"
	"github.com/capbench/capbench/scenarios"
	"github.com/capbench/capbench/scenarios/agent"
)

// startFake runs a fresh fake vLLM with the scenario's server and scripts.
func startFake(ctx context.Context, sc scenarios.Scenario) string {
	fake, err := vllm.New(vllm.Options{
		Model: sc.Server.Model, MaxModelLen: sc.Server.MaxModelLen,
		EnableAutoToolChoice: sc.Server.EnableAutoToolChoice, ToolCallParser: sc.Server.ToolCallParser,
		ReasoningParser: sc.Server.ReasoningParser, ChatTemplateVariant: sc.Server.ChatTemplateVariant,
		Seed: 1, Host: "127.0.0.1",
	})
	Expect(err).NotTo(HaveOccurred())
	for _, s := range sc.Scripts {
		var fs vllm.Script
		b, err := json.Marshal(s)
		Expect(err).NotTo(HaveOccurred())
		Expect(json.Unmarshal(b, &fs)).To(Succeed())
		Expect(fake.SetScript(fs)).To(Succeed())
	}
	Expect(fake.Start(ctx)).To(Succeed())
	DeferCleanup(fake.Close)
	return fake.URL()
}

// startProxyCmd runs `capbench proxy` in-process on a free port until the
// spec ends and returns its URL.
func startProxyCmd(upstream string, storeArgs ...string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	port := ln.Addr().(*net.TCPAddr).Port
	Expect(ln.Close()).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		args := append([]string{"proxy", "--upstream", upstream, "--port", strconv.Itoa(port), "--log-level", "warn"}, storeArgs...)
		_, err := capbench(ctx, args...)
		done <- err
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(done).Should(Receive(BeNil()))
	})
	u := fmt.Sprintf("http://127.0.0.1:%d", port)
	Eventually(func() error {
		resp, err := http.Get(u + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}).Should(Succeed())
	return u
}

// roundRobin is a load balancer in front of several proxies: call i goes to
// proxy i mod n, as calls of one rollout land on any replica behind a
// Kubernetes Service.
func roundRobin(backends []string) (string, []*atomic.Int64) {
	var next atomic.Int64
	counts := make([]*atomic.Int64, len(backends))
	targets := make([]*url.URL, len(backends))
	for i, b := range backends {
		counts[i] = &atomic.Int64{}
		var err error
		targets[i], err = url.Parse(b)
		Expect(err).NotTo(HaveOccurred())
	}
	rp := passThrough(nil, func(r *http.Request) *url.URL {
		i := int(next.Add(1)-1) % len(targets)
		if strings.Contains(r.URL.Path, "/v1/") {
			counts[i].Add(1)
		}
		return targets[i]
	}, nil)
	srv := httptest.NewServer(rp)
	DeferCleanup(srv.Close)
	return srv.URL, counts
}

func capturedCalls(proxyURL string) int {
	resp, err := http.Get(proxyURL + "/metrics")
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "capbench_proxy_captured_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			Expect(err).NotTo(HaveOccurred())
			return int(n)
		}
	}
	return 0
}

// runAgent runs the scenario's agent against base and returns its record.
func runAgent(ctx context.Context, sc scenarios.Scenario, base, rolloutID string) map[string]any {
	res, err := agent.Run(ctx, sc.Agent, agent.Target{BaseURL: base, RolloutID: rolloutID}, sc.Plan)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.Err).NotTo(HaveOccurred())
	return res.Record
}

var _ = Describe("capbench with --store nats://", Label("nats"), func() {
	var natsURL string
	BeforeEach(func() {
		srv, err := natstest.Start(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Stop)
		natsURL = srv.URL()
	})

	DescribeTable("three proxies on one stream give the file store's verdict for the same traffic",
		func(ctx SpecContext, name string, everyProxyCaptures bool) {
			sc, err := scenarios.Lookup(name)
			Expect(err).NotTo(HaveOccurred())
			rollout := "spread-" + strings.ReplaceAll(name, "/", "-")

			By("one proxy in front of the file store")
			dir := GinkgoT().TempDir()
			fileProxy := startProxyCmd(startFake(ctx, sc), "--capture-dir", dir)
			runAgent(ctx, sc, fileProxy, rollout)
			want, err := capbench(ctx, "verdict", "--json", "--capture-dir", dir)
			Expect(err).NotTo(HaveOccurred())
			wantExplain, err := capbench(ctx, "explain", "--capture-dir", dir, rollout)
			Expect(err).NotTo(HaveOccurred())

			By("three proxies behind a round-robin balancer, one NATS stream")
			upstream := startFake(ctx, sc)
			var proxies []string
			for range 3 {
				proxies = append(proxies, startProxyCmd(upstream, "--store", natsURL))
			}
			front, counts := roundRobin(proxies)
			runAgent(ctx, sc, front, rollout)
			capturing := 0
			for i, p := range proxies {
				Expect(counts[i].Load()).To(BeNumerically(">=", 1), "proxy %d served no model call", i)
				if capturedCalls(p) > 0 {
					capturing++
				}
			}
			if everyProxyCaptures {
				Expect(capturing).To(Equal(3), "every proxy captures a call of the rollout")
			} else {
				Expect(capturing).To(BeNumerically(">=", 2), "the records come from more than one proxy")
			}
			got, err := capbench(ctx, "verdict", "--json", "--store", natsURL)
			Expect(err).NotTo(HaveOccurred())
			gotExplain, err := capbench(ctx, "explain", "--store", natsURL, rollout)
			Expect(err).NotTo(HaveOccurred())

			Expect(got).NotTo(BeEmpty())
			Expect(normalizeIDs(got)).To(Equal(normalizeIDs(want)))
			Expect(normalizeIDs(gotExplain)).To(Equal(normalizeIDs(wantExplain)))
		},
		Entry("Claude Code with two tool turns (streamed)", SpecTimeout(time.Minute), "claude-code-hermes-tools", true),
		Entry("a retried middle call", SpecTimeout(time.Minute), "retry-middle-call/stream", true),
		Entry("a compaction that starts a new root", SpecTimeout(time.Minute), "compaction-new-root", true),
		Entry("a call lost upstream after its intent (incomplete)", SpecTimeout(time.Minute), "lost-call", false),
		Entry("a reply without token ids, marked incomplete", SpecTimeout(time.Minute), "no-token-ids", false),
	)

	It("reads a directory named as a file:// store like --capture-dir", func(ctx SpecContext) {
		dir := filepath.Join(copyFixture("gym-consumer/03-retry-middle"), "capture")
		byURL, err := capbench(ctx, "verdict", "--json", "--store", "file://"+dir)
		Expect(err).NotTo(HaveOccurred())
		byDir, err := capbench(ctx, "verdict", "--json", "--capture-dir", dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(byURL).To(ContainSubstring(`"rollout_id":"3-0"`))
		Expect(byURL).To(Equal(byDir))
	})

	DescribeTable("refuses store flags that cannot work, saying what to write",
		func(ctx SpecContext, args []string, want string) {
			_, err := capbench(ctx, args...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("both a directory and a URL", []string{"verdict", "--capture-dir", ".", "--store", "nats://127.0.0.1:1"}, "give one of them"),
		Entry("an unknown scheme", []string{"verdict", "--store", "redis://127.0.0.1:6379"}, `unknown scheme "redis"`),
		Entry("a relative file URL", []string{"verdict", "--store", "file://capture"}, "want file:///absolute/dir"),
		Entry("a bare path", []string{"explain", "--store", "/tmp/capture", "r1"}, "use --capture-dir DIR"),
		Entry("no server there", []string{"verdict", "--store", "nats://127.0.0.1:1"}, "--store nats://127.0.0.1:1"),
		Entry("a misspelt option", []string{"proxy", "--upstream", "http://127.0.0.1:1", "--store", "nats://127.0.0.1:4222?bukcet=x"}, `unknown option "bukcet"`),
	)
})

var _ = Describe("the deploy/k8s manifests", func() {
	It("run capbench containers with arguments this CLI accepts", func() {
		objs, err := k8s.Objects()
		Expect(err).NotTo(HaveOccurred())
		n := 0
		for _, o := range objs {
			p, ok := k8s.PodSpec(o.Obj)
			if !ok {
				continue
			}
			for _, c := range p.Spec.Containers {
				if !strings.HasPrefix(c.Image, "capbench:") {
					continue
				}
				n++
				sub, rest, err := newRootCmd().Find(c.Args)
				Expect(err).NotTo(HaveOccurred(), "%s: %v", o.Name, c.Args)
				Expect(sub.Name()).NotTo(Equal("capbench"), "%s names no subcommand", o.Name)
				Expect(sub.ParseFlags(rest)).To(Succeed(), "%s: %v", o.Name, c.Args)
				Expect(sub.ValidateArgs(sub.Flags().Args())).To(Succeed(), "%s: %v", o.Name, c.Args)
			}
		}
		Expect(n).To(Equal(5))
	})
})

// servedID matches the ids minted at random per call: the fake's item, tool
// call and message ids, and the proxy's model call and snapshot ids (32 hex
// digits). They differ between two runs of one script.
var servedID = regexp.MustCompile(`\b((fc|msg|rs|resp|toolu|chatcmpl-tool|chatcmpl|cmpl)[-_][0-9A-Za-z]{8,}|[0-9a-f]{32})\b`)

// normalizeIDs numbers served ids by first appearance, so two runs compare
// equal exactly when they agree on everything else, including which ids
// repeat where.
func normalizeIDs(s string) string {
	seen := map[string]string{}
	return servedID.ReplaceAllStringFunc(s, func(id string) string {
		if n, ok := seen[id]; ok {
			return n
		}
		seen[id] = fmt.Sprintf("<id%d>", len(seen))
		return seen[id]
	})
}
