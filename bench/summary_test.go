package bench_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
)

const ms = int64(time.Millisecond)

var _ = Describe("Summarize", func() {
	// Two requests with known timings: vLLM's definitions give exact values.
	samples := func() []bench.Sample {
		return []bench.Sample{
			{Stage: 0, Path: bench.PathTarget, Phase: bench.PhaseMeasure, StartNS: 0, FirstTokenNS: 100 * ms, EndNS: 1100 * ms,
				OutputTokens: 11, PromptTokens: 5, ChunkGapsUS: []int64{100000, 100000}},
			{Stage: 0, Path: bench.PathTarget, Phase: bench.PhaseMeasure, StartNS: 1000 * ms, FirstTokenNS: 4000 * ms, EndNS: 5000 * ms,
				OutputTokens: 3, PromptTokens: 5, ChunkGapsUS: []int64{500000}},
			{Stage: 0, Path: bench.PathTarget, Phase: bench.PhaseMeasure, StartNS: 2000 * ms, EndNS: 2001 * ms,
				ErrorKind: bench.ErrHTTP5xx, Error: "status 503"},
			{Stage: 0, Path: bench.PathTarget, Phase: bench.PhaseWarmup, StartNS: 0, FirstTokenNS: 1, EndNS: 9000 * ms, OutputTokens: 1000},
		}
	}

	It("applies vLLM's metric definitions and counts only measured samples", func() {
		sums := bench.Summarize(samples(), nil, bench.SLO{TTFT: 2 * time.Second, TPOT: 200 * time.Millisecond})
		Expect(sums).To(HaveLen(1))
		s := sums[0]
		Expect(s.Requests).To(Equal(3))
		Expect(s.Completed).To(Equal(2))
		Expect(s.Failed).To(Equal(1))
		Expect(s.ErrorsByKind).To(Equal(map[bench.ErrorKind]int{bench.ErrHTTP5xx: 1}))
		Expect(s.FirstError).To(Equal("status 503"))
		Expect(s.Excluded).To(Equal(map[bench.Phase]int{bench.PhaseWarmup: 1}))
		Expect(s.TTFT.Count).To(Equal(2))
		Expect(s.TTFT.Min).To(BeNumerically("~", 100, 0.1))
		Expect(s.TTFT.Max).To(BeNumerically("~", 3000, 3))
		// TPOT = (E2EL - TTFT) / (N - 1): 1000/10 = 100 ms and 1000/2 = 500 ms.
		Expect(s.TPOT.Min).To(BeNumerically("~", 100, 0.1))
		Expect(s.TPOT.Max).To(BeNumerically("~", 500, 0.5))
		// ITL pools every chunk gap of every request.
		Expect(s.ITL.Count).To(Equal(3))
		Expect(s.E2EL.Mean).To(BeNumerically("~", 2550, 3))
		// Throughput window: first to last measured start (0 to 2 s); only
		// the first request finishes inside it.
		Expect(s.DurationS).To(BeNumerically("~", 2, 0.001))
		Expect(s.OutputThroughput).To(BeNumerically("~", 11.0/2, 0.001))
		Expect(s.RequestThroughput).To(BeNumerically("~", 1.0/2, 0.001))
		Expect(s.TotalTokenThroughput).To(BeNumerically("~", 16.0/2, 0.001))
		// Goodput: only the first request meets TTFT <= 2 s and TPOT <= 200 ms.
		Expect(s.GoodRequests).To(Equal(1))
		Expect(s.Goodput).To(BeNumerically("~", 0.5, 0.001))
	})

	It("keeps goodput off without an SLO", func() {
		s := bench.Summarize(samples(), nil, bench.SLO{})[0]
		Expect(s.GoodRequests).To(BeZero())
		Expect(s.Goodput).To(BeZero())
	})
})

var _ = DescribeTable("ParseSLO",
	func(in string, want bench.SLO, errPart string) {
		got, err := bench.ParseSLO(in)
		if errPart != "" {
			Expect(err).To(MatchError(ContainSubstring(errPart)))
			return
		}
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(want))
	},
	Entry("ttft and tpot", "ttft=2s,tpot=50ms", bench.SLO{TTFT: 2 * time.Second, TPOT: 50 * time.Millisecond}, ""),
	Entry("e2el with spaces", " e2el = 30s ", bench.SLO{E2EL: 30 * time.Second}, ""),
	Entry("empty", "", bench.SLO{}, ""),
	Entry("unknown key", "itl=5ms", bench.SLO{}, `unknown key "itl"`),
	Entry("no unit", "ttft=2", bench.SLO{}, "positive duration"),
	Entry("no value", "ttft", bench.SLO{}, "key=duration"),
)

var _ = DescribeTable("ParseDist",
	func(in string, want bench.Dist, errPart string) {
		got, err := bench.ParseDist("--prompt-tokens", in)
		if errPart != "" {
			Expect(err).To(MatchError(ContainSubstring(errPart)))
			return
		}
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(want))
	},
	Entry("fixed", "256", bench.Dist{Kind: "fixed", A: 256}, ""),
	Entry("uniform", "uniform:100-400", bench.Dist{Kind: "uniform", A: 100, B: 400}, ""),
	Entry("normal", "normal:512,128", bench.Dist{Kind: "normal", A: 512, B: 128}, ""),
	Entry("zero", "0", bench.Dist{}, "--prompt-tokens"),
	Entry("reversed range", "uniform:400-100", bench.Dist{}, "MIN <= MAX"),
	Entry("unknown kind", "zipf:1,2", bench.Dist{}, `unknown distribution "zipf"`),
)

var _ = DescribeTable("ParseSweep",
	func(in string, n int, errPart string) {
		got, err := bench.ParseSweep(in, bench.Shape{Arrival: bench.Closed, Concurrency: 1})
		if errPart != "" {
			Expect(err).To(MatchError(ContainSubstring(errPart)))
			return
		}
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveLen(n))
	},
	Entry("concurrency", "concurrency=1,2,4,8", 4, ""),
	Entry("rate turns the loop open", "rate=5,10", 2, ""),
	Entry("bad value", "concurrency=1,x", 0, `concurrency "x"`),
	Entry("unknown axis", "users=1,2", 0, `unknown key "users"`),
	Entry("no values", "rate=", 0, "want concurrency="),
)
