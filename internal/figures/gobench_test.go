package figures_test

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/figures"
)

// saved is real output of this repository's benchmarks and capbench runs,
// laid out as `make figures` leaves it (one folder per run).
const saved = "testdata/saved"

func parseSaved(run string) figures.BenchSet {
	out, err := os.ReadFile(filepath.Join(saved, run, "stdout.txt"))
	Expect(err).NotTo(HaveOccurred())
	set, err := figures.ParseGoBench(out)
	Expect(err).NotTo(HaveOccurred())
	return set
}

var _ = Describe("ParseGoBench", func() {
	DescribeTable("reads real benchmark output: median, min and max over -count",
		func(run, name, unit string, count int, med, lo, hi float64) {
			set := parseSaved(run)
			Expect(set.Count(name, unit)).To(Equal(count))
			Expect(set.Med(name, unit)).To(BeNumerically("~", med, 1e-9))
			Expect(set.Min(name, unit)).To(BeNumerically("~", lo, 1e-9))
			Expect(set.Max(name, unit)).To(BeNumerically("~", hi, 1e-9))
		},
		Entry("one benchmark, custom metrics", "stream-ttft", "StreamTTFT", "direct-ttft-ms", 1, 20.98, 20.98, 20.98),
		Entry("ns/op of the same line", "stream-ttft", "StreamTTFT", "ns/op", 1, 2084020144.0, 2084020144.0, 2084020144.0),
		Entry("sub-benchmarks with = and / in their names", "proxy-filestore", "ProxyFileStore/rollouts=64/calls=50", "cpu-µs/call", 1, 351.8, 351.8, 351.8),
		Entry("-benchmem columns", "fake-vs-trivial-2", "ChatHandler", "allocs/op", 1, 53.0, 53.0, 53.0),
		Entry("-count 3: the middle value", "fake-vs-trivial", "NonStreamingVsTrivial", "fake/trivial", 3, 0.7760, 0.7470, 0.8556),
		Entry("-count 2: the mean of the middle two", "nats-put", "Put/record=small/writers=1/calls=50/store=nats", "puts/s", 2, (4477.0+3731)/2, 3731.0, 4477.0),
		Entry("a name that is a prefix of another stays apart", "nats-put", "Put/record=small/writers=1/calls=50/store=nats-sync-always", "puts/s", 2, (1079.0+1159)/2, 1079.0, 1159.0),
	)

	DescribeTable("names",
		func(out string, want []string) {
			set, err := figures.ParseGoBench([]byte(out))
			Expect(err).NotTo(HaveOccurred())
			var got []string
			for n := range set {
				got = append(got, n)
			}
			Expect(got).To(ConsistOf(want))
		},
		Entry("the -GOMAXPROCS suffix is dropped",
			"BenchmarkA-8   10  5 ns/op\nBenchmarkB/c=16-8  10  5 ns/op\n", []string{"A", "B/c=16"}),
		Entry("without GOMAXPROCS>1 there is no suffix to drop, and a name's own -digits stay",
			"BenchmarkA  10  5 ns/op\nBenchmarkB/writers-16  10  5 ns/op\n", []string{"A", "B/writers-16"}),
		Entry("log lines, --- lines and PASS are not results",
			"goos: linux\nBenchmarkX is slow today\n--- BENCH: BenchmarkA-2\n    a_test.go:3: hi\nBenchmarkA-2  3  9 ns/op\nPASS\nok  pkg 1s\n", []string{"A"}),
	)

	It("fails on a value that is not a number, naming the line", func() {
		_, err := figures.ParseGoBench([]byte("goos: linux\nBenchmarkA-2  3  x1 ns/op\n"))
		Expect(err).To(MatchError(ContainSubstring("line 2")))
	})

	It("names what the output has when a benchmark or a unit is missing", func() {
		set := parseSaved("long-rollout")
		_, err := set.Med("LongRollout/nats", "added/direct@200")
		Expect(err).To(MatchError(And(ContainSubstring(`"LongRollout/nats"`), ContainSubstring("LongRollout/file, LongRollout/file-delta, LongRollout/memory, LongRollout/messages"))))
		_, err = set.Med("LongRollout/file", "added/direct@300")
		Expect(err).To(MatchError(ContainSubstring("added/direct@200")))
	})
})
