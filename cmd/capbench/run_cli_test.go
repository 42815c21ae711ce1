package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/scenarios"
)

var _ = Describe("capbench run", func() {
	It("runs scenarios on the embedded default and writes the rollouts, the result and the report", func(ctx SpecContext) {
		out := GinkgoT().TempDir()
		stdout, err := capbench(ctx, "run", "--scenario", "single-chain/stream,retry-final-call", "--out", out)
		Expect(err).NotTo(HaveOccurred(), stdout)
		Expect(stdout).To(ContainSubstring("single-chain/stream"))
		Expect(stdout).To(ContainSubstring("2 passed, 0 failed"))
		for _, f := range []string{"rollouts.jsonl", "result.json", "report.md"} {
			Expect(filepath.Join(out, f)).To(BeARegularFile())
		}
		raw, err := os.ReadFile(filepath.Join(out, "result.json"))
		Expect(err).NotTo(HaveOccurred())
		var res map[string]any
		Expect(json.Unmarshal(raw, &res)).To(Succeed())
		Expect(res).To(HaveKeyWithValue("schema", "capbench.run/v1"))
		rows := readJSONL(filepath.Join(out, "rollouts.jsonl"))
		Expect(rows).To(HaveLen(2))
		for _, row := range rows {
			Expect(row).To(HaveKey("_ng_token_capture"))
		}
		inputs := readJSONL(filepath.Join(out, "rollouts.input.jsonl"))
		Expect(inputs).To(HaveLen(2))
		for _, row := range inputs {
			Expect(row).NotTo(HaveKey("_ng_token_capture"), "the records before finalization")
		}

		By("every run's rollout can be explained afterwards")
		text, err := capbench(ctx, "explain", "--capture-dir", filepath.Join(out, "capture"),
			"--rollouts", filepath.Join(out, "rollouts.input.jsonl"), "retry-final-call-0")
		Expect(err).NotTo(HaveOccurred())
		Expect(text).To(ContainSubstring("Masked: no witness named the terminal call, and a call was retried"))
		_, err = capbench(ctx, "explain", "--capture-dir", filepath.Join(out, "capture"), "single-chain.stream-0")
		Expect(err).To(MatchError(And(ContainSubstring("already finalized"), ContainSubstring(filepath.Join(out, "rollouts.jsonl")))))
	})

	It("lists the catalog in short aligned lines, and in full with -v", func(ctx SpecContext) {
		stdout, err := capbench(ctx, "run", "--list")
		Expect(err).NotTo(HaveOccurred())
		Expect(stdout).To(ContainSubstring("lost-call"))
		Expect(stdout).To(ContainSubstring("missing-training-segment"))
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		col := -1
		for _, l := range lines[:len(lines)-2] {
			Expect(len([]rune(l))).To(BeNumerically("<=", 120), l)
			name := strings.Fields(l)[0]
			at := len(name) + strings.Index(l[len(name):], strings.TrimLeft(l[len(name):], " "))
			if col < 0 {
				col = at
			}
			Expect(at).To(Equal(col), "descriptions start in one column: %q", l)
		}
		verbose, err := capbench(ctx, "run", "--list", "-v")
		Expect(err).NotTo(HaveOccurred())
		Expect(len(verbose)).To(BeNumerically(">", len(stdout)))
	})

	It("says a run was interrupted, and exits non-zero", func(ctx SpecContext) {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, cancel)
		_, err := capbench(cctx, "run", "--out", GinkgoT().TempDir())
		Expect(err).To(MatchError(MatchRegexp(`^interrupted after \d+ of \d+ scenarios$`)))
	})

	It("runs the unscripted scenarios against a vLLM that takes no scripts, and skips the scripted ones", func(ctx SpecContext) {
		fake, err := vllm.New(vllm.Options{Model: scenarios.DefaultModel, MaxModelLen: 65536, EnableAutoToolChoice: true,
			ToolCallParser: "hermes", Port: 0})
		Expect(err).NotTo(HaveOccurred())
		Expect(fake.Start(ctx)).To(Succeed())
		DeferCleanup(fake.Close)
		target, err := url.Parse(fake.URL())
		Expect(err).NotTo(HaveOccurred())
		rp := passThrough(nil, func(*http.Request) *url.URL { return target }, nil)
		// A real vLLM: no /fake/ endpoints (no scripts, no ledger).
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/fake/") {
				http.NotFound(w, r)
				return
			}
			rp.ServeHTTP(w, r)
		}))
		DeferCleanup(srv.Close)
		out := GinkgoT().TempDir()
		stdout, err := capbench(ctx, "run", "--backend", "external", "--vllm-url", srv.URL,
			"--scenario", "unscripted-single-call/stream,unscripted-single-call/nonstream,single-chain/stream", "--out", out)
		Expect(err).NotTo(HaveOccurred(), stdout)
		Expect(stdout).To(ContainSubstring("2 passed, 0 failed, 1 skipped"))
	})

	It("prints its version", func(ctx SpecContext) {
		stdout, err := capbench(ctx, "--version")
		Expect(err).NotTo(HaveOccurred())
		Expect(stdout).To(MatchRegexp(`^capbench version \S+`))
	})

	It("does not report success when nothing ran", func(ctx SpecContext) {
		// A server that answers /health but takes no scripts, as a real vLLM:
		// every scripted scenario is skipped.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				return
			}
			http.NotFound(w, r)
		}))
		defer srv.Close()
		out := GinkgoT().TempDir()
		_, err := capbench(ctx, "run", "--backend", "external", "--vllm-url", srv.URL, "--scenario", "lost-call,single-chain/stream", "--out", out)
		Expect(err).To(MatchError(ContainSubstring("nothing ran: all 2 selected scenarios were skipped")))
	})

	DescribeTable("refuses bad invocations with a message that names the problem",
		func(ctx SpecContext, args []string, want string) {
			_, err := capbench(ctx, args...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("unknown scenario", []string{"run", "--scenario", "no-such-scenario", "--out", "-"}, "no-such-scenario"),
		Entry("mistyped scenario", []string{"run", "--scenario", "lost-cal"}, `did you mean "lost-call"? (`+"`capbench run --list`"),
		Entry("zero rollouts", []string{"run", "--rollouts", "0"}, "--rollouts 0: want at least 1"),
		Entry("zero concurrency", []string{"run", "--concurrency", "0"}, "--concurrency 0: want at least 1"),
		Entry("a flag the backend ignores", []string{"run", "--vllm-url", "http://127.0.0.1:8000"}, "--vllm-url does not apply to --backend inprocess"),
		Entry("an image without the vllm backend", []string{"run", "--backend", "process", "--image", "x"}, "--image does not apply to --backend process"),
		Entry("an external proxy without the fake behind it", []string{"run", "--backend", "external", "--proxy-url", "http://127.0.0.1:9", "--capture-dir", "."}, "needs --vllm-url"),
		Entry("a base URL ending in /v1", []string{"run", "--backend", "external", "--vllm-url", "http://127.0.0.1:8000/v1"}, "without /v1 (http://127.0.0.1:8000)"),
		Entry("a URL without a scheme", []string{"run", "--backend", "external", "--vllm-url", "127.0.0.1:8000"}, "want an absolute http://"),
		Entry("nothing listening, reported once as an environment error", []string{"run", "--backend", "external", "--vllm-url", "http://127.0.0.1:1"}, "environment: nothing answers at --vllm-url"),
		Entry("-v without --list", []string{"run", "-v"}, "-v goes with --list"),
		Entry("unknown backend", []string{"run", "--backend", "moon"}, "moon"),
		Entry("proxy without upstream", []string{"proxy"}, "upstream"),
		Entry("proxy with an unknown sync mode", []string{"proxy", "--upstream", "http://127.0.0.1:1", "--capture-dir", "never-created", "--sync", "sometimes"}, `--sync "sometimes": must be group`),
		Entry("bench with a malformed header", []string{"bench", "--url", "http://127.0.0.1:1", "--header", "nocolon"}, "Name: value"),
		Entry("bench with an unknown progress mode", []string{"bench", "--url", "http://127.0.0.1:1", "--progress", "sometimes"}, "auto, bars, lines or off"),
		Entry("bench without rounds", []string{"bench", "--rounds", "0"}, "--rounds"),
		Entry("fake-vllm with a negative TTFT", []string{"fake-vllm", "--ttft", "-1s", "--port", "0"}, "--ttft -1s: must not be negative", SpecTimeout(10*time.Second)),
		Entry("fake-vllm with an unknown dtype", []string{"fake-vllm", "--dtype", "int4", "--port", "0"}, "argument --dtype: invalid choice: 'int4' (choose from 'auto', 'half'", SpecTimeout(10*time.Second)),
		Entry("fake-vllm with an unknown KV-cache dtype", []string{"fake-vllm", "--kv-cache-dtype", "int4", "--port", "0"}, "argument --kv-cache-dtype: invalid choice", SpecTimeout(10*time.Second)),
		Entry("fake-vllm with a memory size without a unit", []string{"fake-vllm", "--gpu-memory", "48", "--port", "0"}, "--gpu-memory 48: give a unit, e.g. 48GiB", SpecTimeout(10*time.Second)),
		Entry("fake-vllm with a fault rate above 1", []string{"fake-vllm", "--fault-rate", "2", "--port", "0"}, "--fault-rate 2: want a probability", SpecTimeout(10*time.Second)),
		Entry("fake-vllm with a negative time scale", []string{"fake-vllm", "--time-scale", "-1", "--port", "0"}, "--time-scale -1: must not be negative", SpecTimeout(10*time.Second)),
		Entry("fake-vllm with a bad memory size", []string{"fake-vllm", "--gpu-memory", "lots", "--port", "0"}, `--gpu-memory: bad value: memory size "lots"`, SpecTimeout(10*time.Second)),
		Entry("fake-vllm with a bad ledger size", []string{"fake-vllm", "--ledger-max-bytes", "12xx", "--port", "0"}, `--ledger-max-bytes: bad value: memory size "12xx": unknown unit "xx" (or 0 for no byte bound)`, SpecTimeout(10*time.Second)),
	)

	It("names --max-model-len once, in vLLM's words", func(ctx SpecContext) {
		_, err := capbench(ctx, "fake-vllm", "--max-model-len", "1.5K", "--port", "0")
		Expect(err).To(MatchError(HavePrefix("argument --max-model-len: bad value: Decimals are not allowed")))
	}, SpecTimeout(10*time.Second))
})

var _ = Describe("capbench bench", func() {
	It("measures capture overhead in-process when no URL is given", func(ctx SpecContext) {
		stdout, err := capbench(ctx, "bench", "--concurrency", "2", "--requests", "20", "--rounds", "1", "--json", "--progress", "off")
		Expect(err).NotTo(HaveOccurred())
		var res map[string]any
		Expect(json.Unmarshal([]byte(stdout), &res)).To(Succeed())
		Expect(res).To(HaveKeyWithValue("schema", "capbench.bench/v1"))
		Expect(res["capture"]).To(HaveKeyWithValue("captured_all", true))
		Expect(res["overhead"]).To(HaveLen(1))
	})
})
