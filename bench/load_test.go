package bench_test

import (
	"context"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
)

// fakeWork answers every job after d, one token per millisecond of d.
type fakeWork struct {
	d     time.Duration
	paths []bench.Path
	calls atomic.Int64
}

func (f *fakeWork) Paths() []bench.Path { return f.paths }

func (f *fakeWork) Send(ctx context.Context, _ int, _ bench.Path, base time.Time, s *bench.Sample) {
	f.calls.Add(1)
	s.StartNS = time.Since(base).Nanoseconds()
	select {
	case <-time.After(f.d):
		s.FirstTokenNS = time.Since(base).Nanoseconds()
		s.OutputTokens = 1
	case <-ctx.Done():
		s.ErrorKind, s.Error = bench.ErrCanceled, ctx.Err().Error()
	}
	s.EndNS = time.Since(base).Nanoseconds()
}

var _ = Describe("RunLoad", func() {
	It("sends the request budget of every stage and tags warm-up and cool-down by job", func(ctx SpecContext) {
		w := &fakeWork{paths: []bench.Path{bench.PathTarget}}
		out, err := bench.RunLoad(ctx, bench.LoadConfig{
			Stages:   []bench.Shape{{Arrival: bench.Closed, Concurrency: 4}, {Arrival: bench.Closed, Concurrency: 2}},
			Requests: 20, Windows: bench.Windows{WarmupRequests: 3, CooldownRequests: 2},
		}, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(w.calls.Load()).To(BeEquivalentTo(40))
		Expect(out.Stages).To(HaveLen(2))
		phases := map[bench.Phase]int{}
		for _, s := range out.Samples {
			phases[s.Phase]++
		}
		Expect(phases).To(Equal(map[bench.Phase]int{bench.PhaseWarmup: 6, bench.PhaseCooldown: 4, bench.PhaseMeasure: 30}))
		Expect(out.Interrupted).To(BeFalse())
	})

	It("pairs every job across two paths, alternating which goes first", func(ctx SpecContext) {
		w := &fakeWork{paths: []bench.Path{bench.PathDirect, bench.PathProxy}}
		out, err := bench.RunLoad(ctx, bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 1}}, Requests: 4}, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Samples).To(HaveLen(8))
		first := map[int]bench.Path{}
		for _, s := range out.Samples {
			if _, ok := first[s.Pair]; !ok {
				first[s.Pair] = s.Path
			}
		}
		Expect(first).To(Equal(map[int]bench.Path{0: bench.PathDirect, 1: bench.PathProxy, 2: bench.PathDirect, 3: bench.PathProxy}))
	})

	It("holds an open-loop rate and reports its own schedule delay", func(ctx SpecContext) {
		w := &fakeWork{d: time.Millisecond, paths: []bench.Path{bench.PathTarget}}
		out, err := bench.RunLoad(ctx, bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Constant, Rate: 200}}, Requests: 100}, w)
		Expect(err).NotTo(HaveOccurred())
		sum := bench.Summarize(out.Samples, out.Stages, bench.SLO{})[0]
		Expect(sum.RequestedRate).To(Equal(200.0))
		Expect(sum.AchievedRate).To(BeNumerically("~", 200, 40))
		Expect(sum.ScheduleDelay.Count).To(Equal(100))
	})

	It("draws the same Poisson schedule from the same seed", func(ctx SpecContext) {
		sched := func() []int64 {
			w := &fakeWork{paths: []bench.Path{bench.PathTarget}}
			out, err := bench.RunLoad(ctx, bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Poisson, Rate: 500}}, Requests: 20, Seed: 7}, w)
			Expect(err).NotTo(HaveOccurred())
			byJob := make([]int64, len(out.Samples))
			for _, s := range out.Samples {
				byJob[s.Pair] = s.ScheduledNS
			}
			var gaps []int64
			for i := 1; i < len(byJob); i++ {
				gaps = append(gaps, (byJob[i]-byJob[i-1])/int64(time.Microsecond))
			}
			return gaps
		}
		Expect(sched()).To(Equal(sched()))
	})

	It("says it was interrupted and keeps what it gathered", func(ctx SpecContext) {
		w := &fakeWork{d: 20 * time.Millisecond, paths: []bench.Path{bench.PathTarget}}
		cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		out, err := bench.RunLoad(cctx, bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 2}}, Duration: time.Hour}, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Interrupted).To(BeTrue())
		Expect(len(out.Samples)).To(BeNumerically(">", 4))
		last := out.Samples[len(out.Samples)-1]
		Expect(last.ErrorKind).To(Equal(bench.ErrCanceled))
		Expect(last.Phase).To(Equal(bench.PhaseCooldown))
	})

	DescribeTable("refuses configurations that cannot end or measure nothing",
		func(cfg bench.LoadConfig, part string) {
			_, err := bench.RunLoad(context.Background(), cfg, &fakeWork{paths: []bench.Path{bench.PathTarget}})
			Expect(err).To(MatchError(ContainSubstring(part)))
		},
		Entry("no end", bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 1}}}, "--requests or --duration"),
		Entry("windows eat the budget", bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 1}}, Requests: 4, Windows: bench.Windows{WarmupRequests: 4}}, "leave nothing"),
		Entry("zero concurrency", bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed}}, Requests: 4}, "--concurrency"),
		Entry("no rate", bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Poisson}}, Requests: 4}, "--rate"),
		Entry("gamma without burstiness", bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Gamma, Rate: 1}}, Requests: 4}, "--burstiness"),
	)
})
