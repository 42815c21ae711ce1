package proxy_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/internal/procstat"
	"github.com/capbench/capbench/internal/stats"
	"github.com/capbench/capbench/internal/syncfloor"
)

// closedLoop sends n small chat calls with c workers; worker w sends its
// j-th call to urlFor(w, j). It returns the calls per second.
func closedLoop(b *testing.B, client *http.Client, urlFor func(w, j int) string, body []byte, c, n int) float64 {
	rate, _ := closedLoopLatency(b, client, urlFor, body, c, n)
	return rate
}

// closedLoopLatency is closedLoop that also returns the calls' median
// latency.
func closedLoopLatency(b *testing.B, client *http.Client, urlFor func(w, j int) string, body []byte, c, n int) (float64, time.Duration) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	lat := make([]time.Duration, n)
	start := time.Now()
	for w := range c {
		wg.Go(func() {
			for j := 0; ; j++ {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				resp, err := client.Post(urlFor(w, j), "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Store(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				lat[i] = time.Since(t0)
				if resp.StatusCode != http.StatusOK {
					failed.Store(fmt.Errorf("status %d", resp.StatusCode))
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	rate := float64(n) / time.Since(start).Seconds()
	slices.Sort(lat)
	return rate, lat[n/2]
}

// benchFileStore opens a file store in dir, closed when the benchmark ends
// (after a proxy started on it later: cleanups run last first).
func benchFileStore(b *testing.B, dir string) *store.FileStore {
	b.Helper()
	fs, err := store.NewFileStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fs.Close() })
	return fs
}

// BenchmarkProxyFileStore is the capture proxy over the file store (NeMo
// Gym's on-disk format; an intent and a record made durable per call) with 1,
// 16 and 64 concurrent rollouts and 1 or 50 small non-streaming calls per
// rollout, against the same fake vLLM called directly in the same run. One op
// is one call; each sub-benchmark reports the proxy's calls/s, the direct
// calls/s measured just before with as many calls, and their ratio; the
// calls/s of the same calls through a proxy over the memory store, measured
// between the two (x-memory: the file store's share of that ceiling, which
// no durable store can pass on the same CPUs); and the calls/s the disk
// allows for two appends per call each made durable with its own fdatasync,
// as Gym's store does, at the same concurrency (x-fdatasync: the proxy's
// calls/s over that; above 1 only because the store's group sync shares one
// sync among the calls waiting).
func BenchmarkProxyFileStore(b *testing.B) {
	fake := benchFake(b, vllm.Options{Lengths: vllm.Lengths{Mean: 4, StdDev: 0.01}})
	body := smallChatBody
	client := benchClient()
	// One directory for every run, removed at the end: on ext4 without a
	// journal a file created within minutes of a mass delete skips past
	// every recently freed inode (docs/store.md#file-creation-after-deletes), so
	// deleting each run's files would slow the next run's creations.
	root := b.TempDir()
	runs := 0
	dirFor := func(b *testing.B) string {
		runs++
		dir := filepath.Join(root, strconv.Itoa(runs))
		if err := os.Mkdir(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		return dir
	}
	for _, c := range []int{1, 16, 64} {
		for _, perRollout := range []int{1, 50} {
			b.Run(fmt.Sprintf("rollouts=%d/calls=%d", c, perRollout), func(b *testing.B) {
				fs := benchFileStore(b, dirFor(b))
				p := benchProxy(b, fake.URL(), fs)
				memProxy := benchProxy(b, fake.URL(), store.NewMemoryStore())
				n := max(b.N, c)
				// Two appends per call (intent, then record), each with its
				// own fdatasync: same writers, same calls.
				perFile, err := syncfloor.Measure(dirFor(b), c, n, 2)
				if err != nil {
					b.Fatal(err)
				}
				rolloutCalls := func(p *proxy.Proxy, leg string) func(w, j int) string {
					return func(w, j int) string {
						return fmt.Sprintf("%s/ng-rollout/%s-%d-%d-%d/training-token-capture/v1/chat/completions", p.URL(), leg, perRollout, w, j/perRollout)
					}
				}
				cpu0 := procstat.CPU()
				direct := closedLoop(b, client, func(int, int) string { return fake.URL() + "/v1/chat/completions" }, body, c, n)
				cpu1 := procstat.CPU()
				// The same proxy over the memory store: what the calls a
				// second would be if the durable appends cost nothing.
				memory := closedLoop(b, client, rolloutCalls(memProxy, "mem"), body, c, n)
				cpu2 := procstat.CPU()
				b.ResetTimer()
				sync0, start := syncStats(b, fs), time.Now()
				captured := closedLoop(b, client, rolloutCalls(p, "fs"), body, c, n)
				b.StopTimer()
				reportSyncs(b, syncStats(b, fs), sync0, time.Since(start))
				cpu3 := procstat.CPU()
				b.ReportMetric(captured, "calls/s")
				b.ReportMetric(direct, "direct-calls/s")
				b.ReportMetric(captured/direct, "ratio")
				b.ReportMetric(memory, "memory-calls/s")
				b.ReportMetric(captured/memory, "x-memory")
				b.ReportMetric(perFile, "fdatasync-calls/s")
				b.ReportMetric(captured/perFile, "x-fdatasync")
				// CPU (client, proxy, fake and kernel, all in this process)
				// moves far less with the machine's load than throughput.
				b.ReportMetric(microsPerCall(cpu3-cpu2, n), "cpu-µs/call")
				b.ReportMetric(microsPerCall(cpu1-cpu0, n), "direct-cpu-µs/call")
				b.ReportMetric(microsPerCall(cpu2-cpu1, n), "memory-cpu-µs/call")
			})
		}
	}
}

func syncStats(b *testing.B, fs *store.FileStore) store.SyncStats {
	b.Helper()
	ds, err := fs.DiskStats()
	if err != nil {
		b.Fatal(err)
	}
	return ds.Syncs
}

// reportSyncs reports what the store's syncs did over wall, from before to
// after: appends each sync covered, and the share of the time a sync was
// running (near 1, the disk's sync rate bounds the calls a second).
func reportSyncs(b *testing.B, after, before store.SyncStats, wall time.Duration) {
	d := after.Since(before)
	b.ReportMetric(d.AppendsPerSync(), "appends/sync")
	b.ReportMetric(d.Busy.Seconds()/wall.Seconds(), "sync-busy")
}

// BenchmarkProxyFileStoreProcs is BenchmarkProxyFileStore's 50 calls per
// rollout at 1, 16 and 64 rollouts with GOMAXPROCS at the CPU count and at
// twice it, in alternating rounds of b.N calls each, one proxy and store
// per sub-benchmark. A writer whose group sync has finished waits for a P
// behind the HTTP work of every other call; with more Ps than CPUs the
// kernel runs it as soon as it wakes (docs/store.md#group-commit).
func BenchmarkProxyFileStoreProcs(b *testing.B) {
	fake := benchFake(b, vllm.Options{Lengths: vllm.Lengths{Mean: 4, StdDev: 0.01}})
	client := benchClient()
	for _, c := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("rollouts=%d", c), func(b *testing.B) { benchProcs(b, fake, client, c) })
	}
}

func benchProcs(b *testing.B, fake *vllm.Server, client *http.Client, c int) {
	p := benchProxy(b, fake.URL(), benchFileStore(b, b.TempDir()))
	cpus := runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	const perRollout, rounds = 50, 6
	n := max(b.N, c)
	rate := map[int][]float64{}
	cpu := map[int][]float64{}
	b.ResetTimer()
	for r := range rounds {
		for _, procs := range []int{cpus, 2 * cpus} {
			if r%2 == 1 { // alternate which setting runs first
				procs = 3*cpus - procs
			}
			runtime.GOMAXPROCS(procs)
			cpu0 := procstat.CPU()
			rate[procs] = append(rate[procs], closedLoop(b, client, func(w, j int) string {
				return fmt.Sprintf("%s/ng-rollout/procs-%d-%d-%d-%d/training-token-capture/v1/chat/completions", p.URL(), r, procs, w, j/perRollout)
			}, smallChatBody, c, n))
			cpu[procs] = append(cpu[procs], microsPerCall(procstat.CPU()-cpu0, n))
		}
	}
	b.StopTimer()
	b.ReportMetric(stats.Median(rate[cpus]), "calls/s@cpus")
	b.ReportMetric(stats.Median(rate[2*cpus]), "calls/s@2xcpus")
	b.ReportMetric(stats.Median(rate[2*cpus])/stats.Median(rate[cpus]), "2xcpus/cpus")
	b.ReportMetric(stats.Median(cpu[cpus]), "cpu-µs/call@cpus")
	b.ReportMetric(stats.Median(cpu[2*cpus]), "cpu-µs/call@2xcpus")
}
