package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
)

// syncBuffer is a bytes.Buffer safe for the command's writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runProxyBriefly runs `capbench proxy args...` until it has printed its
// address, then stops it; it returns stdout and stderr.
func runProxyBriefly(ctx context.Context, args ...string) (string, string) {
	var out, errOut syncBuffer
	root := newRootCmd()
	root.SetArgs(append([]string{"proxy"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(cctx) }()
	Eventually(func() string { return out.String() }).WithTimeout(10 * time.Second).Should(ContainSubstring("capture proxy at"))
	// The warning follows the address line.
	time.Sleep(50 * time.Millisecond)
	cancel()
	Eventually(done).WithTimeout(10 * time.Second).Should(Receive(BeNil()))
	return out.String(), errOut.String()
}

var _ = Describe("capbench proxy", func() {
	It("warns at startup without --model, naming the model the engine serves", func(ctx SpecContext) {
		f, err := vllm.New(vllm.Options{ServedModelNames: []string{"policy-7b"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Start(ctx)).To(Succeed())
		DeferCleanup(f.Close)
		_, stderr := runProxyBriefly(ctx, "--upstream", f.URL(), "--log-level", "error")
		Expect(stderr).To(ContainSubstring("--model is not set"))
		Expect(stderr).To(ContainSubstring("claude-*"))
		Expect(stderr).To(ContainSubstring("--model policy-7b"))
	})

	It("does not warn with --model", func(ctx SpecContext) {
		_, stderr := runProxyBriefly(ctx, "--upstream", "http://127.0.0.1:9", "--model", "policy", "--log-level", "error")
		Expect(stderr).NotTo(ContainSubstring("--model is not set"))
	})

	It("still warns when the engine is not up yet, with a placeholder", func() {
		Expect(modelWarning(nil)).To(ContainSubstring("--model <served model name>"))
		Expect(strings.Count(modelWarning([]string{"a", "b"}), "a, b")).To(Equal(1))
	})
})

var _ = Describe("capbench proxy --buffered-streams", func() {
	It("is a documented flag", func(ctx SpecContext) {
		out, err := capbench(ctx, "proxy", "--help")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("--buffered-streams"))
		Expect(out).To(ContainSubstring("NeMo Gym"))
	})
})

var _ = Describe("capbench proxy's startup checks", func() {
	DescribeTable("reject a bad flag value before listening, naming the flag",
		func(ctx SpecContext, args []string, want string) {
			_, err := capbench(ctx, append([]string{"proxy"}, args...)...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("no upstream", []string{}, "--upstream is required"),
		Entry("upstream ending in /v1", []string{"--upstream", "http://127.0.0.1:8000/v1"},
			`--upstream "http://127.0.0.1:8000/v1" ends in /v1: drop the /v1 (use "http://127.0.0.1:8000")`),
		Entry("upstream ending in /v1/", []string{"--upstream", "http://127.0.0.1:8000/v1/"}, `ends in /v1: drop the /v1 (use "http://127.0.0.1:8000")`),
		Entry("upstream under a path, ending in /v1", []string{"--upstream", "https://gw.example/vllm/v1"}, `(use "https://gw.example/vllm")`),
		Entry("upstream without a scheme", []string{"--upstream", "127.0.0.1:8000"}, `--upstream "127.0.0.1:8000" is not an http(s) URL`),
		Entry("port out of range", []string{"--upstream", "http://127.0.0.1:1", "--port", "70000"}, "--port 70000 is out of range"),
		Entry("negative body limit", []string{"--upstream", "http://127.0.0.1:1", "--max-body-bytes", "-1"}, "--max-body-bytes -1 is negative"),
		Entry("negative upstream timeout", []string{"--upstream", "http://127.0.0.1:1", "--upstream-timeout", "-5s"}, "--upstream-timeout -5s is negative"),
		Entry("a host that does not resolve", []string{"--upstream", "http://127.0.0.1:1", "--host", "999.1.1.1"}, "--host 999.1.1.1 --port 0: "),
		Entry("negative admission wait", []string{"--upstream", "http://127.0.0.1:1", "--admission-wait", "-1ms"}, "--admission-wait -1ms is negative"),
		Entry("negative scheduler threads", []string{"--upstream", "http://127.0.0.1:1", "--gomaxprocs", "-1"}, "--gomaxprocs -1: must be 0 to 1024"),
		Entry("scheduler threads past the bound", []string{"--upstream", "http://127.0.0.1:1", "--gomaxprocs", "100000"}, "--gomaxprocs 100000: must be 0 to 1024"),
	)

	It("refuses a --gomaxprocs out of range before creating the capture directory", func(ctx SpecContext) {
		dir := filepath.Join(GinkgoT().TempDir(), "capture")
		_, err := capbench(ctx, "proxy", "--upstream", "http://127.0.0.1:1", "--capture-dir", dir, "--gomaxprocs", "-2")
		Expect(err).To(MatchError(ContainSubstring("--gomaxprocs -2: must be 0 to 1024")))
		Expect(dir).NotTo(BeAnExistingFile())
	})

	DescribeTable("choose the scheduler's thread count",
		func(flag int, envSet, groupSync bool, want int) {
			Expect(proxyProcs(flag, envSet, groupSync, 2)).To(Equal(want))
		},
		Entry("the file store's group sync doubles Go's default", 0, false, true, 4),
		Entry("any other store keeps it", 0, false, false, 2),
		Entry("GOMAXPROCS in the environment wins over the doubling", 0, true, true, 2),
		Entry("--gomaxprocs wins over everything", 3, true, true, 3),
		Entry("--gomaxprocs applies without a store too", 5, false, false, 5),
	)

	DescribeTable("check each --sampling-override value against its key",
		func(pair, want string) {
			_, err := parseSamplingOverrides([]string{pair})
			Expect(err).To(MatchError(ContainSubstring(want)))
			Expect(err.Error()).To(HavePrefix("--sampling-override "))
		},
		Entry("not a number", "temperature=abc", "temperature must be a number >= 0"),
		Entry("a quoted number", `temperature="0.6"`, "temperature must be a number >= 0"),
		Entry("negative temperature", "temperature=-0.1", "temperature must be a number >= 0"),
		Entry("negative top_p", "top_p=-0.5", "top_p must be a number in (0, 1]"),
		Entry("zero top_p", "top_p=0", "top_p must be a number in (0, 1]"),
		Entry("top_p above 1", "top_p=1.5", "top_p must be a number in (0, 1]"),
		Entry("fractional top_k", "top_k=2.5", "top_k must be an integer"),
		Entry("top_k below -1", "top_k=-2", "top_k must be an integer"),
		Entry("max_tokens zero", "max_tokens=0", "max_tokens must be an integer >= 1"),
		Entry("max_tokens as text", "max_tokens=lots", "max_tokens must be an integer >= 1"),
		Entry("penalty out of range", "presence_penalty=3", "presence_penalty must be a number in [-2, 2]"),
		Entry("stop list of numbers", "stop=[1,2]", "stop must be a string or a JSON array of strings"),
		Entry("template kwargs not an object", "chat_template_kwargs=true", "chat_template_kwargs must be a JSON object"),
		Entry("no =", "temperature", "want KEY=VALUE"),
		Entry("empty key", "=0.6", "want KEY=VALUE"),
		Entry("key with spaces", "top p=0.9", `"top p" is not a sampling parameter name`),
		Entry("key in JSON syntax", `{"top_p":0.9}=1`, "is not a sampling parameter name"),
		Entry("a typo", "temprature=0.6", `unknown sampling parameter "temprature"; did you mean "temperature"?`),
		Entry("a capture field", "stream=false", "stream is set by the capture path"),
		Entry("a capture field", "logprobs=false", "logprobs is set by the capture path"),
	)

	It("rejects a key given twice", func() {
		_, err := parseSamplingOverrides([]string{"temperature=0.6", "temperature=1"})
		Expect(err).To(MatchError(ContainSubstring("temperature is given twice")))
	})

	It("accepts valid values, JSON-typed, and bare strings for string keys", func() {
		got, err := parseSamplingOverrides([]string{"temperature=0.6", "top_p=1", "top_k=-1", "max_tokens=4096", "stop=END", `chat_template_kwargs={"enable_thinking":false}`})
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(map[string]any{"temperature": 0.6, "top_p": 1.0, "top_k": -1.0, "max_tokens": 4096.0, "stop": "END",
			"chat_template_kwargs": map[string]any{"enable_thinking": false}}))
	})

	It("warns at startup that nothing is captured without --capture-dir or --store", func(ctx SpecContext) {
		_, stderr := runProxyBriefly(ctx, "--upstream", "http://127.0.0.1:9", "--model", "policy", "--log-level", "error")
		Expect(stderr).To(ContainSubstring("neither --capture-dir nor --store is set, so nothing is captured"))
		Expect(stderr).To(ContainSubstring("no token record written"))
	})

	It("does not warn about capture with --capture-dir", func(ctx SpecContext) {
		_, stderr := runProxyBriefly(ctx, "--upstream", "http://127.0.0.1:9", "--model", "policy", "--log-level", "error",
			"--capture-dir", GinkgoT().TempDir())
		Expect(stderr).NotTo(ContainSubstring("nothing is captured"))
	})

	DescribeTable("runs the scheduler with twice Go's threads only for the file store's group sync, and restores them",
		func(ctx SpecContext, store bool, extra []string, factor int) {
			if gomaxprocsFromEnv() {
				Skip("GOMAXPROCS is set in the environment, which the proxy keeps")
			}
			before := runtime.GOMAXPROCS(0)
			args := append([]string{"--upstream", "http://127.0.0.1:9", "--model", "policy", "--log-level", "debug"}, extra...)
			if store {
				args = append(args, "--capture-dir", GinkgoT().TempDir())
			}
			_, stderr := runProxyBriefly(ctx, args...)
			Expect(stderr).To(ContainSubstring(fmt.Sprintf("gomaxprocs=%d", factor*before)))
			Expect(runtime.GOMAXPROCS(0)).To(Equal(before))
		},
		Entry("--capture-dir, group sync", true, nil, 2),
		Entry("--capture-dir --sync file", true, []string{"--sync", "file"}, 1),
		Entry("no store", false, nil, 1),
	)
})

var _ = Describe("capbench proxy on a taken port", func() {
	It("fails at startup naming --port", func(ctx SpecContext) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(ln.Close)
		port := ln.Addr().(*net.TCPAddr).Port
		_, err = capbench(ctx, "proxy", "--upstream", "http://127.0.0.1:1", "--port", strconv.Itoa(port), "--capture-dir", GinkgoT().TempDir())
		Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf("--host 127.0.0.1 --port %d: ", port))))
		Expect(err).To(MatchError(ContainSubstring("address already in use")))
	})
})
