package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// dockerUsable probes the engine; some lookups panic without a socket.
func dockerUsable(ctx context.Context) (ok bool, why string) {
	defer func() {
		if r := recover(); r != nil {
			ok, why = false, fmt.Sprint(r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false, err.Error()
	}
	defer p.Close()
	if err := p.Health(ctx); err != nil {
		return false, err.Error()
	}
	return true, ""
}

var _ = Describe("the fake vLLM container image", Ordered, Label("docker", "e2e"), func() {
	var baseURL string

	BeforeAll(func(sctx SpecContext) {
		skipInShortMode()
		if os.Getenv("CAPBENCH_E2E") == "0" {
			Skip("CAPBENCH_E2E=0")
		}
		if ok, why := dockerUsable(sctx); !ok {
			unavailable("no usable container engine: " + why)
		}
		By("building the static binary into a temporary build context")
		root := repoRoot()
		dir := GinkgoT().TempDir()
		build := exec.CommandContext(sctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "capbench"), "github.com/capbench/capbench/cmd/capbench")
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		dockerfile, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dir, "Dockerfile"), dockerfile, 0o644)).To(Succeed())

		By("building the image")
		p, err := testcontainers.NewDockerProvider()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Close)
		tag, err := p.BuildImage(sctx, &testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
			Context: dir, Repo: "capbench-fake-vllm-e2e", Tag: fmt.Sprintf("t%d", time.Now().UnixNano()), BuildLogWriter: GinkgoWriter,
		}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(cctx SpecContext) {
			_, err := p.Client().ImageRemove(cctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
			Expect(err).NotTo(HaveOccurred())
		})

		By("starting it with the image's default command")
		ctr, err := testcontainers.Run(sctx, tag,
			testcontainers.WithExposedPorts("8000/tcp"),
			testcontainers.WithWaitStrategy(wait.ForHTTP("/health").WithPort("8000/tcp").WithStartupTimeout(60*time.Second)))
		DeferCleanup(func() { Expect(testcontainers.TerminateContainer(ctr)).To(Succeed()) })
		Expect(err).NotTo(HaveOccurred())
		baseURL, err = ctr.PortEndpoint(sctx, "8000/tcp", "http")
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(5*time.Minute))

	It("answers /health through the mapped port", func() {
		resp, err := http.Get(baseURL + "/health")
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
	})

	It("serves a chat completion for the default model", func() {
		body := `{"model":"Qwen/Qwen3-4B-Thinking-2507","messages":[{"role":"user","content":"hello"}],"max_tokens":8}`
		resp, err := http.Post(baseURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.StatusCode).To(Equal(http.StatusOK), string(b))
		Expect(string(b)).To(MatchRegexp(`^\{"id":"chatcmpl-[0-9a-f]{16}","object":"chat.completion"`))
	})
})
