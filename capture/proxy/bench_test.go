package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/internal/procstat"
	"github.com/capbench/capbench/internal/stats"
)

// benchClient is a pooled client large enough for the highest concurrency.
func benchClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 512
	return &http.Client{Transport: t}
}

// microsPerCall is d, a span of process CPU spent on n calls, in
// microseconds per call.
func microsPerCall(d time.Duration, n int) float64 {
	return float64(d.Microseconds()) / float64(n)
}

// smallChatBody is the small non-streaming chat call the throughput
// benchmarks send.
var smallChatBody = []byte(`{"model":"policy","max_tokens":4,"messages":[{"role":"user","content":"say hi"}]}`)

// benchFake starts a fake vLLM serving "policy" with opts for one benchmark,
// closed when the benchmark ends.
func benchFake(b *testing.B, opts vllm.Options) *vllm.Server {
	b.Helper()
	opts.ServedModelNames = []string{"policy"}
	fake, err := vllm.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := fake.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fake.Close() })
	return fake
}

// benchProxy starts a capture proxy over st that asks upstream for token
// ids, closed when the benchmark ends.
func benchProxy(b *testing.B, upstream string, st proxy.Store) *proxy.Proxy {
	b.Helper()
	p, err := proxy.New(proxy.Options{Upstream: upstream, Store: st, RequestTokenIDs: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

// bareReverseProxy starts the standard library's reverse proxy, without
// capture, in front of upstream and returns its URL: the peer for the
// capture proxy's own cost. It is closed when the benchmark ends.
func bareReverseProxy(b *testing.B, upstream string) string {
	b.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = benchClient().Transport
	bare := httptest.NewServer(rp)
	b.Cleanup(bare.Close)
	return bare.URL
}

// runLoad sends b.N small non-streaming chat calls with c workers and
// returns the sorted latencies.
func runLoad(b *testing.B, client *http.Client, urlFor func(worker int) string, body []byte, c int) []time.Duration {
	b.Helper()
	lat := make([]time.Duration, b.N)
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, c)
	b.ResetTimer()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := urlFor(w)
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= b.N {
					return
				}
				start := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				lat[i] = time.Since(start)
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	slices.Sort(lat)
	return lat
}

func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(q*float64(len(sorted)-1))].Microseconds())
}

// storeMeanMicros reads the proxy's mean store latency for one operation.
func storeMeanMicros(b *testing.B, reg *prometheus.Registry, op string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "capbench_proxy_store_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op && m.GetHistogram().GetSampleCount() > 0 {
					h := m.GetHistogram()
					return h.GetSampleSum() / float64(h.GetSampleCount()) * 1e6
				}
			}
		}
	}
	return 0
}

// BenchmarkProxyOverhead measures the latency the proxy adds to a small
// non-streaming chat call, proxy vs direct against the same fake vLLM in the
// same run. The memory-store variant excludes fsync; the file-store variant
// reports the store's begin_call and put (fsync included) separately.
func BenchmarkProxyOverhead(b *testing.B) {
	fake := benchFake(b, vllm.Options{Lengths: vllm.Lengths{Mean: 4, StdDev: 0.01}})
	ctx := context.Background()
	body := smallChatBody
	client := benchClient()
	concurrency := []int{1, 16, 64}

	direct, directRate := map[int]float64{}, map[int]float64{}
	b.Run("direct", func(b *testing.B) {
		for _, c := range concurrency {
			b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
				lat := runLoad(b, client, func(int) string { return fake.URL() + "/v1/chat/completions" }, body, c)
				direct[c] = quantile(lat, 0.5)
				directRate[c] = float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(directRate[c], "calls/s")
				b.ReportMetric(direct[c], "p50-µs")
				b.ReportMetric(quantile(lat, 0.99), "p99-µs")
			})
		}
	})

	// The peer for the proxy's own cost: a bare reverse proxy (the
	// standard library's, no capture) in front of the same fake.
	bareRate := map[int]float64{}
	b.Run("bare-reverse-proxy", func(b *testing.B) {
		bare := bareReverseProxy(b, fake.URL())
		for _, c := range concurrency {
			b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
				lat := runLoad(b, client, func(int) string { return bare + "/v1/chat/completions" }, body, c)
				bareRate[c] = float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(bareRate[c], "calls/s")
				b.ReportMetric(quantile(lat, 0.5), "p50-µs")
				if d, ok := direct[c]; ok {
					b.ReportMetric(quantile(lat, 0.5)-d, "added-p50-µs")
					b.ReportMetric(bareRate[c]/directRate[c], "x-direct")
				}
			})
		}
	})

	variants := []struct {
		name  string
		store func(b *testing.B) proxy.Store
	}{
		{"proxy", func(*testing.B) proxy.Store { return store.NewMemoryStore() }},
		{"proxy-filestore", func(b *testing.B) proxy.Store {
			fs, err := store.NewFileStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			return fs
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			for _, c := range concurrency {
				b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
					reg := prometheus.NewRegistry()
					st := v.store(b)
					defer st.Close()
					p, err := proxy.New(proxy.Options{Upstream: fake.URL(), Store: st, RequestTokenIDs: true, Registry: reg})
					if err != nil {
						b.Fatal(err)
					}
					if err := p.Start(ctx); err != nil {
						b.Fatal(err)
					}
					defer p.Close()
					lat := runLoad(b, client, func(w int) string {
						return fmt.Sprintf("%s/ng-rollout/bench-%d-%d/training-token-capture/v1/chat/completions", p.URL(), c, w)
					}, body, c)
					p50 := quantile(lat, 0.5)
					b.ReportMetric(p50, "p50-µs")
					b.ReportMetric(quantile(lat, 0.99), "p99-µs")
					rate := float64(b.N) / b.Elapsed().Seconds()
					b.ReportMetric(rate, "calls/s")
					if d, ok := direct[c]; ok {
						b.ReportMetric(p50-d, "added-p50-µs")
						b.ReportMetric(rate/directRate[c], "x-direct")
					}
					if r, ok := bareRate[c]; ok {
						b.ReportMetric(rate/r, "x-bare-proxy")
					}
					storeMicros := storeMeanMicros(b, reg, "begin_call") + storeMeanMicros(b, reg, "put")
					b.ReportMetric(storeMicros, "store-mean-µs")
				})
			}
		})
	}
}

// BenchmarkProxyLargeCall measures the added latency for one training-sized
// call (a prompt of several thousand tokens, 1k generated tokens), memory
// store, concurrency 1. Its direct baseline asks the engine for the same
// token information the proxy asks for, so the difference is the proxy's own
// work (decoding, recording, re-encoding) plus one loopback hop.
func BenchmarkProxyLargeCall(b *testing.B) {
	fake := benchFake(b, vllm.Options{MaxModelLen: 65536, Lengths: vllm.Lengths{Mean: 1000, StdDev: 0.01, Min: 1000}})
	ctx := context.Background()
	long := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog "), 800)
	body := []byte(fmt.Sprintf(`{"model":"policy","max_tokens":1000,"messages":[{"role":"user","content":%q}]}`, long))
	directBody := []byte(fmt.Sprintf(`{"model":"policy","max_tokens":1000,"logprobs":true,"top_logprobs":0,`+
		`"return_tokens_as_token_ids":true,"return_token_ids":true,"messages":[{"role":"user","content":%q}]}`, long))
	client := benchClient()
	var direct float64
	b.Run("direct", func(b *testing.B) {
		lat := runLoad(b, client, func(int) string { return fake.URL() + "/v1/chat/completions" }, directBody, 1)
		direct = quantile(lat, 0.5)
		b.ReportMetric(direct, "p50-µs")
	})
	b.Run("proxy", func(b *testing.B) {
		p, err := proxy.New(proxy.Options{Upstream: fake.URL(), Store: store.NewMemoryStore(), RequestTokenIDs: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		lat := runLoad(b, client, func(int) string {
			return p.URL() + "/ng-rollout/large/training-token-capture/v1/chat/completions"
		}, body, 1)
		p50 := quantile(lat, 0.5)
		b.ReportMetric(p50, "p50-µs")
		b.ReportMetric(p50-direct, "added-p50-µs")
	})
}

// BenchmarkProxyOverheadRounds is BenchmarkProxyOverhead's c=16 memory-store
// comparison in alternating rounds: each round sends b.N calls directly to
// the fake, through a TCP relay that only frames messages (the second hop
// alone, see tcpRelay), through a bare standard-library reverse proxy and
// through the capture proxy (as a chat call, and as the same call in the
// Anthropic Messages dialect Claude Code sends, which the proxy translates to
// chat), in an order that rotates, so a machine that slows down mid-run slows
// every leg. It reports the medians over the rounds of each round's ratios
// and added p50 latencies.
func BenchmarkProxyOverheadRounds(b *testing.B) {
	fake := benchFake(b, vllm.Options{Lengths: vllm.Lengths{Mean: 4, StdDev: 0.01}})
	bare := bareReverseProxy(b, fake.URL())
	relay := tcpRelay(b, strings.TrimPrefix(fake.URL(), "http://"))
	p := benchProxy(b, fake.URL(), store.NewMemoryStore())
	client := benchClient()
	const c, rounds = 16, 6
	captured := func(api string) func(r, w int) string {
		return func(r, w int) string {
			return fmt.Sprintf("%s/ng-rollout/rounds-%s-%d-%d/training-token-capture/v1/%s", p.URL(), path.Base(api), r, w, api)
		}
	}
	legs := []struct {
		name string
		url  func(r, w int) string
	}{
		{"direct", func(int, int) string { return fake.URL() + "/v1/chat/completions" }},
		{"relay", func(int, int) string { return relay + "/v1/chat/completions" }},
		{"bare", func(int, int) string { return bare + "/v1/chat/completions" }},
		{"proxy", captured("chat/completions")},
		{"messages", captured("messages")},
	}
	n := max(b.N, c)
	var relayX, bareX, proxyX, proxyXBare, messagesX, bareAdded, proxyAdded, messagesAdded []float64
	var directCPU, relayAddedCPU, bareAddedCPU, proxyAddedCPU []float64
	b.ResetTimer()
	for r := range rounds {
		rate := map[string]float64{}
		p50 := map[string]float64{}
		cpu := map[string]float64{}
		for k := range legs {
			leg := legs[(k+r)%len(legs)]
			// The small chat body is a valid Messages request as it stands.
			cpu0 := procstat.CPU()
			rt, med := closedLoopLatency(b, client, func(w, _ int) string { return leg.url(r, w) }, smallChatBody, c, n)
			cpu[leg.name] = microsPerCall(procstat.CPU()-cpu0, n)
			rate[leg.name], p50[leg.name] = rt, float64(med.Microseconds())
		}
		directCPU = append(directCPU, cpu["direct"])
		relayAddedCPU = append(relayAddedCPU, cpu["relay"]-cpu["direct"])
		bareAddedCPU = append(bareAddedCPU, cpu["bare"]-cpu["direct"])
		proxyAddedCPU = append(proxyAddedCPU, cpu["proxy"]-cpu["direct"])
		relayX = append(relayX, rate["relay"]/rate["direct"])
		bareX = append(bareX, rate["bare"]/rate["direct"])
		proxyX = append(proxyX, rate["proxy"]/rate["direct"])
		proxyXBare = append(proxyXBare, rate["proxy"]/rate["bare"])
		messagesX = append(messagesX, rate["messages"]/rate["direct"])
		bareAdded = append(bareAdded, p50["bare"]-p50["direct"])
		proxyAdded = append(proxyAdded, p50["proxy"]-p50["direct"])
		messagesAdded = append(messagesAdded, p50["messages"]-p50["direct"])
	}
	b.StopTimer()
	b.ReportMetric(stats.Median(proxyX), "x-direct")
	b.ReportMetric(stats.Median(relayX), "relay-x-direct")
	b.ReportMetric(stats.Median(bareX), "bare-x-direct")
	b.ReportMetric(stats.Median(proxyXBare), "x-bare-proxy")
	b.ReportMetric(stats.Median(messagesX), "messages-x-direct")
	b.ReportMetric(stats.Median(proxyAdded), "added-p50-µs")
	b.ReportMetric(stats.Median(bareAdded), "bare-added-p50-µs")
	b.ReportMetric(stats.Median(messagesAdded), "messages-added-p50-µs")
	// CPU per call (client, fake, proxy and kernel, all in this process):
	// with the CPUs busy, throughput is about their inverse, so 0.5x direct
	// needs the proxy's added CPU at or under direct's own.
	b.ReportMetric(stats.Median(directCPU), "direct-cpu-µs/call")
	b.ReportMetric(stats.Median(relayAddedCPU), "relay-added-cpu-µs/call")
	b.ReportMetric(stats.Median(bareAddedCPU), "bare-added-cpu-µs/call")
	b.ReportMetric(stats.Median(proxyAddedCPU), "added-cpu-µs/call")
	b.ReportMetric(slices.Min(proxyX), "x-direct-min")
	b.ReportMetric(slices.Max(proxyX), "x-direct-max")
}
