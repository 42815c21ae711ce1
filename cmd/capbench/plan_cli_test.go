package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/fakes/vllm"
)

var _ = Describe("capbench plan", func() {
	DescribeTable("starts or refuses as vLLM would",
		func(ctx SpecContext, args []string, refuses bool, want string) {
			out, err := capbench(ctx, append([]string{"plan"}, args...)...)
			if refuses {
				Expect(errors.Is(err, errVLLMRefuses)).To(BeTrue(), "err: %v", err)
				Expect(err.Error()).To(ContainSubstring("To serve at least one request with the model's max seq len"))
			} else {
				Expect(err).NotTo(HaveOccurred())
			}
			Expect(out).To(ContainSubstring(want))
		},
		Entry("48 GiB, default context", []string{"--gpu", "48GiB"}, true, "largest --max-model-len that starts  248800"),
		Entry("48 GiB, 65536", []string{"--gpu", "48GiB", "--max-model-len", "65536"}, false, "Maximum concurrency for 65,536 tokens per request"),
		Entry("L40S by name", []string{"--gpu", "L40S", "--max-model-len", "64K"}, false, "L40S (44.52 GiB)"),
		Entry("fp8 KV lets 262144 start", []string{"--gpu", "48GiB", "--kv-cache-dtype", "fp8"}, false, "Maximum concurrency for 262,144 tokens per request"),
		Entry("a 32k context cannot hold a 32000-token call and its prompt", []string{"--gpu", "48GiB", "--max-model-len", "32768", "--prompt-tokens", "1000"}, false, "exceeds max_model_len 32768"),
	)

	DescribeTable("rejects bad flags with the flag's name",
		func(ctx SpecContext, args []string, want string) {
			_, err := capbench(ctx, append([]string{"plan"}, args...)...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("no GPU", []string{}, "--gpu is required"),
		Entry("unknown GPU", []string{"--gpu", "TPU"}, "--gpu: unknown GPU"),
		Entry("unknown model", []string{"--gpu", "H100", "--model", "gpt-9"}, "--model: unknown model profile"),
		Entry("bad length", []string{"--gpu", "H100", "--max-model-len", "1.5K"}, "argument --max-model-len"),
		Entry("missing log", []string{"--gpu", "H100", "--vllm-log", "/nonexistent.log"}, "--vllm-log"),
	)

	It("compares the profile with a vLLM log, taking the log's max_model_len", func(ctx SpecContext) {
		log := filepath.Join("..", "..", "fakes", "gpu", "testdata", "vllm-logs", "v1-two-lines.log")
		out, err := capbench(ctx, "plan", "--gpu", "48GiB", "--vllm-log", log, "--json")
		Expect(err).NotTo(HaveOccurred())
		var got map[string]any
		Expect(json.Unmarshal([]byte(out), &got)).To(Succeed())
		Expect(got["max_model_len"]).To(BeEquivalentTo(65536))
		Expect(got["vllm_log"]).To(HaveKeyWithValue("format", "two-lines"))
		Expect(got["vllm_log_deltas"]).To(HaveLen(4))
	})

	It("reports a log without a KV-cache line as an error", func(ctx SpecContext) {
		p := filepath.Join(GinkgoT().TempDir(), "x.log")
		Expect(os.WriteFile(p, []byte("INFO starting\n"), 0o644)).To(Succeed())
		_, err := capbench(ctx, "plan", "--gpu", "48GiB", "--vllm-log", p)
		Expect(err).To(MatchError(ContainSubstring("no KV-cache size line")))
	})
})

var _ = Describe("capbench plan and the fake vLLM", func() {
	DescribeTable("print the same KV-cache line, and refuse the same configurations",
		func(ctx SpecContext, gpuSize, maxLen string) {
			out, planErr := capbench(ctx, "plan", "--gpu", gpuSize, "--max-model-len", maxLen)
			o := vllm.Options{Model: vllm.DefaultModel, Host: "127.0.0.1", Logger: slog.New(slog.DiscardHandler)}
			var err error
			o.GPUMemory, _, err = gpu.ParseDevice(gpuSize)
			Expect(err).NotTo(HaveOccurred())
			o.MaxModelLen, err = gpu.ParseMaxModelLen(maxLen)
			Expect(err).NotTo(HaveOccurred())
			srv, fakeErr := vllm.New(o)
			if planErr != nil {
				Expect(fakeErr).To(HaveOccurred(), "plan refuses, the fake must too")
				Expect(planErr.Error()).To(ContainSubstring(fakeErr.Error()))
				return
			}
			Expect(fakeErr).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring("vLLM logs                            " + srv.ConcurrencyLine() + "\n"))
		},
		Entry(nil, "48GiB", "65536"),
		Entry(nil, "L40S", "131072"),
		Entry(nil, "48GiB", "262144"),
		Entry(nil, "H200", "auto"),
	)
})

var _ = Describe("capbench plan's refusal", func() {
	DescribeTable("is printed once and exits 1",
		func(ctx SpecContext, args []string) {
			out, err := capbench(ctx, append([]string{"plan", "--gpu", "24GiB"}, args...)...)
			Expect(errors.Is(err, errVLLMRefuses)).To(BeTrue(), "err: %v", err)
			var stderr bytes.Buffer
			Expect(reportError(&stderr, err)).To(Equal(1))
			const msg = "To serve at least one request with the model's max seq len"
			Expect(strings.Count(out+stderr.String(), msg)).To(Equal(1), "stdout:\n%s\nstderr:\n%s", out, stderr.String())
		},
		Entry("as a table", []string{}),
		Entry("as JSON", []string{"--json"}),
	)

	It("leaves other errors to main to print, with their status", func() {
		var stderr bytes.Buffer
		Expect(reportError(&stderr, errors.New("boom"))).To(Equal(1))
		Expect(stderr.String()).To(Equal("capbench: boom\n"))
		stderr.Reset()
		Expect(reportError(&stderr, usageErr(errors.New("bad")))).To(Equal(2))
		Expect(stderr.String()).To(Equal("capbench: bad\n"))
	})
})
