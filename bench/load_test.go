package bench_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
)

var _ = Describe("Run", func() {
	It("sends exactly the request budget and counts tokens", func(ctx SpecContext) {
		var calls atomic.Int64
		r, err := bench.Run(ctx, bench.Config{Name: "budget", Concurrency: 8, Requests: 100},
			func(context.Context) (bench.Sample, error) {
				calls.Add(1)
				return bench.Sample{Tokens: 3}, nil
			})
		Expect(err).NotTo(HaveOccurred())
		Expect(calls.Load()).To(BeEquivalentTo(100))
		Expect(r.Requests).To(Equal(100))
		Expect(r.Tokens).To(BeEquivalentTo(300))
		Expect(r.Errors).To(BeZero())
		Expect(r.Schema).To(Equal(bench.ResultSchema))
		Expect(r.RequestsPerS).To(BeNumerically(">", 0))
	})

	It("counts failures apart from successes and keeps the first error", func(ctx SpecContext) {
		var n atomic.Int64
		r, err := bench.Run(ctx, bench.Config{Concurrency: 1, Requests: 10},
			func(context.Context) (bench.Sample, error) {
				if n.Add(1)%2 == 0 {
					return bench.Sample{}, errors.New("upstream said 503")
				}
				return bench.Sample{}, nil
			})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Requests).To(Equal(5))
		Expect(r.Errors).To(Equal(5))
		Expect(r.FirstError).To(Equal("upstream said 503"))
	})

	It("records latency and time to first token at least as long as the work took", func(ctx SpecContext) {
		r, err := bench.Run(ctx, bench.Config{Concurrency: 2, Requests: 6},
			func(context.Context) (bench.Sample, error) {
				time.Sleep(3 * time.Millisecond)
				return bench.Sample{Tokens: 1, TTFT: 2 * time.Millisecond}, nil
			})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Latency.P50).To(BeNumerically(">=", 3))
		Expect(r.Latency.Max).To(BeNumerically(">=", r.Latency.P99))
		Expect(r.TTFT).NotTo(BeNil())
		Expect(r.TTFT.P50).To(BeNumerically("~", 2, 0.01))
	})

	It("stops at the duration and does not count the cut-off request as an error", func(ctx SpecContext) {
		r, err := bench.Run(ctx, bench.Config{Concurrency: 4, Duration: 50 * time.Millisecond},
			func(c context.Context) (bench.Sample, error) {
				select {
				case <-c.Done():
					return bench.Sample{}, c.Err()
				case <-time.After(time.Millisecond):
					return bench.Sample{}, nil
				}
			})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Errors).To(BeZero())
		Expect(r.Requests).To(BeNumerically(">", 0))
	})

	It("reports every finished request to the progress callback", func(ctx SpecContext) {
		var ok, failed atomic.Int64
		var n atomic.Int64
		_, err := bench.Run(ctx, bench.Config{Concurrency: 3, Requests: 30, Progress: func(success bool, _ time.Duration) {
			if success {
				ok.Add(1)
			} else {
				failed.Add(1)
			}
		}}, func(context.Context) (bench.Sample, error) {
			if n.Add(1)%3 == 0 {
				return bench.Sample{}, errors.New("boom")
			}
			return bench.Sample{}, nil
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok.Load()).To(BeEquivalentTo(20))
		Expect(failed.Load()).To(BeEquivalentTo(10))
	})

	It("has a stable JSON form", func(ctx SpecContext) {
		r, err := bench.Run(ctx, bench.Config{Concurrency: 1, Requests: 1},
			func(context.Context) (bench.Sample, error) { return bench.Sample{}, nil })
		Expect(err).NotTo(HaveOccurred())
		b, err := json.Marshal(r)
		Expect(err).NotTo(HaveOccurred())
		var m map[string]any
		Expect(json.Unmarshal(b, &m)).To(Succeed())
		Expect(m).To(HaveKeyWithValue("schema", "capbench.load/v1"))
		Expect(m).To(HaveKey("latency"))
		Expect(m).NotTo(HaveKey("ttft"))
	})

	DescribeTable("rejects configurations that cannot end or cannot run",
		func(cfg bench.Config, want string) {
			_, err := bench.Run(context.Background(), cfg,
				func(context.Context) (bench.Sample, error) { return bench.Sample{}, nil })
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("no workers", bench.Config{Concurrency: 0, Requests: 1}, "Concurrency"),
		Entry("no end", bench.Config{Concurrency: 1}, "Requests or Duration"),
		Entry("negative budget", bench.Config{Concurrency: 1, Requests: -1}, "Requests"),
		Entry("negative duration", bench.Config{Concurrency: 1, Duration: -time.Second}, "Duration"),
	)

	It("rejects a nil request function", func() {
		_, err := bench.Run(context.Background(), bench.Config{Concurrency: 1, Requests: 1}, nil)
		Expect(err).To(MatchError(ContainSubstring("nil request function")))
	})
})
