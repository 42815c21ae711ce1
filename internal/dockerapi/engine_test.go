package dockerapi_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/dockerapi"
)

// tinyServer is a static program for a FROM-scratch image: it serves
// /health (or, given a peer URL, answers /health with the peer's status, as
// the capture proxy does), or exits at once when told to.
const tinyServer = `package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "exit" {
		fmt.Println("tiny: asked to exit")
		fmt.Fprintln(os.Stderr, "tiny: bye on stderr")
		os.Exit(3)
	}
	fmt.Println("tiny: listening on :8000")
	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if len(os.Args) > 2 && os.Args[1] == "peer" {
			resp, err := http.Get(os.Args[2])
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
		}
	})
	_ = http.ListenAndServe(":8000", nil)
}
`

const tinyDockerfile = "FROM scratch\nCOPY tiny /tiny\nEXPOSE 8000\nUSER 65534:65534\nENTRYPOINT [\"/tiny\"]\n"

// engine returns a client for the real engine, or skips (fails under CI=true).
func engine(ctx context.Context) *dockerapi.Client {
	if os.Getenv("CAPBENCH_E2E") == "0" {
		Skip("CAPBENCH_E2E=0")
	}
	c, err := dockerapi.FromEnv()
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err = c.Ping(pctx)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			Fail("CI=true but no usable Docker engine: " + err.Error())
		}
		Skip("no usable Docker engine: " + err.Error())
	}
	DeferCleanup(c.Close)
	return c
}

var _ = Describe("against the real Docker engine", Ordered, Label("docker"), func() {
	var (
		c   *dockerapi.Client
		tag string
	)
	BeforeAll(func(ctx SpecContext) {
		c = engine(ctx)
		if _, err := exec.LookPath("go"); err != nil {
			Skip("no go tool on PATH to build the test image's program")
		}
		dir := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(dir, "main.go"), []byte(tinyServer), 0o644)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module tiny\n\ngo 1.22\n"), 0o644)).To(Succeed())
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", "tiny", ".")
		build.Dir = dir
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=")
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))

		tag = fmt.Sprintf("capbench-dockerapi-test:%d", time.Now().UnixNano())
		_, err = c.Build(ctx, tag, []dockerapi.ContextFile{
			{Name: "Dockerfile", Mode: 0o644, Data: []byte(tinyDockerfile)},
			{Name: "tiny", Mode: 0o755, Path: filepath.Join(dir, "tiny")},
		}, GinkgoWriter)
		DeferCleanup(func(ctx SpecContext) { Expect(c.RemoveImage(ctx, tag)).To(Succeed()) })
		Expect(err).NotTo(HaveOccurred())
		Expect(c.ImagePresent(ctx, tag)).To(BeTrue())
	}, NodeTimeout(3*time.Minute))

	It("surfaces the engine's build error with the build's output", func(ctx SpecContext) {
		_, err := c.Build(ctx, tag+"-broken", []dockerapi.ContextFile{
			{Name: "Dockerfile", Mode: 0o644, Data: []byte("FROM scratch\nCOPY missing /missing\n")},
		}, nil)
		Expect(err).To(MatchError(ContainSubstring("build image " + tag + "-broken failed: ")))
		Expect(err).To(MatchError(ContainSubstring("missing")))
		Expect(err).To(MatchError(ContainSubstring("COPY missing /missing")))
	}, SpecTimeout(time.Minute))

	It("runs two containers on a private network that reach each other by alias", func(ctx SpecContext) {
		nw, err := c.CreateNetwork(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(nw.Remove(ctx)).To(Succeed()) })
		first, err := c.Run(ctx, dockerapi.ContainerSpec{Image: tag, Port: "8000/tcp", Network: nw.Name, Aliases: []string{"first"}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(first.Remove(ctx)).To(Succeed()) })
		_, err = first.WaitHTTP(ctx, dockerapi.Wait{Path: "/health", Timeout: 30 * time.Second})
		Expect(err).NotTo(HaveOccurred())

		second, err := c.Run(ctx, dockerapi.ContainerSpec{Image: tag, Cmd: []string{"peer", "http://first:8000/health"},
			Port: "8000/tcp", Network: nw.Name, Aliases: []string{"second"}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(second.Remove(ctx)).To(Succeed()) })
		u, err := second.WaitHTTP(ctx, dockerapi.Wait{Path: "/health", Timeout: 30 * time.Second})
		Expect(err).NotTo(HaveOccurred())
		Expect(u).To(MatchRegexp(`^http://127\.0\.0\.1:\d+$`))
		Expect(second.Logs(ctx, 0)).To(ContainSubstring("tiny: listening on :8000"))
	}, SpecTimeout(2*time.Minute))

	It("reports a container that exits before it is healthy, with both of its streams", func(ctx SpecContext) {
		ctr, err := c.Run(ctx, dockerapi.ContainerSpec{Image: tag, Cmd: []string{"exit"}, Port: "8000/tcp"})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(ctr.Remove(ctx)).To(Succeed()) })
		_, err = ctr.WaitHTTP(ctx, dockerapi.Wait{Path: "/health", Timeout: 30 * time.Second})
		Expect(err).To(MatchError(ContainSubstring("(" + tag + ") exited with code 3 before GET /health answered")))
		Expect(err).To(MatchError(ContainSubstring("tiny: asked to exit")))
		Expect(err).To(MatchError(ContainSubstring("tiny: bye on stderr")))
	}, SpecTimeout(time.Minute))

	It("refuses to run an image the engine does not have, and leaves nothing behind", func(ctx SpecContext) {
		_, err := c.Run(ctx, dockerapi.ContainerSpec{Image: "capbench-no-such-image:0", Port: "8000/tcp"})
		Expect(err).To(MatchError(dockerapi.ErrNotFound))
		Expect(err).To(MatchError(ContainSubstring("create container from capbench-no-such-image:0")))
	}, SpecTimeout(time.Minute))
})
