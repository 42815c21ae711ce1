package vllm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capbench/capbench/fakes/vllm"
)

const benchConcurrency = 64

func benchServer(b *testing.B) (*vllm.Server, *http.Client) {
	b.Helper()
	s, err := vllm.New(vllm.Options{Lengths: vllm.Lengths{Mean: 100000, StdDev: 1}})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return s, &http.Client{Transport: tr}
}

// runParallel runs body from 64 goroutines. The tokens are the ones the
// fake's ledger says it generated, not what the request asked for.
func runParallel(b *testing.B, body func(c *http.Client, url string)) (reqs, tokens int64, elapsed time.Duration) {
	s, c := benchServer(b)
	url := s.URL() + "/v1/chat/completions"
	b.SetParallelism((benchConcurrency + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var nReq atomic.Int64
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body(c, url)
			nReq.Add(1)
		}
	})
	elapsed = time.Since(start)
	b.StopTimer()
	for _, e := range s.Ledger() {
		tokens += int64(len(e.GeneratedTokenIDs))
	}
	return nReq.Load(), tokens, elapsed
}

func benchPost(b *testing.B, c *http.Client, url string, payload []byte) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		b.Error(err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("status %d", resp.StatusCode)
	}
}

// BenchmarkChatNonStreaming: zero-latency non-streaming chat at concurrency 64.
func BenchmarkChatNonStreaming(b *testing.B) {
	payload := []byte(`{"model":"Qwen/Qwen3-4B-Thinking-2507","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}`)
	reqs, _, elapsed := runParallel(b, func(c *http.Client, url string) {
		benchPost(b, c, url, payload)
	})
	b.ReportMetric(float64(reqs)/elapsed.Seconds(), "req/s")
}

// BenchmarkChatStreaming: zero-latency streaming chat, 256 tokens per
// request, at concurrency 64.
func BenchmarkChatStreaming(b *testing.B) {
	payload := []byte(`{"model":"Qwen/Qwen3-4B-Thinking-2507","messages":[{"role":"user","content":"Write a long story."}],"max_tokens":256,"stream":true}`)
	_, tokens, elapsed := runParallel(b, func(c *http.Client, url string) {
		benchPost(b, c, url, payload)
	})
	b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tok/s")
}

// BenchmarkChatHandler measures the server's own work per non-streaming
// request, without sockets or a client.
func BenchmarkChatHandler(b *testing.B) {
	s, err := vllm.New(vllm.Options{Lengths: vllm.Lengths{Mean: 100000, StdDev: 1}})
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"model":"Qwen/Qwen3-4B-Thinking-2507","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}`)
	// One request and one writer, reset each round: the figure is the
	// handler's alone, not httptest's.
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(payload))
	body := bytes.NewReader(payload)
	w := &discardWriter{h: http.Header{}}
	h := s.Handler()
	b.ReportAllocs()
	for b.Loop() {
		body.Reset(payload)
		req.Body = io.NopCloser(body)
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}

// BenchmarkDecodeChatRequest is the fast path of the chat request decoder
// on a small call and on a 200-message conversation of about 130 KB, the
// size of a long agent rollout's late calls.
func BenchmarkDecodeChatRequest(b *testing.B) {
	small := []byte(`{"model":"Qwen/Qwen3-4B-Thinking-2507","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}`)
	var msgs []map[string]any
	for i := range 200 {
		msgs = append(msgs, map[string]any{"role": []string{"user", "assistant"}[i%2], "content": strings.Repeat("check the build log and report what failed ", 15)})
	}
	large, err := json.Marshal(map[string]any{"model": "policy", "messages": msgs, "max_tokens": 8})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		body []byte
	}{{"small", small}, {"200-messages", large}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if !vllm.DecodeChatFast(c.body) {
					b.Fatal("the fast path refused the body")
				}
			}
		})
	}
}
