package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/internal/procstat"
	"github.com/capbench/capbench/internal/stats"
)

// firstContent matches a chat chunk that carries generated text.
var firstContent = regexp.MustCompile(`"(content|reasoning)":"[^"]`)

// streamOnce sends one streaming chat call and returns the time to its first
// generated text and to its end.
func streamOnce(client *http.Client, url string, body []byte) (ttft, total time.Duration, err error) {
	start := time.Now()
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, rerr := br.ReadSlice('\n')
		if ttft == 0 && bytes.HasPrefix(line, []byte("data: ")) && firstContent.Match(line) {
			ttft = time.Since(start)
		}
		if rerr != nil {
			break
		}
	}
	return ttft, time.Since(start), nil
}

// BenchmarkStreamTTFT measures the time to first token of a long streamed
// chat generation (the fake's timing model: 20 ms to the first token, 2 ms
// per token, 250 tokens) at concurrency 1, direct, through the capture proxy
// (streaming pass-through, memory store), the same over the file store (the
// call intent synced while the engine works on the first token), and
// through it with BufferedStreams (NeMo Gym's behaviour), alternating the
// four within each iteration so they share the machine's state.
func BenchmarkStreamTTFT(b *testing.B) {
	fake, err := vllm.New(vllm.Options{ServedModelNames: []string{"policy"},
		Timing:  vllm.Timing{TTFT: 20 * time.Millisecond, InterTokenLatency: 2 * time.Millisecond},
		Lengths: vllm.Lengths{Mean: 250, StdDev: 0.01, Min: 250}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := fake.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer fake.Close()
	start := func(buffered bool, st proxy.Store) *proxy.Proxy {
		p, err := proxy.New(proxy.Options{Upstream: fake.URL(), Store: st, BufferedStreams: buffered})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			b.Fatal(err)
		}
		return p
	}
	streaming, buffered := start(false, store.NewMemoryStore()), start(true, store.NewMemoryStore())
	onDisk := start(false, benchFileStore(b, b.TempDir()))
	defer streaming.Close()
	defer buffered.Close()
	defer onDisk.Close()
	body := []byte(`{"model":"policy","max_tokens":250,"stream":true,"messages":[{"role":"user","content":"tell me a long story"}]}`)
	client := benchClient()
	targets := []struct{ name, url string }{
		{"direct", fake.URL() + "/v1/chat/completions"},
		{"proxy", streaming.URL() + "/ng-rollout/ttft/training-token-capture/v1/chat/completions"},
		{"buffered", buffered.URL() + "/ng-rollout/ttft-b/training-token-capture/v1/chat/completions"},
		{"proxy-file", onDisk.URL() + "/ng-rollout/ttft-f/training-token-capture/v1/chat/completions"},
	}
	ttfts := make([][]time.Duration, len(targets))
	totals := make([][]time.Duration, len(targets))
	b.ResetTimer()
	for range b.N {
		for i, t := range targets {
			ttft, total, err := streamOnce(client, t.url, body)
			if err != nil {
				b.Fatalf("%s: %v", t.name, err)
			}
			ttfts[i] = append(ttfts[i], ttft)
			totals[i] = append(totals[i], total)
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	for i, t := range targets {
		b.ReportMetric(med(ttfts[i]), t.name+"-ttft-ms")
		b.ReportMetric(med(totals[i]), t.name+"-total-ms")
	}
	b.ReportMetric(med(ttfts[1])-med(ttfts[0]), "proxy-added-ttft-ms")
	b.ReportMetric(med(ttfts[3])-med(ttfts[0]), "file-added-ttft-ms")
}

// BenchmarkStreamTokenCPU is the process CPU per generated token of a
// 1,000-token streamed chat call at concurrency 1 with a fake that
// generates at once: direct with the token fields the proxy asks for, and
// through the capture proxy (streaming pass-through, memory store), in
// alternating rounds. Every chunk through the proxy is decoded for the
// record and rewritten without the token fields.
func BenchmarkStreamTokenCPU(b *testing.B) {
	const tokens, rounds = 1000, 4
	fake := benchFake(b, vllm.Options{Lengths: vllm.Lengths{Mean: tokens, StdDev: 0.01, Min: tokens}})
	p := benchProxy(b, fake.URL(), store.NewMemoryStore())
	client := benchClient()
	body := []byte(`{"model":"policy","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"say hi"}]}`)
	directBody := []byte(`{"model":"policy","max_tokens":1000,"stream":true,"logprobs":true,"top_logprobs":0,` +
		`"return_token_ids":true,"return_tokens_as_token_ids":true,"stream_options":{"include_usage":true},` +
		`"messages":[{"role":"user","content":"say hi"}]}`)
	cpu := map[string][]float64{}
	b.ResetTimer()
	for r := range rounds {
		for k := range 2 {
			leg := []string{"direct", "proxy"}[(k+r)%2]
			cpu0 := procstat.CPU()
			for i := range b.N {
				url, bd := fake.URL()+"/v1/chat/completions", directBody
				if leg == "proxy" {
					url, bd = fmt.Sprintf("%s/ng-rollout/stream-cpu-%d-%d/training-token-capture/v1/chat/completions", p.URL(), r, i), body
				}
				if _, _, err := streamOnce(client, url, bd); err != nil {
					b.Fatal(err)
				}
			}
			cpu[leg] = append(cpu[leg], float64((procstat.CPU()-cpu0).Nanoseconds())/1e3/float64(b.N*tokens))
		}
	}
	b.StopTimer()
	b.ReportMetric(stats.Median(cpu["direct"]), "direct-cpu-µs/token")
	b.ReportMetric(stats.Median(cpu["proxy"]), "proxy-cpu-µs/token")
	b.ReportMetric(stats.Median(cpu["proxy"])/stats.Median(cpu["direct"]), "proxy/direct")
}
