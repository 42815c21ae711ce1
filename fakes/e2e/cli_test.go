package e2e_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
)

var _ = Describe("capbench fake-vllm", Ordered, Label("cli"), func() {
	var bin string

	BeforeAll(func(sctx SpecContext) {
		bin = filepath.Join(GinkgoT().TempDir(), "capbench")
		build := exec.CommandContext(sctx, "go", "build", "-o", bin, "github.com/capbench/capbench/cmd/capbench")
		build.Dir = repoRoot()
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
	}, NodeTimeout(3*time.Minute))

	It("refuses to start when the default window does not fit 48 GiB", func(sctx SpecContext) {
		out, err := exec.CommandContext(sctx, bin, "fake-vllm", "Qwen/Qwen3-4B-Thinking-2507", "--gpu-memory", "48GiB", "--port", "0").CombinedOutput()
		Expect(err).To(HaveOccurred())
		Expect(string(out)).To(ContainSubstring("To serve at least one request with the model's max seq len (262144), (36.0 GiB KV cache is needed"))
	}, SpecTimeout(time.Minute))

	It("starts with --max-model-len 65536, logs the concurrency line and serves", func(sctx SpecContext) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "fake-vllm", "Qwen/Qwen3-4B-Thinking-2507", "--gpu-memory", "48GiB",
			"--max-model-len", "64K", "--host", "127.0.0.1", "--port", "0", "--served-model-name", "qwen3",
			"--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning_parser", "qwen3", "--enforce-eager")
		stderr := gbytes.NewBuffer()
		cmd.Stderr = io.MultiWriter(stderr, GinkgoWriter)
		stdout, err := cmd.StdoutPipe()
		Expect(err).NotTo(HaveOccurred())
		Expect(cmd.Start()).To(Succeed())
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

		line, err := bufio.NewReader(stdout).ReadString('\n')
		Expect(err).NotTo(HaveOccurred())
		url := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(line)
		Expect(url).NotTo(BeEmpty(), line)
		Eventually(stderr).Should(gbytes.Say(`Maximum concurrency for 65,536 tokens per request: \d+\.\d\dx`))

		resp, err := http.Get(url + "/v1/models")
		Expect(err).NotTo(HaveOccurred())
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		Expect(string(b)).To(ContainSubstring(`"id":"qwen3"`))
		Expect(string(b)).To(ContainSubstring(`"max_model_len":65536`))
		Expect(strings.Count(string(b), `"object":"model"`)).To(Equal(1))
	}, SpecTimeout(time.Minute))

	It("rejects auto tool choice without a parser with vLLM's text", func(sctx SpecContext) {
		out, err := exec.CommandContext(sctx, bin, "fake-vllm", "--enable-auto-tool-choice", "--port", "0").CombinedOutput()
		Expect(err).To(HaveOccurred())
		Expect(string(out)).To(ContainSubstring("--enable-auto-tool-choice requires --tool-call-parser"))
	}, SpecTimeout(time.Minute))
})
