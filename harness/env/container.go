package env

// The container and real-vLLM backends talk to the Docker engine through
// internal/dockerapi (net/http only): a Docker SDK would be linked into, and
// initialised by, every capbench command.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/capbench/capbench/internal/dockerapi"
	"github.com/capbench/capbench/scenarios"
)

// healthWait is how long a fake or proxy container may take to answer /health.
const healthWait = 60 * time.Second

// dockerClient returns a client for the engine DOCKER_HOST names (or the
// default socket); the caller closes it.
func dockerClient() (*dockerapi.Client, error) {
	c, err := dockerapi.FromEnv()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return c, nil
}

// DockerUsable reports whether a container engine answers, and why not.
func DockerUsable(ctx context.Context) (ok bool, why string) {
	if os.Getenv("CAPBENCH_E2E") == "0" {
		return false, "disabled by CAPBENCH_E2E=0"
	}
	c, err := dockerapi.FromEnv()
	if err != nil {
		return false, err.Error()
	}
	defer c.Close()
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Ping(hctx); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// containerPort is where fake and proxy listen inside their containers.
const containerPort = "8000/tcp"

const scratchDockerfile = `FROM scratch
COPY capbench /capbench
EXPOSE 8000
USER 65534:65534
ENTRYPOINT ["/capbench"]
`

// BuildImage builds a FROM-scratch image holding a static capbench binary
// and returns its tag (no registry is contacted). binary is a prebuilt
// static binary; empty builds one. Remove it with RemoveImage.
func BuildImage(ctx context.Context, binary string) (string, error) {
	dc, err := dockerClient()
	if err != nil {
		return "", err
	}
	defer dc.Close()
	return buildImage(ctx, dc, binary)
}

func buildImage(ctx context.Context, dc *dockerapi.Client, binary string) (string, error) {
	if binary == "" {
		dir, err := os.MkdirTemp("", "capbench-image-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(dir)
		if binary, err = BuildBinary(ctx, dir, true); err != nil {
			return "", err
		}
	} else if _, err := os.Stat(binary); err != nil {
		return "", fmt.Errorf("the capbench binary for the image: %w", err)
	}
	tag := fmt.Sprintf("capbench-e2e:%d", time.Now().UnixNano())
	files := []dockerapi.ContextFile{
		{Name: "Dockerfile", Mode: 0o644, Data: []byte(scratchDockerfile)},
		{Name: "capbench", Mode: 0o755, Path: binary},
	}
	if _, err := dc.Build(ctx, tag, files, nil); err != nil {
		return "", fmt.Errorf("build the capbench image from %s: %w", binary, err)
	}
	return tag, nil
}

// RemoveImage deletes an image BuildImage built.
func RemoveImage(ctx context.Context, tag string) error {
	if tag == "" {
		return nil
	}
	dc, err := dockerClient()
	if err != nil {
		return err
	}
	defer dc.Close()
	return dc.RemoveImage(ctx, tag)
}

// runHealthy starts a container, adds its removal to closers (also when it
// then fails), and waits until its /health answers; it returns its URL.
func runHealthy(ctx context.Context, dc *dockerapi.Client, closers *[]func() error, spec dockerapi.ContainerSpec, wait time.Duration) (string, error) {
	ctr, err := dc.Run(ctx, spec)
	if err != nil {
		return "", err
	}
	cleanup := context.WithoutCancel(ctx)
	*closers = append(*closers, func() error {
		rctx, cancel := context.WithTimeout(cleanup, time.Minute)
		defer cancel()
		return ctr.Remove(rctx)
	})
	return ctr.WaitHTTP(ctx, dockerapi.Wait{Path: "/health", Timeout: wait})
}

func startContainers(ctx context.Context, spec Spec) (_ Env, err error) {
	if ok, why := DockerUsable(ctx); !ok {
		return nil, fmt.Errorf("%w: no container engine: %s", ErrUnavailable, why)
	}
	if spec.Faults.any() {
		return nil, fmt.Errorf("%w: store faults need the proxy in this process", ErrUnsupported)
	}
	dc, err := dockerClient()
	if err != nil {
		return nil, err
	}
	closers := []func() error{func() error { dc.Close(); return nil }}
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()
	cleanupCtx := context.WithoutCancel(ctx)
	tag := spec.CapbenchImage
	if tag == "" {
		if tag, err = buildImage(ctx, dc, spec.Binary); err != nil {
			return nil, err
		}
		closers = append(closers, func() error { return dc.RemoveImage(cleanupCtx, tag) })
	}
	nw, err := dc.CreateNetwork(ctx)
	if err != nil {
		return nil, fmt.Errorf("create the containers' network: %w", err)
	}
	closers = append(closers, func() error { return nw.Remove(cleanupCtx) })

	fakeURL, err := runHealthy(ctx, dc, &closers, dockerapi.ContainerSpec{
		Image: tag, Cmd: FakeArgs(spec, "0.0.0.0", 8000), Port: containerPort,
		Network: nw.Name, Aliases: []string{"vllm"},
	}, healthWait)
	if err != nil {
		return nil, fmt.Errorf("start fake vLLM container: %w", err)
	}

	// The proxy runs as uid 65534 and writes the capture files into a
	// world-writable host directory, which the collector then freezes.
	dir := spec.CaptureDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "capbench-capture-"); err != nil {
			return nil, err
		}
		closers = append(closers, func() error { return os.RemoveAll(dir) })
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, fmt.Errorf("open capture dir to the container user: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// /health through the proxy answers only once the proxy serves and
	// reaches vLLM by its alias.
	proxyURL, err := runHealthy(ctx, dc, &closers, dockerapi.ContainerSpec{
		Image: tag, Port: containerPort, Network: nw.Name, Aliases: []string{"proxy"},
		Cmd: []string{"proxy", "--upstream", "http://vllm:8000", "--capture-dir", "/capture",
			"--host", "0.0.0.0", "--port", "8000"},
		Binds: []string{abs + ":/capture"},
	}, healthWait)
	if err != nil {
		return nil, fmt.Errorf("start proxy container: %w", err)
	}
	r, err := newRemote(Container, proxyURL, fakeURL, dir, closers)
	if err != nil {
		return nil, err
	}
	closers = nil // owned by r now
	return r, nil
}

// DefaultVLLMImage is the real vLLM image the GPU backend runs (never pulled:
// it must already be present locally).
const DefaultVLLMImage = "vllm/vllm-openai:v0.29.0"

// RealVLLMAvailable reports whether the real-vLLM backend can run here: a
// container engine, the image present locally, and an NVIDIA runtime.
func RealVLLMAvailable(ctx context.Context, image string) (ok bool, why string) {
	if os.Getenv("CAPBENCH_GPU") != "1" {
		return false, "set CAPBENCH_GPU=1 to run the real-vLLM backend (needs a GPU and a local vLLM image)"
	}
	if ok, why := DockerUsable(ctx); !ok {
		return false, "no container engine: " + why
	}
	dc, err := dockerClient()
	if err != nil {
		return false, err.Error()
	}
	defer dc.Close()
	info, err := dc.Info(ctx)
	if err != nil {
		return false, err.Error()
	}
	if _, ok := info.Runtimes["nvidia"]; !ok {
		return false, "no NVIDIA container runtime on the Docker host (no GPU access)"
	}
	present, err := dc.ImagePresent(ctx, image)
	if err != nil {
		return false, err.Error()
	}
	if !present {
		return false, fmt.Sprintf("image %s is not present locally (no registry pulls): `docker load` or pull it first", image)
	}
	return true, ""
}

// VLLMArgs are the walkthrough's `vllm serve` arguments for the settings.
func VLLMArgs(s scenarios.Server) []string {
	args := []string{s.Model, "--host", "0.0.0.0", "--port", "8000"}
	if s.MaxModelLen > 0 {
		args = append(args, "--max-model-len", fmt.Sprint(s.MaxModelLen))
	}
	if s.EnableAutoToolChoice {
		args = append(args, "--enable-auto-tool-choice")
	}
	if s.ToolCallParser != "" {
		args = append(args, "--tool-call-parser", s.ToolCallParser)
	}
	if s.ReasoningParser != "" {
		args = append(args, "--reasoning-parser", s.ReasoningParser)
	}
	return args
}

// vllmWait is how long a real vLLM may take to load its model.
const vllmWait = 15 * time.Minute

func startRealVLLM(ctx context.Context, spec Spec) (_ Env, err error) {
	image := spec.Image
	if image == "" {
		image = DefaultVLLMImage
	}
	if ok, why := RealVLLMAvailable(ctx, image); !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, why)
	}
	dc, err := dockerClient()
	if err != nil {
		return nil, err
	}
	closers := []func() error{func() error { dc.Close(); return nil }}
	stop := func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	}
	args := VLLMArgs(spec.Server)
	ctr := dockerapi.ContainerSpec{Image: image, Cmd: args, Port: containerPort, GPUs: true, IpcMode: "host"}
	if cache := os.Getenv("HF_HOME"); cache != "" {
		ctr.Binds = append(ctr.Binds, cache+":/root/.cache/huggingface")
	}
	u, err := runHealthy(ctx, dc, &closers, ctr, vllmWait)
	if err != nil {
		_ = stop()
		return nil, fmt.Errorf("start vLLM %s %s: %w", image, strings.Join(args, " "), err)
	}
	l := &local{backend: RealVLLM, vllmURL: u, closers: []func() error{stop}}
	if err := l.startProxy(ctx, spec, u); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}
