package bench_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
)

var _ = Describe("PairedOverhead's buffering share", func() {
	// pairs builds n pairs: direct with TTFT dTTFT and E2EL dE2EL, proxied
	// with TTFT pTTFT and E2EL pE2EL (all in µs).
	pairs := func(n int, dTTFT, dE2EL, pTTFT, pE2EL int64) []bench.Sample {
		const us = ms / 1000
		var out []bench.Sample
		for i := range n {
			start := int64(i) * 1000 * ms
			out = append(out,
				bench.Sample{Path: bench.PathDirect, Phase: bench.PhaseMeasure, Pair: i, OutputTokens: 64,
					StartNS: start, FirstTokenNS: start + dTTFT*us, EndNS: start + dE2EL*us},
				bench.Sample{Path: bench.PathProxy, Phase: bench.PhaseMeasure, Pair: i, OutputTokens: 64,
					StartNS: start, FirstTokenNS: start + pTTFT*us, EndNS: start + pE2EL*us})
		}
		return out
	}
	DescribeTable("counts a proxied first chunk as buffered only when it waited for the generation",
		func(samples []bench.Sample, want float64) {
			o := bench.PairedOverhead(samples)
			Expect(o).To(HaveLen(1))
			Expect(o[0].BufferedTTFT).To(BeNumerically("~", want, 1e-9))
		},
		Entry("a streaming proxy: TTFT a little later, generation passes through",
			pairs(10, 6000, 160000, 7600, 163000), 0.0),
		Entry("a buffering proxy: first chunk after the whole generation",
			pairs(10, 6000, 160000, 162000, 163000), 1.0),
		Entry("a zero-latency fake: the direct call generates in microseconds, so nothing is judged",
			pairs(10, 300, 350, 1500, 1550), 0.0),
	)
})
