package vllm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capbench/capbench/fakes/vllm"
)

// The peer: llm-d-inference-sim, a Go vLLM simulator, built from its public
// source (docs/inference-sim-peer.md). The repository does not hold it, so it runs when
// simBinEnv names a built binary.
const simBinEnv = "CAPBENCH_SIM_BIN"

// fakeHelperEnv makes the re-executed test binary serve one fake vLLM and
// print its address, so the fake runs in a process of its own as the peer
// does, and neither shares its CPU scheduler with the load client.
const fakeHelperEnv = "CAPBENCH_FAKE_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(fakeHelperEnv) != "" {
		os.Exit(serveFakeHelper())
	}
	os.Exit(m.Run())
}

// serveFakeHelper serves a fake vLLM whose generations run to max_tokens
// until its standard input closes.
func serveFakeHelper() int {
	fake, err := vllm.New(vllm.Options{Lengths: vllm.Lengths{Mean: 100000, StdDev: 1}})
	if err == nil {
		err = fake.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer func() { _ = fake.Close() }()
	fmt.Println(strings.TrimPrefix(fake.URL(), "http://"))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startFakeProcess starts the fake in a process of its own and returns its
// address; it stops when the benchmark ends.
func startFakeProcess(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fakeHelperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("fake process: %v", err)
	}
	return strings.TrimSpace(addr)
}

// startSim starts llm-d-inference-sim from bin on a free port and returns
// its address once it answers; it is killed when the benchmark ends.
func startSim(b *testing.B, bin, model string) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--model", model, "--port", strconv.Itoa(port), "--force-dummy-tokenizer",
		"--mode", "random", "--max-num-seqs", "256", "--max-model-len", "4096")
	if err := cmd.Start(); err != nil {
		b.Fatalf("%s=%s: %v", simBinEnv, bin, err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/v1/models"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
	}
	b.Fatalf("llm-d-inference-sim (%s) did not answer on %s within 30 s", bin, addr)
	return ""
}

// completionTokens asks addr once, without streaming, and returns the reply's
// usage.completion_tokens.
func completionTokens(b *testing.B, addr string, payload []byte) int {
	b.Helper()
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(string(payload)))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var reply struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		b.Fatalf("%s: %v", addr, err)
	}
	return reply.Usage.CompletionTokens
}

// BenchmarkFakeVsInferenceSim compares the fake's chat throughput with
// llm-d-inference-sim's, each in a process of its own, at concurrency 64,
// non-streaming and streaming, 16 generated tokens a call (both asked to
// ignore EOS), in alternating bursts from the same raw keep-alive client.
// Without the peer (CAPBENCH_SIM_BIN unset) it measures the fake alone.
func BenchmarkFakeVsInferenceSim(b *testing.B) {
	const model, tokens = "Qwen/Qwen3-4B-Thinking-2507", 16
	body := func(stream bool) []byte {
		return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":%d,"ignore_eos":true,"stream":%t}`, model, tokens, stream)
	}
	fake := startFakeProcess(b)
	sim := ""
	if bin := os.Getenv(simBinEnv); bin != "" {
		sim = startSim(b, bin, model)
	} else {
		fmt.Fprintf(os.Stderr, "llm-d-inference-sim peer not run: set %s to a built llm-d-inference-sim binary (docs/inference-sim-peer.md)\n", simBinEnv)
	}
	for _, addr := range []string{fake, sim} {
		if addr == "" {
			continue
		}
		if n := completionTokens(b, addr, body(false)); n != tokens {
			b.Fatalf("%s generated %d tokens, not %d: the comparison would not be like for like", addr, n, tokens)
		}
	}
	for _, stream := range []bool{false, true} {
		b.Run(fmt.Sprintf("stream=%t", stream), func(b *testing.B) {
			benchAgainstSim(b, fake, sim, body(stream), tokens)
		})
	}
}

func benchAgainstSim(b *testing.B, fake, sim string, payload []byte, tokens int) {
	const conns, perConn = benchConcurrency, 20
	fc := dialRaw(b, fake, "/v1/chat/completions", payload, conns)
	var sc *rawClient
	if sim != "" {
		sc = dialRaw(b, sim, "/v1/chat/completions", payload, conns)
	}
	var fakeTime, simTime time.Duration
	i := 0
	for b.Loop() {
		// Alternate which goes first, so a machine that slows down mid-run
		// slows both.
		order := []*rawClient{fc, sc}
		if i%2 == 1 {
			order[0], order[1] = sc, fc
		}
		i++
		for _, rc := range order {
			if rc == nil {
				continue
			}
			d, err := rc.burst(perConn)
			if err != nil {
				b.Fatal(err)
			}
			if rc == fc {
				fakeTime += d
			} else {
				simTime += d
			}
		}
	}
	reqs := float64(b.N * conns * perConn)
	b.ReportMetric(reqs/fakeTime.Seconds(), "fake-req/s")
	b.ReportMetric(reqs*float64(tokens)/fakeTime.Seconds(), "fake-tok/s")
	if sc != nil {
		b.ReportMetric(reqs/simTime.Seconds(), "sim-req/s")
		b.ReportMetric(reqs*float64(tokens)/simTime.Seconds(), "sim-tok/s")
		b.ReportMetric(simTime.Seconds()/fakeTime.Seconds(), "fake/sim")
	}
}
