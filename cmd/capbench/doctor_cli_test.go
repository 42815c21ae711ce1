package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var c interface{ ExitCode() int }
	if errors.As(err, &c) {
		return c.ExitCode()
	}
	return 1
}

var walkthroughPages = filepath.Join("..", "..", "testdata", "walkthrough")

var _ = Describe("capbench doctor", func() {
	DescribeTable("exit codes for CI",
		func(ctx SpecContext, args []string, code int, want string) {
			out, err := capbench(ctx, append([]string{"doctor"}, args...)...)
			Expect(exitCode(err)).To(Equal(code), "err: %v\n%s", err, out)
			if want != "" {
				Expect(out + errString(err)).To(ContainSubstring(want))
			}
		},
		Entry("a good page passes", []string{"page", filepath.Join(walkthroughPages, "first-run.mdx")}, 0, "ok: 0 error(s)"),
		Entry("the broken page fails", []string{"page", filepath.Join(walkthroughPages, "first-run-broken.mdx")}, 1, "first-run-broken.mdx:41: error page/overlay-not-given-to-collector"),
		Entry("a missing page cannot be checked", []string{"page", "/nonexistent.mdx"}, 2, "read page"),
		Entry("serve flags that fit pass", []string{"config", "--vllm-args", "vllm serve Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --tool-call-parser hermes --max-model-len 65536", "--gpu", "48GiB"}, 0, ""),
		Entry("serve flags that cannot start fail", []string{"config", "--vllm-args", "--enable-auto-tool-choice --tool-call-parser hermes", "--gpu", "L40S"}, 1, "serve/refuses-to-start"),
		Entry("nothing to check is a usage error", []string{"config"}, 2, "nothing to check"),
		Entry("an unknown GPU is a usage error", []string{"config", "--vllm-args", "m", "--gpu", "TPU"}, 2, "--gpu: unknown GPU"),
		Entry("rollouts of an empty file cannot be checked", []string{"rollouts", "/dev/null"}, 2, "empty"),
		Entry("an unknown flag is a usage error", []string{"rollouts", "x.jsonl", "--expect-tool"}, 2, "unknown flag"),
		Entry("a missing argument is a usage error", []string{"page"}, 2, "accepts 1 arg"),
	)

	It("checks an overlay file and prints JSON", func(ctx SpecContext) {
		p := filepath.Join(GinkgoT().TempDir(), "o.yaml")
		Expect(os.WriteFile(p, []byte("env:\n  nemo_gym:\n    token_id_capture:\n      enabled: true\n      dir: /tmp/x\n      all_agents: true\n"), 0o644)).To(Succeed())
		out, err := capbench(ctx, "doctor", "config", p, "--json")
		Expect(exitCode(err)).To(Equal(1))
		var rep struct {
			Kind     string `json:"kind"`
			Findings []struct {
				Rule string `json:"rule"`
				Line int    `json:"line"`
			} `json:"findings"`
		}
		Expect(json.Unmarshal([]byte(out), &rep)).To(Succeed())
		Expect(rep.Kind).To(Equal("config"))
		Expect(rep.Findings[0].Rule).To(Equal("config/nemo-rl-nesting"))
		Expect(rep.Findings[0].Line).To(Equal(3))
	})

	It("checks NeMo Gym's rollouts with the capture directory", func(ctx SpecContext) {
		dir := filepath.Join(fixturesDir(), "gym-rollouts")
		out, err := capbench(ctx, "doctor", "rollouts", filepath.Join(dir, "rollouts.jsonl"), "--capture-dir", filepath.Join(dir, "capture"))
		Expect(exitCode(err)).To(Equal(1))
		Expect(out).To(ContainSubstring("101-0    yes"))
		Expect(out).To(ContainSubstring("error rollouts/no-capture [103-0]"))
	})
})

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var _ = Describe("capbench doctor server", Label("inprocess"), func() {
	DescribeTable("probes a running stack",
		func(ctx SpecContext, tools bool, code int, want string) {
			dir := GinkgoT().TempDir()
			e, err := env.Start(ctx, env.Spec{Backend: env.InProcess, CaptureDir: dir, Server: scenarios.Server{
				Model: scenarios.DefaultModel, MaxModelLen: 65536, EnableAutoToolChoice: tools, ToolCallParser: map[bool]string{true: "hermes"}[tools]}})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(e.Close)
			out, err := capbench(ctx, "doctor", "server", e.VLLMURL()+"/v1", "--proxy-url", e.ProxyURL(), "--capture-dir", dir)
			Expect(exitCode(err)).To(Equal(code), out)
			Expect(out).To(ContainSubstring(want))
		},
		Entry("the walkthrough's stack passes", true, 0, "capture call lands in the capture directory  ok", SpecTimeout(30*time.Second)),
		Entry("without tool flags it fails", false, 1, "auto tool choice accepted                    FAIL", SpecTimeout(30*time.Second)),
	)
})
