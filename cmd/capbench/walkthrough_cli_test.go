package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

type junit struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Skipped  int `xml:"skipped,attr"`
	Suites   []struct {
		Cases []struct {
			Name    string    `xml:"name,attr"`
			Failure *struct{} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func readJUnit(dir string) junit {
	GinkgoHelper()
	b, err := os.ReadFile(filepath.Join(dir, "junit.xml"))
	Expect(err).NotTo(HaveOccurred())
	var j junit
	Expect(xml.Unmarshal(b, &j)).To(Succeed())
	return j
}

var _ = Describe("capbench walkthrough", Label("inprocess"), func() {
	DescribeTable("pages",
		func(ctx SpecContext, args []string, wantOK bool, wantFailures int, wantText string) {
			out := GinkgoT().TempDir()
			stdout, err := capbench(ctx, append([]string{"walkthrough", "--out", out}, args...)...)
			if wantOK {
				Expect(err).NotTo(HaveOccurred(), stdout)
			} else {
				Expect(errors.Is(err, errWalkthroughFailed)).To(BeTrue(), "err %v", err)
				Expect(err.Error()).To(ContainSubstring(wantText))
			}
			j := readJUnit(out)
			Expect(j.Tests).To(Equal(11))
			Expect(j.Failures).To(Equal(wantFailures))
			md, err := os.ReadFile(filepath.Join(out, "report.md"))
			Expect(err).NotTo(HaveOccurred())
			Expect(string(md)).To(ContainSubstring("## Documented mistakes"))
			var res map[string]any
			b, err := os.ReadFile(filepath.Join(out, "result.json"))
			Expect(err).NotTo(HaveOccurred())
			Expect(json.Unmarshal(b, &res)).To(Succeed())
			Expect(res["mistakes"]).To(HaveLen(5))
			rows, err := os.ReadFile(filepath.Join(out, "rollouts.jsonl"))
			Expect(err).NotTo(HaveOccurred())
			Expect(bytes.Count(rows, []byte("\n"))).To(Equal(2))
		},
		Entry("the built-in walkthrough passes", []string{}, true, 0, "", SpecTimeout(2*time.Minute)),
		Entry("first-run.mdx passes", []string{"--page", filepath.Join(walkthroughPages, "first-run.mdx")}, true, 0, "", SpecTimeout(2*time.Minute)),
		Entry("first-run-broken.mdx fails naming its broken steps", []string{"--page", filepath.Join(walkthroughPages, "first-run-broken.mdx")}, false, 5,
			"broken steps: Serve the policy (vllm serve); Tool calling (a Bash tool round trip)", SpecTimeout(2*time.Minute)),
		Entry("first-run.mdx on an H200 passes too", []string{"--page", filepath.Join(walkthroughPages, "first-run.mdx"), "--gpu", "H200"}, true, 0, "", SpecTimeout(2*time.Minute)),
	)

	It("runs against running servers, skipping the mistakes that restart them", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		e, err := env.Start(ctx, env.Spec{Backend: env.InProcess, CaptureDir: dir, Server: scenarios.Server{
			Model: scenarios.DefaultModel, MaxModelLen: 65536, EnableAutoToolChoice: true, ToolCallParser: "hermes"}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(e.Close)
		out := GinkgoT().TempDir()
		stdout, err := capbench(ctx, "walkthrough", "--out", out, "--page", filepath.Join(walkthroughPages, "first-run.mdx"),
			"--vllm-url", e.VLLMURL(), "--proxy-url", e.ProxyURL(), "--capture-dir", dir)
		Expect(err).NotTo(HaveOccurred(), stdout)
		j := readJUnit(out)
		Expect(j.Skipped).To(Equal(4), stdout) // the tool round trip and three server-side mistakes
		Expect(stdout).To(ContainSubstring("PASS overlay given only to gym env start"))
		Expect(stdout).To(ContainSubstring("PASS harness URL without the training-token-capture segment"))
	}, SpecTimeout(2*time.Minute))

	It("runs against a running vLLM with our proxy in front, which follows the overlay", func(ctx SpecContext) {
		fake, err := env.Start(ctx, env.Spec{Backend: env.InProcess, Server: scenarios.Server{
			Model: scenarios.DefaultModel, MaxModelLen: 65536, EnableAutoToolChoice: true, ToolCallParser: "hermes"}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fake.Close)
		out := GinkgoT().TempDir()
		stdout, err := capbench(ctx, "walkthrough", "--out", out, "--page", filepath.Join(walkthroughPages, "first-run.mdx"), "--vllm-url", fake.VLLMURL())
		Expect(err).NotTo(HaveOccurred(), stdout)
		Expect(readJUnit(out).Skipped).To(Equal(3), stdout) // the tool round trip, max-model-len and the tool flag
		Expect(stdout).To(ContainSubstring("PASS NeMo RL env.nemo_gym nesting as the overlay"))
	}, SpecTimeout(2*time.Minute))

	It("prints the built-in page and refuses --capture-dir without --proxy-url", func(ctx SpecContext) {
		out, err := capbench(ctx, "walkthrough", "--print-page")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("vllm serve Qwen/Qwen3-4B-Thinking-2507"))
		_, err = capbench(ctx, "walkthrough", "--capture-dir", "/tmp/x")
		Expect(err).To(MatchError(ContainSubstring("--capture-dir goes with --proxy-url")))
		_, err = capbench(ctx, "walkthrough", "--page", "/nonexistent.md", "--out", GinkgoT().TempDir())
		Expect(err).To(MatchError(ContainSubstring("read page")))
	})
})
