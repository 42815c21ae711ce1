package driver_test

import (
	"bytes"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/bench/driver"
)

var _ = Describe("the published schema of shard and merged results", Ordered, func() {
	var shardRaw, mergedRaw []byte

	BeforeAll(func(ctx SpecContext) {
		start := time.Now().Add(100 * time.Millisecond).UTC()
		var rs []*bench.Result
		var srcs []string
		for i := range 2 {
			o := embeddedChat([]bench.Shape{{Arrival: bench.Poisson, Rate: 400, Concurrency: 4}}, 12)
			o.Config.Paths = []bench.Path{bench.PathDirect}
			o.Shard, o.StartAt = bench.Shard{Index: i, Total: 2}, start
			res, err := driver.Run(ctx, o)
			Expect(err).NotTo(HaveOccurred())
			dir := GinkgoT().TempDir()
			path, err := bench.WriteResult(dir, res)
			Expect(err).NotTo(HaveOccurred())
			back, err := bench.ReadResult(path)
			Expect(err).NotTo(HaveOccurred())
			rs, srcs = append(rs, back), append(srcs, path)
		}
		var err error
		shardRaw, err = os.ReadFile(srcs[0])
		Expect(err).NotTo(HaveOccurred())
		merged, err := bench.MergeShards(rs, srcs, time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(merged.Samples).To(HaveLen(12))
		path, err := bench.WriteResult(GinkgoT().TempDir(), merged)
		Expect(err).NotTo(HaveOccurred())
		mergedRaw, err = os.ReadFile(path)
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(time.Minute))

	It("accepts a shard's result with its shard metadata", func() {
		Expect(shardRaw).To(ContainSubstring(`"shard": {`))
		Expect(shardRaw).To(ContainSubstring(`"planned_start"`))
		Expect(validate(compileSchema(""), shardRaw)).To(Succeed())
	})

	It("accepts the merged result with its list of shards", func() {
		Expect(mergedRaw).To(ContainSubstring(`"merge": {`))
		Expect(validate(compileSchema(""), mergedRaw)).To(Succeed())
	})

	DescribeTable("rejects shard metadata that breaks the format",
		func(from, to string) {
			raw := shardRaw
			if bytes.Contains(mergedRaw, []byte(from)) && !bytes.Contains(shardRaw, []byte(from)) {
				raw = mergedRaw
			}
			Expect(bytes.Contains(raw, []byte(from))).To(BeTrue(), "fixture lacks %s", from)
			Expect(validate(compileSchema(""), bytes.Replace(raw, []byte(from), []byte(to), 1))).NotTo(Succeed())
		},
		Entry("a shard without its total", `"total": 2,`, ``),
		Entry("a field the shard block does not have", `"index": 0,`, `"index": 0, "node": "a",`),
		Entry("a negative late tolerance", `"late_tolerance_ms": 1000`, `"late_tolerance_ms": -1`),
	)
})
