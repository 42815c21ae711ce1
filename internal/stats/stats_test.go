package stats_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/stats"
)

var _ = Describe("Median", func() {
	DescribeTable("is the middle value, or the mean of the two middle ones",
		func(xs []float64, want float64) {
			before := append([]float64(nil), xs...)
			Expect(stats.Median(xs)).To(Equal(want))
			Expect(xs).To(Equal(before), "the input is not reordered")
		},
		Entry("none", nil, 0.0),
		Entry("one", []float64{3}, 3.0),
		Entry("odd count, unsorted", []float64{5, 1, 3}, 3.0),
		Entry("even count", []float64{4, 1, 3, 2}, 2.5),
	)
})
