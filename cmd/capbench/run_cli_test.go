package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
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
	})

	It("lists the catalog", func(ctx SpecContext) {
		stdout, err := capbench(ctx, "run", "--list")
		Expect(err).NotTo(HaveOccurred())
		Expect(stdout).To(ContainSubstring("lost-call"))
		Expect(stdout).To(ContainSubstring("missing-training-segment"))
	})

	DescribeTable("refuses bad invocations with a message that names the problem",
		func(ctx SpecContext, args []string, want string) {
			_, err := capbench(ctx, args...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("unknown scenario", []string{"run", "--scenario", "no-such-scenario", "--out", "-"}, "no-such-scenario"),
		Entry("unknown backend", []string{"run", "--backend", "moon"}, "moon"),
		Entry("proxy without upstream", []string{"proxy"}, "upstream"),
		Entry("bench with a malformed header", []string{"bench", "--url", "http://127.0.0.1:1", "--header", "nocolon"}, "Name: value"),
		Entry("bench with an unknown progress mode", []string{"bench", "--url", "http://127.0.0.1:1", "--progress", "sometimes"}, "auto, bars, lines or off"),
		Entry("bench without rounds", []string{"bench", "--rounds", "0"}, "--rounds"),
		Entry("fake-vllm with a negative TTFT", []string{"fake-vllm", "--ttft", "-1s", "--port", "0"}, "TTFT must not be negative", SpecTimeout(10*time.Second)),
		Entry("fake-vllm with a bad memory size", []string{"fake-vllm", "--gpu-memory", "lots", "--port", "0"}, `--gpu-memory: bad value: memory size "lots"`, SpecTimeout(10*time.Second)),
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
