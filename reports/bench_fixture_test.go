package reports_test

import (
	"time"

	"github.com/capbench/capbench/bench"
)

const msNS = int64(time.Millisecond)

// syntheticResult is a paired two-stage sweep with server series, capture
// stats and two agent sessions; slow scales every proxied latency.
func syntheticResult(slow float64) *bench.Result {
	r := &bench.Result{StartedAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Config: bench.Config{
		Target: bench.TargetEmbedded, Workload: bench.WorkloadChat, Seed: 1, Requests: 40,
		Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 1}, {Arrival: bench.Closed, Concurrency: 4}},
		SLO:    bench.SLO{TTFT: 2 * time.Second, TPOT: 50 * time.Millisecond},
	}}
	t := int64(0)
	for st := range 2 {
		info := bench.StageInfo{Index: st, Point: st, Shape: r.Config.Stages[st], StartNS: t, Jobs: 40}
		for job := range 40 {
			for _, p := range []bench.Path{bench.PathDirect, bench.PathProxy} {
				f := 1.0
				if p == bench.PathProxy {
					f = 1.05 * slow
				}
				jitter := int64(job%7) * msNS
				ttft := int64(float64(20*msNS+jitter) * f)
				e2e := int64(float64(120*msNS+2*jitter) * f * float64(st+1))
				s := bench.Sample{Stage: st, Phase: bench.PhaseMeasure, Path: p, Pair: job, ScheduledNS: t, StartNS: t,
					FirstTokenNS: t + ttft, EndNS: t + e2e, PromptTokens: 100, OutputTokens: 33, TokenSource: "usage"}
				for range 32 {
					s.ChunkGapsUS = append(s.ChunkGapsUS, (e2e-ttft)/32/1000)
				}
				if job == 0 {
					s.Phase = bench.PhaseWarmup
				}
				r.Samples = append(r.Samples, s)
				t += e2e / int64(1+st*3)
			}
		}
		info.EndNS = t
		r.Stages = append(r.Stages, info)
	}
	r.Server = &bench.ServerSeries{URL: "http://127.0.0.1:1/metrics", Interval: 250 * time.Millisecond}
	for i := range 20 {
		r.Server.Points = append(r.Server.Points, bench.ServerPoint{TNS: int64(i) * 250 * msNS, Running: float64(i % 5), Waiting: float64(i % 3), KVUsage: float64(i%5) / 5})
	}
	r.Capture = &bench.Capture{Store: "file", Rollouts: 80, ProxiedOK: 80, CapturedAll: true, Records: 80, Bytes: 1 << 20,
		RecordsPerS: 40, BytesPerS: 500000, FidelityCalls: 80, FidelityExact: 80, FidelityMethod: "ledger"}
	r.CaptureSyncs = &bench.CaptureSyncs{Appends: 160, FileSystemSyncs: 30, FileSyncs: 10, AppendsPerSync: 4, BusyS: 1.5, WindowS: 2, BusyShare: 0.75}
	r.Sessions = &bench.Sessions{Count: 2, Masked: 1, MaskReasons: map[string]int{`terminal chain "broken", roots=3`: 1}, Outcomes: []bench.SessionOutcome{
		{RolloutID: "s-0", Calls: 19, MaxPromptTokens: 34000, FidelityCalls: 19, FidelityExact: 19, DurationS: 3},
		{RolloutID: "s-1", Calls: 19, MaxPromptTokens: 34100, FidelityCalls: 19, FidelityExact: 19, Masked: true, MaskReason: `terminal chain "broken", roots=3`, DurationS: 3},
	}}
	for sess := range 2 {
		for turn := range 19 {
			r.Samples = append(r.Samples, bench.Sample{Stage: 1, Phase: bench.PhaseCooldown, Path: bench.PathProxy, Session: "s-" + string(rune('0'+sess)), Turn: turn,
				StartNS: t, EndNS: t + 50*msNS, PromptTokens: 1000 + 1800*turn, OutputTokens: 20})
			t += 50 * msNS
		}
	}
	r.Finish()
	return r
}
