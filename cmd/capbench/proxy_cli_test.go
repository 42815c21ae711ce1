package main

import (
	"bytes"
	"context"
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
