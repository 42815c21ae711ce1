package harness_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/env"
	. "github.com/capbench/capbench/harness/matchers"
	"github.com/capbench/capbench/scenarios"
	"github.com/capbench/capbench/scenarios/agent"
)

func snapshotOf(entries ...*record.Entry) *store.Snapshot {
	return &store.Snapshot{RolloutID: "r", Entries: entries}
}

func entry(id string, prompt, gen []int, lps []float64) *record.Entry {
	return &record.Entry{ModelCallID: id, PromptTokenIDs: prompt, GenerationTokenIDs: gen, GenerationLogProbs: lps}
}

var _ = Describe("fidelity", func() {
	ledger := []env.LedgerEntry{
		{PromptTokenIDs: []int{1, 2}, GeneratedTokenIDs: []int{3, 4}, LogProbs: []float64{-0.5, -0.25}},
		{PromptTokenIDs: []int{1, 2, 3, 4, 9}, GeneratedTokenIDs: []int{5}, LogProbs: []float64{-1}},
	}

	It("accepts a capture equal to the ledger bit for bit", func() {
		f := harness.CheckFidelity(snapshotOf(
			entry("a", []int{1, 2}, []int{3, 4}, []float64{-0.5, -0.25}),
			entry("b", []int{1, 2, 3, 4, 9}, []int{5}, []float64{-1}),
		), ledger, map[string]any{"output": []any{
			map[string]any{"prompt_token_ids": []any{1.0, 2.0}, "generation_token_ids": []any{3.0, 4.0}},
			map[string]any{"type": "function_call_output"},
			map[string]any{"prompt_token_ids": []any{1.0, 2.0, 3.0, 4.0, 9.0}, "generation_token_ids": []any{5.0}},
		}})
		Expect(f.OK()).To(BeTrue(), "%v", f.Problems)
		Expect(f.Summary()).To(Equal("exact 2/2"))
	})

	DescribeTable("names what differs",
		func(e *record.Entry, rebuilt map[string]any, want string) {
			f := harness.CheckFidelity(snapshotOf(e), ledger, rebuilt)
			Expect(f.OK()).To(BeFalse())
			Expect(f.Summary()).To(HavePrefix("BROKEN"))
			Expect(f.Problems).To(ContainElement(ContainSubstring(want)))
		},
		Entry("a log-prob off by one ulp", entry("a", []int{1, 2}, []int{3, 4}, []float64{-0.5, math.Nextafter(-0.25, 0)}), nil, "log-prob 1"),
		Entry("a different token", entry("a", []int{1, 2}, []int{3, 7}, []float64{-0.5, -0.25}), nil, "token 1 is 7, ledger 4"),
		Entry("a prompt nobody generated from", entry("a", []int{8}, []int{3}, []float64{-0.5}), nil, "no ledger generation has this 1-token prompt"),
		Entry("a rebuilt response that is not prefix-contiguous", entry("a", []int{1, 2}, []int{3, 4}, []float64{-0.5, -0.25}),
			map[string]any{"output": []any{
				map[string]any{"prompt_token_ids": []any{1.0, 2.0}, "generation_token_ids": []any{3.0, 4.0}},
				map[string]any{"prompt_token_ids": []any{1.0, 2.0, 3.0, 9.0, 7.0}, "generation_token_ids": []any{5.0}},
			}}, "prompt differs from the previous prompt+generation at token 3"),
	)

	It("does not let one generation back two captured calls", func() {
		f := harness.CheckFidelity(snapshotOf(
			entry("a", []int{1, 2}, []int{3, 4}, []float64{-0.5, -0.25}),
			entry("dup", []int{1, 2}, []int{3, 4}, []float64{-0.5, -0.25}),
		), ledger, nil)
		Expect(f.OK()).To(BeFalse())
		Expect(f.Summary()).To(Equal("BROKEN 1/2"))
		Expect(f.Problems).To(ConsistOf(ContainSubstring("call dup: its generation is already matched")))
	})

	It("matches two identical generations (a retry) to two ledger entries", func() {
		twice := append(append([]env.LedgerEntry{}, ledger...), ledger[0])
		f := harness.CheckFidelity(snapshotOf(
			entry("a", []int{1, 2}, []int{3, 4}, []float64{-0.5, -0.25}),
			entry("retry", []int{1, 2}, []int{3, 4}, []float64{-0.5, -0.25}),
		), twice, nil)
		Expect(f.OK()).To(BeTrue(), "%v", f.Problems)
		Expect(f.Summary()).To(Equal("exact 2/2"))
	})

	It("says when the unmatched call may have been dropped by the fake's bounded ledger", func() {
		held := []env.LedgerEntry{ledger[1]}
		held[0].Seq = 7
		f := harness.CheckFidelity(snapshotOf(entry("a", []int{1, 2}, []int{3, 4}, []float64{-0.5, -0.25})), held, nil)
		Expect(f.OK()).To(BeFalse(), "an unverified call never passes as exact")
		Expect(f.Problems).To(ConsistOf(ContainSubstring("no ledger generation has this 2-token prompt; the fake's bounded ledger had dropped its 6 oldest generations")))
		whole := []env.LedgerEntry{ledger[1]}
		whole[0].Seq = 1
		f = harness.CheckFidelity(snapshotOf(entry("a", []int{1, 2}, []int{3, 4}, []float64{-0.5, -0.25})), whole, nil)
		Expect(f.Problems).To(ConsistOf(Not(ContainSubstring("dropped"))))
	})

	It("is unchecked without a snapshot", func() {
		f := harness.CheckFidelity(nil, ledger, nil)
		Expect(f.Checked).To(BeFalse())
		Expect(f.Summary()).To(Equal("n/a"))
	})
})

var _ = Describe("comparing a verdict with its expectation", func() {
	want := scenarios.Expect{MaskSample: false, Checks: []scenarios.Check{scenarios.Eq("n_calls", 3), scenarios.Eq("terminal_attribution.chain", "delivered")}}

	It("agrees when everything matches", func() {
		got := harness.Got{Metrics: map[string]any{"n_calls": 3.0, "terminal_attribution": map[string]any{"chain": "delivered"}}}
		Expect(harness.Compare(want, got)).To(BeEmpty())
	})

	It("names every metric that disagrees", func() {
		got := harness.Got{MaskSample: true, Metrics: map[string]any{"n_calls": 2.0}}
		Expect(harness.Compare(want, got)).To(ConsistOf(
			"mask_sample: want false, got true",
			"n_calls: want = 3, got 2",
			"terminal_attribution.chain: want = delivered, got <absent>",
		))
	})

	It("says when the record was never finalized", func() {
		Expect(harness.Compare(want, harness.Got{})).To(ContainElement(ContainSubstring("_ng_token_capture: missing")))
	})
})

var _ = Describe("the versioned JSON result", func() {
	It("round-trips and refuses another schema", func() {
		dir := GinkgoT().TempDir()
		path := filepath.Join(dir, "result.json")
		r := &harness.RunResult{Schema: harness.ResultSchema, Backend: "inprocess", StartedAt: time.Unix(0, 0).UTC(),
			Scenarios: []harness.ScenarioResult{{Name: "x", Status: harness.StatusPass}}}
		r.Count()
		Expect(harness.WriteJSON(path, r)).To(Succeed())
		back, err := harness.ReadJSON(path)
		Expect(err).NotTo(HaveOccurred())
		Expect(back.Passed).To(Equal(1))
		Expect(back.Scenarios[0].Name).To(Equal("x"))
		Expect(os.WriteFile(path, []byte(`{"schema":"capbench.run/v0"}`), 0o644)).To(Succeed())
		_, err = harness.ReadJSON(path)
		Expect(err).To(MatchError(ContainSubstring(`want "capbench.run/v1"`)))
		_, err = harness.ReadJSON(filepath.Join(dir, "missing.json"))
		Expect(err).To(HaveOccurred())
	})
})

var _ = Describe("writing the JSON result", func() {
	It("lets concurrent writers of one path each land a whole result", func() {
		path := filepath.Join(GinkgoT().TempDir(), "result.json")
		var wg sync.WaitGroup
		errs := make([]error, 16)
		for i := range errs {
			wg.Go(func() {
				r := &harness.RunResult{Schema: harness.ResultSchema, Backend: fmt.Sprint("writer-", i)}
				errs[i] = harness.WriteJSON(path, r)
			})
		}
		wg.Wait()
		for i, err := range errs {
			Expect(err).NotTo(HaveOccurred(), "writer %d", i)
		}
		back, err := harness.ReadJSON(path)
		Expect(err).NotTo(HaveOccurred())
		Expect(back.Backend).To(HavePrefix("writer-"))
		left, err := os.ReadDir(filepath.Dir(path))
		Expect(err).NotTo(HaveOccurred())
		Expect(left).To(HaveLen(1), "no temp file is left behind")
	})

	It("fails with the path named, and leaves nothing, when the directory is missing", func() {
		path := filepath.Join(GinkgoT().TempDir(), "missing", "result.json")
		err := harness.WriteJSON(path, &harness.RunResult{Schema: harness.ResultSchema})
		Expect(err).To(MatchError(ContainSubstring(path)))
		Expect(err).To(MatchError(os.ErrNotExist))
	})
})

var _ = Describe("the collector", func() {
	It("refuses to run without a token source", func(ctx SpecContext) {
		_, err := (&harness.Collector{}).Collect(ctx, []harness.Task{{RolloutID: "x"}})
		Expect(err).To(MatchError(harness.ErrNoSource))
	})

	It("reports a run that returned no record as a failed run, not a crash", func(ctx SpecContext) {
		col := &harness.Collector{Source: store.NewMemoryStore()}
		got, err := col.Collect(ctx, []harness.Task{
			{RolloutID: "nil-result", Run: func(context.Context) (*agent.Result, error) { return nil, nil }},
			{RolloutID: "nil-record", Run: func(context.Context) (*agent.Result, error) { return &agent.Result{}, nil }},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveLen(2))
		for _, c := range got {
			Expect(c.RunErr).To(MatchError(harness.ErrNoRecord), c.RolloutID)
			Expect(c.Record).To(BeNil())
			Expect(harness.Verdict(c).AgentError).To(ContainSubstring("no record"))
		}
	})
})

var _ = DescribeTable("Verdict reads mask_sample as a trainer would",
	func(v any, present, wantMasked bool, wantError string) {
		rec := map[string]any{"_ng_token_capture": map[string]any{"n_calls": 1}}
		if present {
			rec["mask_sample"] = v
		}
		got := harness.Verdict(harness.Collected{RolloutID: "r", Record: rec})
		Expect(got.MaskSample).To(Equal(wantMasked))
		Expect(got.Error).To(ContainSubstring(wantError))
	},
	Entry("absent is unmasked", nil, false, false, ""),
	Entry("true is masked", true, true, true, ""),
	Entry("false is unmasked", false, true, false, ""),
	Entry("a string is counted as masked, with the reason", "false", true, true, "not a boolean"),
	Entry("a number is counted as masked, with the reason", 0.0, true, true, "not a boolean"),
)

var _ = Describe("the external backend", Label("fake"), func() {
	It("runs a scenario against an already running proxy and its capture directory", func(ctx SpecContext) {
		sc, err := scenarios.Lookup("single-chain/stream")
		Expect(err).NotTo(HaveOccurred())
		dir := GinkgoT().TempDir()
		running, err := env.Start(context.WithoutCancel(ctx), env.Spec{Server: sc.Server, CaptureDir: dir})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(running.Close)

		s, err := harness.NewSession(harness.Options{Backend: env.External, OutDir: GinkgoT().TempDir(),
			ProxyURL: running.ProxyURL(), VLLMURL: running.VLLMURL(), CaptureDir: dir})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(s.Close)
		res := s.Scenario(ctx, sc)
		Expect(res).To(MatchItsExpectation())
		Expect(res).To(BeCapturedExactly())
	}, SpecTimeout(30*time.Second))

	It("skips a store fault it cannot inject behind an external proxy", func(ctx SpecContext) {
		sc, err := scenarios.Lookup("capture-write-failure")
		Expect(err).NotTo(HaveOccurred())
		s, err := harness.NewSession(harness.Options{Backend: env.External, OutDir: GinkgoT().TempDir(),
			ProxyURL: "http://127.0.0.1:1", CaptureDir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(s.Close)
		res := s.Scenario(ctx, sc)
		Expect(res.Status).To(Equal(harness.StatusSkip))
		Expect(res.SkipReason).To(ContainSubstring("store faults need the proxy in this process"))
	})

	It("refuses an external proxy without its capture directory", func(ctx SpecContext) {
		_, err := env.Start(ctx, env.Spec{Backend: env.External, ProxyURL: "http://127.0.0.1:1"})
		Expect(err).To(MatchError(env.ErrInvalidSpec))
	})

	It("refuses unknown backends by name", func() {
		_, err := env.ParseBackend("kubernetes")
		Expect(err).To(MatchError(ContainSubstring("inprocess, process, container, vllm, external")))
	})
})

var _ = DescribeTable("env.DockerUsable says why no engine can be used: the address and what to do",
	func(dockerHost, tlsVerify, e2e string, wants ...string) {
		for _, k := range []string{"DOCKER_HOST", "DOCKER_TLS_VERIFY", "CAPBENCH_E2E"} {
			old, had := os.LookupEnv(k)
			DeferCleanup(func() {
				if had {
					_ = os.Setenv(k, old)
				} else {
					_ = os.Unsetenv(k)
				}
			})
			Expect(os.Unsetenv(k)).To(Succeed())
		}
		dir := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(dir, "not-a-socket"), nil, 0o644)).To(Succeed())
		dockerHost = strings.ReplaceAll(dockerHost, "DIR", dir)
		for k, v := range map[string]string{"DOCKER_HOST": dockerHost, "DOCKER_TLS_VERIFY": tlsVerify, "CAPBENCH_E2E": e2e} {
			if v != "" {
				Expect(os.Setenv(k, v)).To(Succeed())
			}
		}
		ok, why := env.DockerUsable(context.Background())
		Expect(ok).To(BeFalse())
		for _, w := range wants {
			Expect(why).To(ContainSubstring(strings.ReplaceAll(w, "DIR", dir)))
		}
	},
	Entry("no socket at that path", "unix://DIR/docker.sock", "", "",
		"docker engine not reachable at unix://DIR/docker.sock", "start it", "no such file"),
	Entry("a path nobody listens on", "unix://DIR/not-a-socket", "", "",
		"docker engine not reachable at unix://DIR/not-a-socket", "start it", "connection refused"),
	Entry("a remote engine", "tcp://build-host.example:2376", "", "", "not on this machine", "tcp://127.0.0.1:PORT"),
	Entry("TLS to the engine", "tcp://127.0.0.1:2376", "1", "", "DOCKER_TLS_VERIFY", "not supported"),
	Entry("an unknown scheme", "ssh://me@host", "", "", `scheme "ssh" is not supported`),
	Entry("switched off", "", "", "0", "disabled by CAPBENCH_E2E=0"),
)

var _ = DescribeTable("env.RealVLLMAvailable says what the Docker host lacks for the real-vLLM backend",
	func(info string, imageStatus int, want string) {
		engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == "/_ping":
				_, _ = w.Write([]byte("OK"))
			case r.URL.Path == "/info":
				_, _ = w.Write([]byte(info))
			case r.URL.Path == "/images/vllm/vllm-openai:v0.29.0/json":
				w.WriteHeader(imageStatus)
				_, _ = w.Write([]byte(`{"message":"No such image: vllm/vllm-openai:v0.29.0"}`))
			default:
				w.WriteHeader(http.StatusNotFound)
			}
		}))
		DeferCleanup(engine.Close)
		GinkgoT().Setenv("CAPBENCH_GPU", "1")
		GinkgoT().Setenv("CAPBENCH_E2E", "")
		GinkgoT().Setenv("DOCKER_TLS_VERIFY", "")
		GinkgoT().Setenv("DOCKER_HOST", "tcp://"+strings.TrimPrefix(engine.URL, "http://"))
		ok, why := env.RealVLLMAvailable(context.Background(), env.DefaultVLLMImage)
		Expect(ok).To(Equal(want == ""), why)
		if want != "" {
			Expect(why).To(ContainSubstring(want))
		}
	},
	Entry("no NVIDIA runtime", `{"Runtimes":{"runc":{"path":"runc"}}}`, http.StatusOK, "no NVIDIA container runtime"),
	Entry("the image is not there", `{"Runtimes":{"nvidia":{"path":"nvidia-container-runtime"}}}`, http.StatusNotFound,
		"image vllm/vllm-openai:v0.29.0 is not present locally"),
	Entry("all there", `{"Runtimes":{"nvidia":{"path":"nvidia-container-runtime"}}}`, http.StatusOK, ""),
)

var _ = Describe("environment checks", func() {
	DescribeTable("rejects base URLs capbench cannot use, naming the flag",
		func(raw, want string) {
			err := harness.ValidateURL("--vllm-url", raw)
			if want == "" {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("a plain base URL", "http://127.0.0.1:8000", ""),
		Entry("with a trailing slash", "http://127.0.0.1:8000/", ""),
		Entry("ending in /v1", "http://127.0.0.1:8000/v1", `--vllm-url "http://127.0.0.1:8000/v1": give the server's base URL without /v1 (http://127.0.0.1:8000)`),
		Entry("ending in /v1/", "http://h:1/x/v1/", "without /v1 (http://h:1/x)"),
		Entry("without a scheme", "127.0.0.1:8000", "want an absolute http:// or https:// URL"),
		Entry("another scheme", "ftp://h/", "want an absolute http://"),
	)

	It("reports nothing listening once, before any scenario", func(ctx SpecContext) {
		res, err := harness.Run(ctx, scenarios.All(), harness.Options{Backend: env.External, VLLMURL: "http://127.0.0.1:1"})
		Expect(res).To(BeNil())
		Expect(err).To(MatchError(harness.ErrEnvironment))
		Expect(err.Error()).To(ContainSubstring("nothing answers at --vllm-url http://127.0.0.1:1"))
	})
})
