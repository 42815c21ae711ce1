package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/internal/procstat"
	"github.com/capbench/capbench/internal/stats"
)

const (
	peerConns    = 64
	peerDuration = 2 * time.Second
	streamChunks = 64
)

var (
	plainReply  = []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1}}`)
	streamReply = func() []byte {
		var b strings.Builder
		for range streamChunks {
			b.WriteString(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"}}]}` + "\n\n")
		}
		b.WriteString(`data: {"id":"x","choices":[],"usage":{"prompt_tokens":5,"total_tokens":69,"completion_tokens":64}}` + "\n\ndata: [DONE]\n\n")
		return []byte(b.String())
	}()
)

// trivialServer starts this test binary again as a trivial net/http server
// in its own process (so it does not share a Go runtime with the load
// generator, just as it does not with wrk) and returns its URL.
func trivialServer(b *testing.B, kind string) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestTrivialServerProcess$")
	cmd.Env = append(os.Environ(), "CAPBENCH_TRIVIAL_SERVER="+kind)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("trivial server: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestTrivialServerProcess is the server process of trivialServer; it does
// nothing in a normal test run. It serves for at most a minute.
func TestTrivialServerProcess(t *testing.T) {
	kind := os.Getenv("CAPBENCH_TRIVIAL_SERVER")
	if kind == "" {
		t.Skip("only run as trivialServer's child process")
	}
	body, ct := plainReply, "application/json"
	if kind == "stream" {
		body, ct = streamReply, "text/event-stream"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(body)
	})}
	time.AfterFunc(time.Minute, func() { _ = srv.Close() })
	fmt.Println("http://" + ln.Addr().String())
	_ = srv.Serve(ln)
}

var wrkRate = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

// wrkRequestsPerSecond runs wrk against url, POSTing body as the load
// generator does, so both make the server read the same request.
func wrkRequestsPerSecond(b *testing.B, url string, body []byte) float64 {
	path, err := exec.LookPath("wrk")
	if err != nil {
		b.Skip("wrk is not installed (apt-get install wrk): no peer to compare with")
	}
	script := filepath.Join(b.TempDir(), "post.lua")
	lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = %q\n", body)
	if err := os.WriteFile(script, []byte(lua), 0o600); err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(path, "-t2", fmt.Sprintf("-c%d", peerConns), "-d"+peerDuration.String(), "-s", script, url+"/v1/chat/completions").CombinedOutput()
	if err != nil {
		b.Fatalf("wrk: %v\n%s", err, out)
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		b.Fatalf("wrk printed no rate:\n%s", out)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// ourRequestsPerSecond runs the load generator against url and returns its
// request and token rates and its CPU µs per request.
func ourRequestsPerSecond(b *testing.B, url string, bodies [][]byte, stream bool) (rate, tokens, cpuPerReq float64) {
	w := &bench.ChatWorkload{Client: bench.NewHTTPClient(peerConns), Bodies: bodies, Stream: stream,
		Endpoints: map[bench.Path]bench.Endpoint{bench.PathTarget: {Base: url}}}
	cpu0 := procstat.CPU()
	out, err := bench.RunLoad(context.Background(), bench.LoadConfig{Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: peerConns}}, Duration: peerDuration}, w)
	if err != nil {
		b.Fatal(err)
	}
	cpu := procstat.CPU() - cpu0
	s := bench.Summarize(out.Samples, out.Stages, bench.SLO{})[0]
	if s.Failed > 0 {
		b.Fatalf("%d requests failed: %s", s.Failed, s.FirstError)
	}
	return s.RequestThroughput, s.OutputThroughput, float64(cpu.Microseconds()) / float64(max(s.Completed, 1))
}

// peerBodies are the chat requests both load generators send: short
// prompts, 64 output tokens, and a body field the workload passes through.
func peerBodies(b *testing.B, stream bool) [][]byte {
	bodies, err := bench.BuildChatBodies(bench.ChatSpec{Model: "m", Prompt: bench.Dist{Kind: "fixed", A: 8}, Output: bench.Dist{Kind: "fixed", A: 64}, Stream: stream,
		Extra: map[string]any{"ignore_eos": true}})
	if err != nil {
		b.Fatal(err)
	}
	return bodies
}

// peerRounds alternate wrk and the load generator so both see the same
// machine conditions; the ratio reported is the median of the rounds'.
const peerRounds = 3

// BenchmarkLoadGeneratorVsWrk drives a trivial server (its own process) with
// wrk and with the load generator, 64 connections each, alternating rounds in
// one run, and reports the median ratio, for plain replies and for 64-chunk
// SSE streams.
func BenchmarkLoadGeneratorVsWrk(b *testing.B) {
	for _, tc := range []struct {
		name   string
		stream bool
	}{{"plain", false}, {"stream", true}} {
		b.Run(tc.name, func(b *testing.B) {
			url := trivialServer(b, tc.name)
			bodies := peerBodies(b, tc.stream)
			var wrks, ours, ratios, toks, cpus []float64
			for range b.N {
				for range peerRounds {
					w := wrkRequestsPerSecond(b, url, bodies[0])
					o, t, c := ourRequestsPerSecond(b, url, bodies, tc.stream)
					wrks, ours, toks, ratios = append(wrks, w), append(ours, o), append(toks, t), append(ratios, o/w)
					cpus = append(cpus, c)
				}
			}
			b.ReportMetric(stats.Median(cpus), "capbench-cpu-µs/req")
			b.ReportMetric(stats.Median(wrks), "wrk-req/s")
			b.ReportMetric(stats.Median(ours), "capbench-req/s")
			b.ReportMetric(stats.Median(ratios), "ratio")
			if tc.stream {
				b.ReportMetric(stats.Median(toks), "capbench-tok/s")
				b.ReportMetric(stats.Median(wrks)*streamChunks, "wrk-tok/s")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
