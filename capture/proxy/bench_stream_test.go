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
// (streaming pass-through, memory store) and through it with
// BufferedStreams (NeMo Gym's behaviour), alternating the three within each
// iteration so they share the machine's state.
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
	start := func(buffered bool) *proxy.Proxy {
		p, err := proxy.New(proxy.Options{Upstream: fake.URL(), Store: store.NewMemoryStore(), BufferedStreams: buffered})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			b.Fatal(err)
		}
		return p
	}
	streaming, buffered := start(false), start(true)
	defer streaming.Close()
	defer buffered.Close()
	body := []byte(`{"model":"policy","max_tokens":250,"stream":true,"messages":[{"role":"user","content":"tell me a long story"}]}`)
	client := benchClient()
	targets := []struct{ name, url string }{
		{"direct", fake.URL() + "/v1/chat/completions"},
		{"proxy", streaming.URL() + "/ng-rollout/ttft/training-token-capture/v1/chat/completions"},
		{"buffered", buffered.URL() + "/ng-rollout/ttft-b/training-token-capture/v1/chat/completions"},
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
}
