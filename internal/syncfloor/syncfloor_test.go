package syncfloor_test

import (
	"fmt"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/syncfloor"
)

var _ = Describe("the fdatasync floor", func() {
	It("appends every operation's lines durably, one file per writer", func() {
		dir := GinkgoT().TempDir()
		rate, err := syncfloor.Measure(dir, 3, 10, 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(rate).To(BeNumerically(">", 0))
		total := int64(0)
		files, err := filepath.Glob(filepath.Join(dir, "floor-*"))
		Expect(err).NotTo(HaveOccurred())
		Expect(files).To(HaveLen(3))
		for _, f := range files {
			fi, err := os.Stat(f)
			Expect(err).NotTo(HaveOccurred())
			total += fi.Size()
		}
		Expect(total).To(Equal(int64(10 * 2 * 2048)))
	})

	DescribeTable("refuses counts below one",
		func(writers, ops, syncs int) {
			_, err := syncfloor.Measure(GinkgoT().TempDir(), writers, ops, syncs)
			Expect(err).To(MatchError(ContainSubstring("at least 1")))
		},
		Entry("no writers", 0, 1, 1),
		Entry("no operations", 1, 0, 1),
		Entry("no syncs", 1, 1, 0),
	)

	It("says which directory it could not write", func() {
		_, err := syncfloor.Measure(filepath.Join(GinkgoT().TempDir(), "missing"), 1, 1, 1)
		Expect(err).To(MatchError(ContainSubstring("missing")))
	})

	It("times appends of the sizes asked for, each in its own file", func() {
		dir := GinkgoT().TempDir()
		took, err := syncfloor.Latency(dir, []int{4096, 33}, 5)
		Expect(err).NotTo(HaveOccurred())
		Expect(took).To(BeNumerically(">", 0))
		for i, want := range []int64{5 * 4096, 5 * 33} {
			fi, err := os.Stat(filepath.Join(dir, fmt.Sprintf("latency-%d", i)))
			Expect(err).NotTo(HaveOccurred())
			Expect(fi.Size()).To(Equal(want))
		}
	})

	DescribeTable("refuses latency runs without work",
		func(sizes []int, rounds int) {
			_, err := syncfloor.Latency(GinkgoT().TempDir(), sizes, rounds)
			Expect(err).To(MatchError(ContainSubstring("at least")))
		},
		Entry("no sizes", nil, 1),
		Entry("no rounds", []int{1}, 0),
		Entry("an empty line", []int{0}, 1),
	)
})
