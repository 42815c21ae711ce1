package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store/natsstore"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/internal/natstest"
	"github.com/capbench/capbench/scenarios"
)

// cliHelperEnv makes the test binary act as the capbench CLI with the JSON
// array of arguments it holds: how specs run a proxy as a separate process
// they can kill, without building the binary.
const cliHelperEnv = "CAPBENCH_TEST_CLI_ARGS"

func init() {
	raw := os.Getenv(cliHelperEnv)
	if raw == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, "capbench test helper:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "capbench:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// proxyProcess runs `capbench proxy` as a separate process.
type proxyProcess struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProxyProcess(upstream string, storeArgs ...string) *proxyProcess {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	port := ln.Addr().(*net.TCPAddr).Port
	Expect(ln.Close()).To(Succeed())
	args, err := json.Marshal(append([]string{"proxy", "--upstream", upstream, "--port", strconv.Itoa(port), "--log-level", "warn"}, storeArgs...))
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), cliHelperEnv+"="+string(args))
	cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	p := &proxyProcess{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	DeferCleanup(p.kill)
	Eventually(func() error {
		resp, err := http.Get(p.url + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}).Should(Succeed())
	return p
}

func (p *proxyProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// slowFake generates 50 tokens 40 ms apart (2 s a call), so a spec can act
// while a call streams.
func slowFake(ctx context.Context) string {
	fake, err := vllm.New(vllm.Options{
		Model: scenarios.DefaultModel, Seed: 1, Host: "127.0.0.1",
		Timing:  vllm.Timing{InterTokenLatency: 40 * time.Millisecond},
		Lengths: vllm.Lengths{Mean: 50, StdDev: 0.001, Min: 50},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(fake.Start(ctx)).To(Succeed())
	DeferCleanup(fake.Close)
	return fake.URL()
}

// tapUpstream puts a pass-through in front of upstream that reports each
// chat generation it forwards: the proxy sends one only after its call
// intent is stored, so a fault injected then hits a call in flight.
func tapUpstream(upstream string) (string, <-chan struct{}) {
	target, err := url.Parse(upstream)
	Expect(err).NotTo(HaveOccurred())
	arrived := make(chan struct{}, 16)
	// A transport of its own, without kept connections: the shared default
	// one is emptied by every httptest server that closes, and a connection
	// picked up as another spec's server shuts down can be closed under a
	// generation in flight.
	rp := passThrough(&http.Transport{DisableKeepAlives: true}, func(*http.Request) *url.URL { return target }, func(r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
	})
	srv := httptest.NewServer(rp)
	DeferCleanup(srv.Close)
	return srv.URL, arrived
}

// once returns f run after the next generation arrives (or 10 s).
func once(arrived <-chan struct{}, f func()) func() {
	return func() {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
		}
		f()
	}
}

// streamChat sends one streamed chat call of the rollout; during, if set,
// runs alongside it (the proxy asks vLLM for the complete reply and stores
// the record before it answers). It returns whether the stream ended with
// [DONE].
func streamChat(ctx context.Context, proxyURL, rollout, question string, during func()) bool {
	body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":%q}]}`, scenarios.DefaultModel, question)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		proxyURL+"/ng-rollout/"+rollout+"/training-token-capture/v1/chat/completions", strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	if during != nil {
		done := make(chan struct{})
		go func() { during(); close(done) }()
		defer func() { <-done }()
	}
	// A client of its own, as tapUpstream's transport: the shared default
	// transport's kept connections are closed by any httptest server that
	// shuts down in this process.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(GinkgoWriter, "stream call: %v\n", err)
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(GinkgoWriter, "status %d: %s\n", resp.StatusCode, b)
		return false
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			return true
		}
	}
	fmt.Fprintf(GinkgoWriter, "stream ended without [DONE]: %v\n", sc.Err())
	return false
}

var _ = Describe("NATS store faults through capture proxy processes", Label("nats", "faults"), Serial, func() {
	var srv *natstest.Server
	BeforeEach(func() {
		if testing.Short() {
			Skip("-short: fault runs take seconds each")
		}
		var err error
		srv, err = natstest.Start(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Stop)
	})

	freeze := func(ctx context.Context, rollout string) (entries int, incomplete bool) {
		o, err := natsstore.ParseURL(srv.URL())
		Expect(err).NotTo(HaveOccurred())
		s, err := natsstore.Open(ctx, o)
		Expect(err).NotTo(HaveOccurred())
		defer s.Close()
		snap, err := s.Freeze(ctx, rollout)
		Expect(err).NotTo(HaveOccurred())
		return len(snap.Entries), snap.Incomplete
	}

	DescribeTable("a proxy killed mid-call leaves the rollout incomplete, and the answered call stored",
		func(ctx SpecContext, kill bool) {
			upstream, arrived := tapUpstream(slowFake(ctx))
			a := startProxyProcess(upstream, "--store", srv.URL())
			b := startProxyProcess(upstream, "--store", srv.URL())
			rollout := fmt.Sprintf("killed-%t", kill)
			Expect(streamChat(ctx, a.url, rollout, "What is the weather in Paris?", nil)).To(BeTrue())
			Eventually(arrived).Should(Receive())
			var during func()
			if kill {
				during = once(arrived, b.kill)
			}
			answered := streamChat(ctx, b.url, rollout, "And in Rome?", during)
			Expect(answered).To(Equal(!kill))
			// The survivor's capture of its own call is not disturbed.
			entries, incomplete := freeze(ctx, rollout)
			if kill {
				Expect(entries).To(Equal(1), "the call answered before the kill is stored")
				Expect(incomplete).To(BeTrue(), "the call begun on the killed proxy has an intent and no record")
			} else {
				Expect(entries).To(Equal(2))
				Expect(incomplete).To(BeFalse())
			}
			out, err := capbench(ctx, "verdict", "--json", "--store", srv.URL())
			Expect(err).NotTo(HaveOccurred())
			var v map[string]any
			Expect(json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &v)).To(Succeed())
			if kill {
				Expect(v).To(HaveKeyWithValue("mask_sample", true))
				Expect(v["metrics"]).To(HaveKeyWithValue("capture_incomplete", true))
			} else {
				Expect(v["metrics"]).NotTo(HaveKey("capture_incomplete"))
			}
		},
		Entry("killed while vLLM generates", SpecTimeout(time.Minute), true),
		Entry("control: not killed", SpecTimeout(time.Minute), false),
	)

	It("marks the rollout incomplete when the store is gone longer than the budget while a call generates", SpecTimeout(time.Minute), func(ctx SpecContext) {
		upstream, arrived := tapUpstream(slowFake(ctx))
		p := startProxyProcess(upstream, "--store", srv.URL()+"?op_timeout=1s")
		rollout := "partitioned"
		Expect(streamChat(ctx, p.url, rollout, "What is the weather in Paris?", nil)).To(BeTrue())
		Eventually(arrived).Should(Receive())
		answered := streamChat(ctx, p.url, rollout, "And in Rome?", once(arrived, srv.Stop))
		Expect(srv.Restart()).To(Succeed())
		entries, incomplete := freeze(ctx, rollout)
		rep := fmt.Sprintf("second call answered %t; stored %d of 2; incomplete %t", answered, entries, incomplete)
		AddReportEntry("nats partition through a proxy", rep)
		fmt.Fprintln(GinkgoWriter, rep)
		Expect(entries).To(Equal(1), "the call before the outage is stored, the one during it is not")
		Expect(incomplete).To(BeTrue(), "a call whose record could not be stored leaves the rollout incomplete")
	})

	It("keeps every answered call through a NATS server restart mid-load", SpecTimeout(2*time.Minute), func(ctx SpecContext) {
		upstream := slowFake(ctx)
		var proxies []*proxyProcess
		for range 3 {
			proxies = append(proxies, startProxyProcess(upstream, "--store", srv.URL()))
		}
		const rollouts, turns = 6, 3
		answered := make([]int, rollouts)
		var wg sync.WaitGroup
		for r := range rollouts {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for t := range turns {
					p := proxies[(r+t)%len(proxies)]
					if streamChat(ctx, p.url, fmt.Sprintf("restart-%d", r), fmt.Sprintf("question %d of rollout %d", t, r), nil) {
						answered[r]++
					}
				}
			}()
		}
		time.Sleep(time.Second) // the first calls are streaming
		srv.Stop()
		time.Sleep(time.Second)
		Expect(srv.Restart()).To(Succeed())
		wg.Wait()
		var calls, stored, incomplete int
		for r := range rollouts {
			entries, inc := freeze(ctx, fmt.Sprintf("restart-%d", r))
			calls += answered[r]
			stored += entries
			if inc {
				incomplete++
			} else {
				Expect(entries).To(Equal(answered[r]), "rollout %d is complete, so every answered call must be stored", r)
			}
		}
		rep := fmt.Sprintf("answered %d of %d calls, stored %d, rollouts incomplete %d of %d", calls, rollouts*turns, stored, incomplete, rollouts)
		AddReportEntry("nats restart through proxies", rep)
		fmt.Fprintln(GinkgoWriter, rep)
	})
})
