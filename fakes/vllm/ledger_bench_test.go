package vllm_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/internal/procstat"
)

// BenchmarkLedgerUptime serves chat calls with 27k-token prompts, as a
// long-rollout load test sends them, and measures the live heap (after a
// collection) once half the calls are served and again at the end, with
// the ledger bounded in bytes (16 MiB here; 256 MiB by default) and, in the
// same run, without a byte bound. It reports the heap each call adds over
// the second half: flat is near 0 once the bound is reached, while the
// unbounded ledger keeps every generation. CAPBENCH_BENCH_CALLS sets the
// calls per leg (default 1,200).
func BenchmarkLedgerUptime(b *testing.B) {
	n := 1200
	if v, err := strconv.Atoi(os.Getenv("CAPBENCH_BENCH_CALLS")); err == nil && v > 1 {
		n = v
	}
	text := strings.Repeat("the build log shows a failing test in the parser module ", 1930)
	for _, leg := range []struct {
		name  string
		bound int64
	}{{"bounded", 16 << 20}, {"unbounded", -1}} {
		var perCall, heapHalf, heapEnd, held, prompt float64
		for it := 0; it < b.N; it++ {
			s, err := vllm.New(vllm.Options{LedgerMaxBytes: leg.bound, MaxModelLen: 65536})
			if err != nil {
				b.Fatal(err)
			}
			serve := func(from, to int) float64 {
				for i := from; i < to; i++ {
					body := fmt.Sprintf(`{"model":"Qwen/Qwen3-4B-Thinking-2507","messages":[{"role":"user","content":"call %d: %s"}],"max_tokens":8}`, i, text)
					req, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader([]byte(body)))
					req.Header.Set("Content-Type", "application/json")
					w := &discardWriter{h: http.Header{}}
					s.Handler().ServeHTTP(w, req)
					if w.status != http.StatusOK {
						b.Fatalf("status %d", w.status)
					}
				}
				return float64(procstat.LiveHeap())
			}
			half := serve(0, n/2)
			end := serve(n/2, n)
			_, bytes, _ := s.LedgerStats()
			led := s.Ledger()
			perCall += (end - half) / float64(n-n/2)
			heapHalf += half
			heapEnd += end
			held += float64(bytes)
			prompt += float64(len(led[len(led)-1].PromptTokenIDs))
			runtime.KeepAlive(s)
		}
		k := float64(b.N)
		b.ReportMetric(perCall/k, leg.name+"-heap-B/call")
		b.ReportMetric(heapHalf/k/(1<<20), leg.name+"-heap-MiB@half")
		b.ReportMetric(heapEnd/k/(1<<20), leg.name+"-heap-MiB@end")
		b.ReportMetric(held/k/(1<<20), leg.name+"-ledger-MiB")
		b.ReportMetric(prompt/k, "prompt-tokens")
	}
	b.ReportMetric(float64(n), "calls")
}
