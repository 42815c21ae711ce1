package proxy_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/internal/procstat"
)

// uptimeLeg is one proxy configuration of BenchmarkProxyUptime.
type uptimeLeg struct {
	name string
	opts func() (proxy.Options, []store.FileOption)
	// most bounds the leg's rollouts: one that holds every rollout's
	// descriptors open runs out of them past a few thousand.
	most int
}

// uptimeLegs are the proxy as `capbench proxy` runs it (the default bounds)
// and the same proxy with the bounds lifted, which keeps a rollout's state
// in memory for as long as the process runs, as the proxy did before the
// bounds: the peer that shows what they hold.
var uptimeLegs = []uptimeLeg{
	{name: "bounded", opts: func() (proxy.Options, []store.FileOption) { return proxy.Options{}, nil }},
	{name: "unbounded", most: 5000, opts: func() (proxy.Options, []store.FileOption) {
		return proxy.Options{MaxTrackedRollouts: 1 << 30},
			[]store.FileOption{store.WithMaxIdleRollouts(1 << 30), store.WithIdleFlush(time.Hour)}
	}},
}

// BenchmarkProxyUptime runs one-call rollouts through the capture proxy over
// the file store, 16 at a time, each call a new rollout, as a long-running
// proxy sees rollouts come and go, and measures the process's live heap
// (after a collection) and open descriptors once half the rollouts have
// been written and again at the end. It reports the heap each rollout adds
// over the second half: flat is near 0 however many rollouts ran before.
// The run is past the proxy's tracked-rollout bound (4,096) at the half;
// CAPBENCH_BENCH_ROLLOUTS sets the total (default 12,288). The unbounded
// leg, measured in the same run over at most 5,000 rollouts, is the growth
// the bounds remove.
func BenchmarkProxyUptime(b *testing.B) {
	// Halves of 12 × 512 rollouts: the proxy forgets tracked rollouts in
	// batches of an eighth of its 4,096 bound, so both measurements land at
	// the same point of that cycle.
	n := 12288
	if v, err := strconv.Atoi(os.Getenv("CAPBENCH_BENCH_ROLLOUTS")); err == nil && v > 0 {
		n = v
	}
	// The fake shares the process: a small ledger keeps its growth out of
	// the proxy's figure.
	fake := benchFake(b, vllm.Options{Lengths: vllm.Lengths{Mean: 4, StdDev: 0.01}, LedgerMaxBytes: 64 << 10})
	for _, leg := range uptimeLegs {
		var perRollout, heapHalf, heapEnd, fdsHalf, fdsEnd float64
		legN := n
		if leg.most > 0 {
			legN = min(n, leg.most)
		}
		for it := 0; it < b.N; it++ {
			r := runUptime(b, fake.URL(), leg, fmt.Sprintf("%s-%d", leg.name, it), legN)
			perRollout += r.perRollout
			heapHalf += r.heapHalf
			heapEnd += r.heapEnd
			fdsHalf += float64(r.fdsHalf)
			fdsEnd += float64(r.fdsEnd)
		}
		k := float64(b.N)
		b.ReportMetric(perRollout/k, leg.name+"-heap-B/rollout")
		b.ReportMetric(heapHalf/k/(1<<20), leg.name+"-heap-MiB@half")
		b.ReportMetric(heapEnd/k/(1<<20), leg.name+"-heap-MiB@end")
		b.ReportMetric(fdsHalf/k, leg.name+"-fds@half")
		b.ReportMetric(fdsEnd/k, leg.name+"-fds@end")
		b.ReportMetric(float64(legN), leg.name+"-rollouts")
	}
}

// uptimeRun is what one leg measured.
type uptimeRun struct {
	perRollout, heapHalf, heapEnd float64
	fdsHalf, fdsEnd               int
}

// runUptime writes n one-call rollouts through a fresh proxy and store of
// leg, measuring the live heap and descriptors after each half.
func runUptime(b *testing.B, upstream string, leg uptimeLeg, tag string, n int) uptimeRun {
	b.Helper()
	dir := b.TempDir()
	popts, fopts := leg.opts()
	fs, err := store.NewFileStore(dir, fopts...)
	if err != nil {
		b.Fatal(err)
	}
	popts.Upstream, popts.Store, popts.RequestTokenIDs = upstream, fs, true
	p, err := proxy.New(popts)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = fs.Close() }()
	defer func() { _ = p.Close() }()
	hc := benchClient()
	half := func(h int) (heap float64, fds int) {
		url := func(w, j int) string {
			return fmt.Sprintf("%s/ng-rollout/up-%s-%d-%d-%d/training-token-capture/v1/chat/completions", p.URL(), tag, h, w, j)
		}
		closedLoopLatency(b, hc, url, smallChatBody, 16, n/2)
		hc.CloseIdleConnections()
		fds, err := procstat.OpenDescriptors()
		if err != nil {
			b.Fatal(err)
		}
		return float64(procstat.LiveHeap()), fds
	}
	heapHalf, fdsHalf := half(0)
	heapEnd, fdsEnd := half(1)
	return uptimeRun{perRollout: (heapEnd - heapHalf) / float64(n/2), heapHalf: heapHalf, heapEnd: heapEnd, fdsHalf: fdsHalf, fdsEnd: fdsEnd}
}
