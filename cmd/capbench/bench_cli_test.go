package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
)

var _ = Describe("capbench bench, report and compare", func() {
	quick := []string{"bench", "--requests", "16", "--concurrency", "4", "--progress", "off", "--time-scale", "0.05"}

	It("runs the embedded default, writes the result and its samples, and renders them again", func(ctx SpecContext) {
		out := GinkgoT().TempDir()
		stdout, err := capbench(ctx, append(quick, "--out", out, "--slo", "ttft=2s,tpot=50ms", "--junit", filepath.Join(out, "gates.xml"))...)
		Expect(err).NotTo(HaveOccurred())
		Expect(stdout).To(ContainSubstring("capture overhead c=4: 16 pairs"))
		Expect(stdout).To(ContainSubstring("fidelity (ledger) 16/16 exact"))
		res, err := bench.ReadResult(filepath.Join(out, "result.json"))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Samples).To(HaveLen(32))
		Expect(res.Interrupted).To(BeFalse())

		html := filepath.Join(out, "report.html")
		stdout, err = capbench(ctx, "report", out, "--html", html, "--md", filepath.Join(out, "report.md"))
		Expect(err).NotTo(HaveOccurred())
		Expect(stdout).To(ContainSubstring("E2EL ms p50/p99"))
		Expect(html).To(BeAnExistingFile())

		By("comparing the run with itself: no regression")
		stdout, err = capbench(ctx, "compare", filepath.Join(out, "result.json"), filepath.Join(out, "result.json"))
		Expect(err).NotTo(HaveOccurred())
		Expect(stdout).To(ContainSubstring("0 regression(s)"))
	}, SpecTimeout(2*time.Minute))

	It("fails compare on a 20% slower copy and refuses a different configuration", func(ctx SpecContext) {
		base := GinkgoT().TempDir()
		_, err := capbench(ctx, append(quick, "--out", base)...)
		Expect(err).NotTo(HaveOccurred())
		res, err := bench.ReadResult(filepath.Join(base, "result.json"))
		Expect(err).NotTo(HaveOccurred())
		for i := range res.Samples {
			s := &res.Samples[i]
			s.EndNS = s.StartNS + s.E2ELNS()*12/10
			if s.FirstTokenNS > 0 {
				s.FirstTokenNS = s.StartNS + s.TTFTNS()*12/10
			}
			for j := range s.ChunkGapsUS {
				s.ChunkGapsUS[j] = s.ChunkGapsUS[j] * 12 / 10
			}
		}
		slower := GinkgoT().TempDir()
		_, err = bench.WriteResult(slower, res)
		Expect(err).NotTo(HaveOccurred())
		stdout, err := capbench(ctx, "compare", filepath.Join(base, "result.json"), filepath.Join(slower, "result.json"))
		Expect(err).To(MatchError(ContainSubstring("regression(s) beyond noise")))
		Expect(stdout).To(ContainSubstring("**regression**"))

		res.Config.Requests = 17
		other := GinkgoT().TempDir()
		_, err = bench.WriteResult(other, res)
		Expect(err).NotTo(HaveOccurred())
		_, err = capbench(ctx, "compare", filepath.Join(base, "result.json"), filepath.Join(other, "result.json"))
		Expect(err).To(MatchError(bench.ErrNotComparable))
	}, SpecTimeout(2*time.Minute))

	It("says an interrupted run was interrupted and still writes what it has", func(ctx SpecContext) {
		out := GinkgoT().TempDir()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second) // long enough for the stack to start on a loaded machine
		defer cancel()
		stdout, err := capbench(cctx, "bench", "--duration", "1m", "--requests", "0", "--concurrency", "2", "--progress", "off", "--out", out)
		Expect(err).To(MatchError(ContainSubstring("interrupted")))
		Expect(stdout).To(ContainSubstring("INTERRUPTED"))
		raw, err := os.ReadFile(filepath.Join(out, "result.json"))
		Expect(err).NotTo(HaveOccurred())
		var r map[string]any
		Expect(json.Unmarshal(raw, &r)).To(Succeed())
		Expect(r).To(HaveKeyWithValue("interrupted", true))
		Expect(r["sample_count"]).To(BeNumerically(">", 0))
	}, SpecTimeout(time.Minute))

	It("exits non-zero when every request fails", func(ctx SpecContext) {
		_, err := capbench(ctx, "bench", "--url", "http://127.0.0.1:1", "--requests", "3", "--concurrency", "1", "--progress", "off", "--metrics-url", "off")
		Expect(err).To(MatchError(ContainSubstring("every request failed")))
	})

	DescribeTable("refuses bad flags with the flag's name",
		func(ctx SpecContext, args []string, part string) {
			_, err := capbench(ctx, append([]string{"bench", "--progress", "off"}, args...)...)
			Expect(err).To(MatchError(ContainSubstring(part)))
		},
		Entry("a proxy without its capture dir", []string{"--proxy-url", "http://127.0.0.1:1"}, "--capture-dir"),
		Entry("an unknown arrival", []string{"--arrival", "bursty"}, "--arrival"),
		Entry("an open loop without a rate", []string{"--arrival", "poisson"}, "--rate"),
		Entry("a bad SLO", []string{"--slo", "ttft=fast"}, "--slo"),
		Entry("a bad length distribution", []string{"--prompt-tokens", "uniform:9-1"}, "--prompt-tokens"),
		Entry("a field the workload owns", []string{"--body-field", "max_tokens=5", "--requests", "1"}, "--body-field max_tokens"),
		Entry("a GPU too small for the model", []string{"--gpu-memory", "8GiB"}, "would not start"),
		Entry("an unknown workload", []string{"--workload", "trace"}, "--workload"),
		Entry("replay without a directory", []string{"--workload", "replay"}, "--replay DIR"),
		Entry("replay of an empty directory", []string{"--replay", "/nonexistent-capture-dir"}, "not a capture directory"),
		Entry("an unknown path", []string{"--paths", "sideways", "--requests", "1"}, "--paths"),
		Entry("buffered streams on a running server", []string{"--url", "http://127.0.0.1:1", "--buffered-streams"}, "--buffered-streams applies to the embedded stack only"),
		Entry("a bad sweep", []string{"--sweep", "users=1,2"}, "--sweep"),
	)

	It("explains a missing result file", func(ctx SpecContext) {
		_, err := capbench(ctx, "report", filepath.Join(GinkgoT().TempDir(), "nope.json"))
		Expect(err).To(MatchError(ContainSubstring("capbench bench --out DIR")))
	})
})
