package bench_test

import (
	"context"
	"sort"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
)

// runShards runs cfg once per shard of total, all at once, from one start.
func runShards(ctx context.Context, cfg bench.LoadConfig, total int) []*bench.LoadOutcome {
	cfg.StartAt = time.Now().Add(50 * time.Millisecond)
	outs := make([]*bench.LoadOutcome, total)
	var wg sync.WaitGroup
	for i := range total {
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			c := cfg
			c.Shard = bench.Shard{Index: i, Total: total}
			out, err := bench.RunLoad(ctx, c, &fakeWork{d: time.Millisecond, paths: []bench.Path{bench.PathTarget}})
			Expect(err).NotTo(HaveOccurred())
			outs[i] = out
		}()
	}
	wg.Wait()
	return outs
}

type arrival struct {
	job   int
	sched int64
}

func arrivals(outs ...*bench.LoadOutcome) []arrival {
	var a []arrival
	for _, o := range outs {
		for _, s := range o.Samples {
			a = append(a, arrival{s.Pair, s.ScheduledNS})
		}
	}
	sort.Slice(a, func(i, j int) bool { return a[i].job < a[j].job })
	return a
}

// shardResult wraps an outcome as a shard's result.
func shardResult(o *bench.LoadOutcome, cfg bench.LoadConfig, i, n int) *bench.Result {
	r := &bench.Result{Config: bench.Config{Target: bench.TargetURL, Workload: bench.WorkloadChat, Stages: cfg.Stages, Requests: cfg.Requests,
		Windows: cfg.Windows, Seed: cfg.Seed, URL: "http://127.0.0.1:1"},
		Samples: o.Samples, Stages: o.Stages, Interrupted: o.Interrupted,
		Shard: &bench.ShardInfo{Index: i, Total: n, PlannedStart: o.Base, ActualStart: o.Started}}
	r.Finish()
	return r
}

var _ = Describe("Shard", func() {
	DescribeTable("splits a count into floor/ceil shares that sum to it",
		func(n, total int) {
			sumShare, sumJobs, lo, hi := 0, 0, n, 0
			for i := range total {
				s := bench.Shard{Index: i, Total: total}
				sumShare += s.Share(n)
				sumJobs += s.Jobs(n)
				lo, hi = min(lo, s.Share(n)), max(hi, s.Share(n))
			}
			Expect(sumShare).To(Equal(n))
			Expect(sumJobs).To(Equal(n))
			Expect(hi - lo).To(BeNumerically("<=", 1))
		},
		Entry("even", 12, 4), Entry("uneven", 10, 3), Entry("fewer than shards", 2, 5), Entry("one shard", 7, 1), Entry("prime", 97, 8),
	)

	DescribeTable("refuses a malformed --shard, naming the flag",
		func(v, want string) {
			_, err := bench.ParseShard(v)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("no total", "3", `--shard "3": want I/N`),
		Entry("not numbers", "a/b", `--shard "a/b": want I/N`),
		Entry("index = total", "4/4", "--shard 4/4: want I/N with 0 <= I < N"),
		Entry("negative index", "-1/2", "--shard -1/2"),
		Entry("zero total", "0/0", "--shard 0/0"),
	)

	DescribeTable("takes the shard from --shard or a Kubernetes Indexed Job's environment",
		func(flag string, shards int, env map[string]string, want bench.Shard, wantErr string) {
			got, err := bench.ShardFromEnv(flag, shards, func(k string) string { return env[k] })
			if wantErr != "" {
				Expect(err).To(MatchError(ContainSubstring(wantErr)))
				return
			}
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(want))
		},
		Entry("--shard wins over the environment", "1/3", 0, map[string]string{"JOB_COMPLETION_INDEX": "2", "CAPBENCH_SHARDS": "5"}, bench.Shard{Index: 1, Total: 3}, ""),
		Entry("the index from the Job, the total from CAPBENCH_SHARDS", "", 0, map[string]string{"JOB_COMPLETION_INDEX": "2", "CAPBENCH_SHARDS": "4"}, bench.Shard{Index: 2, Total: 4}, ""),
		Entry("--shards over CAPBENCH_SHARDS", "", 3, map[string]string{"JOB_COMPLETION_INDEX": "0", "CAPBENCH_SHARDS": "9"}, bench.Shard{Index: 0, Total: 3}, ""),
		Entry("nothing set: the whole schedule", "", 0, map[string]string{}, bench.Shard{}, ""),
		Entry("an index without a total", "", 0, map[string]string{"JOB_COMPLETION_INDEX": "1"}, bench.Shard{}, "give the shard total with --shards N or CAPBENCH_SHARDS"),
		Entry("an index beyond the total", "", 2, map[string]string{"JOB_COMPLETION_INDEX": "2"}, bench.Shard{}, "JOB_COMPLETION_INDEX=2 with 2 shards"),
		Entry("an index that is no number", "", 2, map[string]string{"JOB_COMPLETION_INDEX": "x"}, bench.Shard{}, `JOB_COMPLETION_INDEX="x" is not a number`),
		Entry("a total that is no number", "", 0, map[string]string{"JOB_COMPLETION_INDEX": "0", "CAPBENCH_SHARDS": "four"}, bench.Shard{}, `CAPBENCH_SHARDS="four"`),
		Entry("--shards without an index", "", 3, map[string]string{}, bench.Shard{}, "--shards 3 needs --shard I/N or JOB_COMPLETION_INDEX"),
	)

	DescribeTable("refuses schedules a shard cannot split exactly",
		func(cfg bench.LoadConfig, want string) {
			Expect(cfg.Validate()).To(MatchError(ContainSubstring(want)))
		},
		Entry("fewer workers than shards", bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 2}}, Requests: 10, Shard: bench.Shard{Index: 0, Total: 3}},
			"--concurrency 2 over 3 shards leaves shard 0 without a worker"),
		Entry("a sweep", bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 4}, {Arrival: bench.Closed, Concurrency: 8}}, Requests: 10, Shard: bench.Shard{Index: 0, Total: 2}},
			"--shard 0/2 runs one stage"),
		Entry("an in-flight cap below the shard count", bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Poisson, Rate: 10, Concurrency: 2}}, Requests: 10, Shard: bench.Shard{Index: 0, Total: 3}},
			"the in-flight cap --concurrency 2 over 3 shards leaves shard 0 no slot"),
		Entry("fewer requests than shards", bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Poisson, Rate: 10}}, Requests: 2, Shard: bench.Shard{Index: 0, Total: 3}},
			"--requests 2 over 3 shards"),
	)
})

var _ = Describe("RunLoad on shards", func() {
	It("lays the open-loop arrivals of the shards on the one seeded schedule", func(ctx SpecContext) {
		cfg := bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Poisson, Rate: 2000}}, Requests: 50, Seed: 7}
		single, err := bench.RunLoad(ctx, cfg, &fakeWork{d: time.Millisecond, paths: []bench.Path{bench.PathTarget}})
		Expect(err).NotTo(HaveOccurred())
		outs := runShards(ctx, cfg, 3)
		for i, o := range outs {
			Expect(o.Samples).To(HaveLen(bench.Shard{Index: i, Total: 3}.Jobs(50)))
			for _, s := range o.Samples {
				Expect(s.Pair % 3).To(Equal(i))
			}
		}
		Expect(arrivals(outs...)).To(Equal(arrivals(single)))
	}, SpecTimeout(20*time.Second))

	It("splits a closed loop's workers and jobs, together exactly the single run's", func(ctx SpecContext) {
		cfg := bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 5}}, Requests: 23}
		outs := runShards(ctx, cfg, 2)
		var jobs []int
		for i, o := range outs {
			Expect(o.Stages[0].Jobs).To(Equal(bench.Shard{Index: i, Total: 2}.Jobs(23)))
			Expect(o.Stages[0].Shape.Concurrency).To(Equal(5), "the stage keeps the whole schedule's shape")
			for _, s := range o.Samples {
				jobs = append(jobs, s.Pair)
			}
		}
		sort.Ints(jobs)
		want := make([]int, 23)
		for i := range want {
			want[i] = i
		}
		Expect(jobs).To(Equal(want))
	}, SpecTimeout(20*time.Second))

	It("waits for --start-at and counts the samples from it", func(ctx SpecContext) {
		at := time.Now().Add(150 * time.Millisecond)
		out, err := bench.RunLoad(ctx, bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 1}}, Requests: 2, StartAt: at},
			&fakeWork{paths: []bench.Path{bench.PathTarget}})
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Started).To(BeTemporally(">=", at))
		Expect(out.Base.Equal(at)).To(BeTrue(), "the clock origin is the planned start")
	}, SpecTimeout(5*time.Second))

	It("stops waiting for --start-at when interrupted, saying so", func(ctx SpecContext) {
		c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := bench.RunLoad(c, bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 1}}, Requests: 2, StartAt: time.Now().Add(time.Hour)},
			&fakeWork{paths: []bench.Path{bench.PathTarget}})
		Expect(err).To(MatchError(ContainSubstring("interrupted while waiting for --start-at")))
	}, SpecTimeout(5*time.Second))
})

var _ = Describe("MergeShards", func() {
	var (
		cfg  bench.LoadConfig
		outs []*bench.LoadOutcome
		rs   []*bench.Result
		srcs = []string{"s0/result.json", "s1/result.json", "s2/result.json"}
	)
	BeforeEach(func(ctx SpecContext) {
		cfg = bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Constant, Rate: 1000}}, Requests: 30, Seed: 3,
			Windows: bench.Windows{WarmupRequests: 4, CooldownRequests: 2}}
		outs = runShards(ctx, cfg, 3)
		rs = nil
		for i, o := range outs {
			rs = append(rs, shardResult(o, cfg, i, 3))
		}
	}, NodeTimeout(20*time.Second))

	It("reports what one process would have: every sample, phases over the union, one stage", func() {
		m, err := bench.MergeShards(rs, srcs, time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(m.Samples).To(HaveLen(30))
		Expect(m.Stages).To(HaveLen(1))
		Expect(m.Stages[0].Jobs).To(Equal(30))
		phases := map[bench.Phase]int{}
		for i, s := range m.Samples {
			phases[s.Phase]++
			Expect(s.Seq).To(Equal(i))
		}
		Expect(phases).To(Equal(map[bench.Phase]int{bench.PhaseWarmup: 4, bench.PhaseCooldown: 2, bench.PhaseMeasure: 24}))
		Expect(m.Summaries).NotTo(BeEmpty())
		Expect(m.Summaries[0].Requests).To(Equal(24))
		Expect(m.Shard).To(BeNil())
		Expect(m.Merge.Shards).To(HaveLen(3))
		Expect(m.Merge.Problems).To(BeEmpty())
		Expect(m.Config.Comparable(rs[0].Config)).To(BeEmpty(), "the merged result compares with a single run's")
	})

	It("re-bases shards without a planned start onto the earliest start", func() {
		for _, r := range rs {
			r.Shard.PlannedStart = time.Time{}
		}
		rs[1].Shard.ActualStart = rs[0].Shard.ActualStart.Add(2 * time.Second)
		m, err := bench.MergeShards(rs, srcs, time.Second)
		Expect(err).NotTo(HaveOccurred())
		var late int64
		for _, s := range m.Samples {
			if s.Pair%3 == 1 {
				late = max(late, s.StartNS)
			}
		}
		Expect(late).To(BeNumerically(">=", int64(2*time.Second)))
		Expect(m.Merge.Problems).To(ContainElement(ContainSubstring("shard 1/3 (s1/result.json) started")))
	})

	It("flags a shard that started late, was interrupted or had every request fail", func() {
		rs[2].Shard.ActualStart = rs[2].Shard.PlannedStart.Add(3 * time.Second)
		rs[1].Interrupted = true
		for i := range rs[0].Samples {
			rs[0].Samples[i].ErrorKind = bench.ErrHTTP5xx
		}
		m, err := bench.MergeShards(rs, srcs, time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(m.Interrupted).To(BeTrue())
		Expect(m.Merge.Problems).To(ConsistOf(
			ContainSubstring("shard 0/3 (s0/result.json): every one of its 10 requests failed"),
			ContainSubstring("shard 1/3 (s1/result.json) was interrupted"),
			MatchRegexp(`shard 2/3 \(s2/result.json\) started 3\d{3}\.\d ms late \(tolerance 1000\.0 ms\)`),
		))
		Expect(m.Merge.Shards[2].Late).To(BeTrue())
	})

	DescribeTable("refuses shards that are not one run",
		func(mutate func([]*bench.Result) []*bench.Result, want string) {
			_, err := bench.MergeShards(mutate(rs), srcs, time.Second)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("a missing shard", func(rs []*bench.Result) []*bench.Result { return []*bench.Result{rs[0], rs[2]} },
			"merge: shard(s) 1 of 3 missing (2 of 3 results given)"),
		Entry("an index outside the total", func(rs []*bench.Result) []*bench.Result { rs[1].Shard.Index = 5; return rs },
			"s1/result.json says it is shard 5 of 3, outside 0..2"),
		Entry("shards of different totals", func(rs []*bench.Result) []*bench.Result { rs[1].Shard.Total = 4; return rs },
			"s0/result.json is one of 3 shards, s1/result.json one of 4"),
		Entry("a duplicate index", func(rs []*bench.Result) []*bench.Result { rs[2].Shard.Index = 0; return rs }, "s0/result.json and s2/result.json are both shard 0 of 3"),
		Entry("a different schedule", func(rs []*bench.Result) []*bench.Result { rs[1].Config.Seed = 99; return rs }, "ran different schedules"),
		Entry("a different start", func(rs []*bench.Result) []*bench.Result {
			rs[2].Shard.PlannedStart = rs[2].Shard.PlannedStart.Add(time.Minute)
			return rs
		}, "shards of one run share --start-at"),
		Entry("an unsharded result", func(rs []*bench.Result) []*bench.Result { rs[0].Shard = nil; return rs }, "s0/result.json is not a shard result"),
	)
})
