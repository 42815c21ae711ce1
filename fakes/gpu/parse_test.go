package gpu_test

import (
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/gpu"
)

var _ = Describe("ParseBytes", func() {
	DescribeTable("parses sizes",
		func(in string, want int64) {
			got, err := gpu.ParseBytes(in)
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(want))
		},
		Entry(nil, "48GiB", int64(48)<<30),
		Entry(nil, "48 GiB", int64(48)<<30),
		Entry(nil, "48gib", int64(48)<<30),
		Entry(nil, "80GB", int64(80_000_000_000)),
		Entry(nil, "24G", int64(24)<<30),
		Entry(nil, "24g", int64(24_000_000_000)),
		Entry(nil, "0.5GiB", int64(1)<<29),
		Entry(nil, "1.5TiB", int64(3)<<39),
		Entry(nil, "512MiB", int64(512)<<20),
		Entry(nil, "512Mi", int64(512)<<20),
		Entry(nil, "1kb", int64(1000)),
		Entry(nil, "1K", int64(1024)),
		Entry(nil, "1073741824", int64(1)<<30),
		Entry(nil, "100B", int64(100)),
		Entry(nil, " 2GiB ", int64(2)<<30),
		Entry(nil, "1.0000000001B", int64(1)),
	)

	DescribeTable("rejects bad sizes",
		func(in string) {
			_, err := gpu.ParseBytes(in)
			Expect(errors.Is(err, gpu.ErrBadValue)).To(BeTrue(), "input %q", in)
		},
		Entry(nil, ""),
		Entry(nil, "abc"),
		Entry(nil, "-1GiB"),
		Entry(nil, "12XB"),
		Entry(nil, "GiB"),
		Entry(nil, "1e9"),
		Entry(nil, "1.2.3GB"),
		Entry(nil, "99999999999TiB"),
	)
})

var _ = Describe("ParseMaxModelLen", func() {
	DescribeTable("accepts vLLM's units",
		func(in string, want int) {
			got, err := gpu.ParseMaxModelLen(in)
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(want))
		},
		Entry(nil, "65536", 65536),
		Entry(nil, "1k", 1000),
		Entry(nil, "1K", 1024),
		Entry(nil, "64K", 64*1024),
		Entry(nil, "25.6k", 25600),
		Entry(nil, "1m", 1_000_000),
		Entry(nil, "1M", 1<<20),
		Entry(nil, "auto", -1),
		Entry(nil, "AUTO", -1),
		Entry(nil, "-1", -1),
	)

	DescribeTable("rejects bad lengths",
		func(in, fragment string) {
			_, err := gpu.ParseMaxModelLen(in)
			Expect(errors.Is(err, gpu.ErrBadValue)).To(BeTrue(), "input %q", in)
			Expect(err.Error()).To(ContainSubstring(fragment))
		},
		Entry(nil, "1.5K", "Decimals are not allowed with binary suffixes like K. Did you mean to use 1.5k instead?"),
		Entry(nil, "abc", "invalid int value: 'abc'"),
		Entry(nil, "", "invalid int value"),
		Entry(nil, "k", "invalid int value"),
		Entry(nil, "0", "must be a positive integer"),
		Entry(nil, "-2", "must be a positive integer"),
		Entry(nil, "99999999999T", "overflows"),
		// 2^63 exactly: a float comparison with MaxInt64 rounds it back into range.
		Entry(nil, "9223372036854775.808k", "overflows"),
	)

	It("parses plain human-readable integers", func() {
		n, err := gpu.ParseHumanInt("2k")
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(2000))
	})
})
