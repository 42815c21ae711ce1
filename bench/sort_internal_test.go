package bench

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("ordering samples by start", func() {
	DescribeTable("orders by start time and keeps equal starts in the order they came",
		func(starts []int64, wantSeqs []int) {
			ss := make([]Sample, len(starts))
			for i, st := range starts {
				ss[i] = Sample{Seq: i, StartNS: st, Error: "payload"}
			}
			sortByStart(ss)
			var seqs []int
			for _, s := range ss {
				seqs = append(seqs, s.Seq)
				Expect(s.Error).To(Equal("payload"), "whole samples move, not just their keys")
			}
			Expect(seqs).To(Equal(wantSeqs))
		},
		Entry("already in order", []int64{1, 2, 3}, []int{0, 1, 2}),
		Entry("reversed", []int64{3, 2, 1}, []int{2, 1, 0}),
		Entry("ties keep their order", []int64{5, 1, 5, 1, 3}, []int{1, 3, 4, 0, 2}),
		Entry("empty", []int64{}, nil),
	)
})
