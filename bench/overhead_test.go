package bench_test

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
)

var _ = Describe("Overhead", func() {
	DescribeTable("measures direct and proxied calls side by side and checks every proxied call was captured",
		func(ctx SpecContext, stream, onDisk, tokenize bool) {
			cfg := bench.OverheadConfig{Concurrency: 2, Requests: 10, Rounds: 2, MaxTokens: 8, Stream: stream, Tokenize: tokenize}
			if onDisk {
				cfg.CaptureDir = GinkgoT().TempDir()
			}
			r, err := bench.Overhead(ctx, cfg)
			Expect(err).NotTo(HaveOccurred())
			Expect(r.CapturedAll).To(BeTrue())
			Expect(r.Direct).To(HaveLen(2))
			Expect(r.Proxy).To(HaveLen(2))
			for _, p := range r.Proxy {
				Expect(p.Requests).To(Equal(10))
				Expect(p.Tokens).To(BeNumerically(">", 0))
			}
			Expect(r.DirectP50).To(BeNumerically(">", 0))
			Expect(r.ProxyP50).To(BeNumerically(">", 0))
			Expect(r.AddedP50).To(BeNumerically("~", r.ProxyP50-r.DirectP50, 1e-9))
			if onDisk {
				Expect(r.Store).To(Equal("file"))
			} else {
				Expect(r.Store).To(Equal("memory"))
			}
		},
		Entry("non-streaming, memory store", false, false, false),
		Entry("streaming, file store", true, true, false),
		Entry("prompt ids from /tokenize", false, false, true),
	)

	It("refuses a run without rounds or requests", func(ctx SpecContext) {
		_, err := bench.Overhead(ctx, bench.OverheadConfig{Concurrency: 1, Requests: 1})
		Expect(err).To(MatchError(ContainSubstring("Rounds")))
		_, err = bench.Overhead(ctx, bench.OverheadConfig{Concurrency: 1, Rounds: 1})
		Expect(err).To(MatchError(ContainSubstring("Requests")))
	})

	It("refuses a capture directory that already holds files, and leaves them alone", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		old := filepath.Join(dir, "ovh-1.tokens.jsonl")
		Expect(os.WriteFile(old, []byte("earlier run\n"), 0o644)).To(Succeed())
		_, err := bench.Overhead(ctx, bench.OverheadConfig{Concurrency: 1, Requests: 1, Rounds: 1, MaxTokens: 4, CaptureDir: dir})
		Expect(err).To(MatchError(ContainSubstring("not empty")))
		Expect(err).To(MatchError(ContainSubstring(dir)))
		b, err := os.ReadFile(old)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(b)).To(Equal("earlier run\n"))
		entries, err := os.ReadDir(dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(entries).To(HaveLen(1))
	})
})
