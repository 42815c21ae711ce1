package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
)

// messagesBody is a Claude-Code-shaped Messages request of about size
// bytes: a system prompt and alternating user / assistant text turns.
func messagesBody(size int) []byte {
	turn := strings.Repeat("the quick brown fox jumps over the lazy dog, again and again. ", 160) // ~10 KB
	var msgs []any
	for n := 0; n < size; n += len(turn) + 64 {
		role := "user"
		if len(msgs)%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": []any{map[string]any{"type": "text", "text": turn}}})
	}
	if len(msgs)%2 == 0 {
		msgs = append(msgs, map[string]any{"role": "user", "content": "go on"})
	}
	b, _ := json.Marshal(map[string]any{"model": "policy", "max_tokens": 4, "system": "You are a helpful agent.", "messages": msgs})
	return b
}

// cannedEngine answers every chat call with one fixed vLLM reply (taken
// from the fake), without parsing the request, so that the bytes a
// benchmark or spec counts are the proxy's own.
func cannedEngine() (*httptest.Server, error) {
	fake, err := vllm.New(vllm.Options{ServedModelNames: []string{"policy"}, Lengths: vllm.Lengths{Mean: 4, StdDev: 0.01}})
	if err != nil {
		return nil, err
	}
	if err := fake.Start(context.Background()); err != nil {
		return nil, err
	}
	defer fake.Close()
	resp, err := http.Post(fake.URL()+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"policy","max_tokens":4,"logprobs":true,"top_logprobs":0,"return_tokens_as_token_ids":true,"return_token_ids":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return nil, err
	}
	reply, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	})), nil
}

// BenchmarkRequestBodyMemory reports the bytes the proxy allocates per
// byte of a Messages request body on the capture path (alloc-B/body-B) and
// the heap in use after the call, as a multiple of the body.
func BenchmarkRequestBodyMemory(b *testing.B) {
	engine, err := cannedEngine()
	if err != nil {
		b.Fatal(err)
	}
	defer engine.Close()
	client := benchClient()
	for _, size := range []int{1 << 20, 29 << 20} {
		body := messagesBody(size)
		b.Run(fmt.Sprintf("messages-%dMB", size>>20), func(b *testing.B) {
			p, err := proxy.New(proxy.Options{Upstream: engine.URL, Store: store.NewMemoryStore(), RequestTokenIDs: true,
				MaxBodyBytes: 64 << 20})
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := range b.N {
				url := fmt.Sprintf("%s/ng-rollout/mem-%d/training-token-capture/v1/messages", p.URL(), i)
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(len(body)), "alloc-B/body-B")
			b.ReportMetric(float64(len(body))/1e6, "body-MB")
		})
	}
}
