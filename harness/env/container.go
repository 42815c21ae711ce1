package env

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/capbench/capbench/scenarios"
)

// ContainerDefaults sets the testcontainers settings this project needs when
// they are not set already: no reaper (it is pulled from a registry) and
// localhost as the Docker host (the sandbox has /.dockerenv).
func ContainerDefaults() {
	defaults := map[string]string{"TESTCONTAINERS_RYUK_DISABLED": "true"}
	// The host override only fits an engine on this machine; a remote
	// DOCKER_HOST publishes ports on its own address.
	if h := os.Getenv("DOCKER_HOST"); h == "" || strings.HasPrefix(h, "unix://") {
		defaults["TESTCONTAINERS_HOST_OVERRIDE"] = "127.0.0.1"
	}
	for k, v := range defaults {
		if _, ok := os.LookupEnv(k); !ok {
			_ = os.Setenv(k, v)
		}
	}
}

// DockerUsable reports whether a container engine answers, and why not.
func DockerUsable(ctx context.Context) (ok bool, why string) {
	defer func() { // some lookups panic when no socket exists
		if r := recover(); r != nil {
			ok, why = false, fmt.Sprint(r)
		}
	}()
	if os.Getenv("CAPBENCH_E2E") == "0" {
		return false, "disabled by CAPBENCH_E2E=0"
	}
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false, DockerReason(err.Error())
	}
	defer p.Close()
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Health(hctx); err != nil {
		return false, DockerReason(err.Error())
	}
	return true, ""
}

// DockerReason says in plain words that the Docker daemon is not running
// when that is why the engine did not answer; other causes pass unchanged.
func DockerReason(why string) string {
	low := strings.ToLower(why)
	for _, s := range []string{"cannot connect to the docker daemon", "connection refused", "docker.sock: connect: no such file", "rootless docker not found"} {
		if strings.Contains(low, s) {
			return "the Docker daemon is not running (start it: `sudo systemctl start docker`, or `dockerd`): " + why
		}
	}
	return why
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
	dir, err := os.MkdirTemp("", "capbench-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if binary != "" {
		if err := copyFile(binary, filepath.Join(dir, "capbench")); err != nil {
			return "", fmt.Errorf("copy %s into the build context: %w", binary, err)
		}
	} else if _, err := BuildBinary(ctx, dir, true); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(scratchDockerfile), 0o644); err != nil {
		return "", err
	}
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer p.Close()
	tag, err := p.BuildImage(ctx, &testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
		Context: dir, Repo: "capbench-e2e", Tag: fmt.Sprintf("%d", time.Now().UnixNano()), KeepImage: true,
	}})
	if err != nil {
		return "", fmt.Errorf("build capbench image: %w", err)
	}
	return tag, nil
}

// RemoveImage deletes an image BuildImage built.
func RemoveImage(ctx context.Context, tag string) error {
	if tag == "" {
		return nil
	}
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	_, err = p.Client().ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	return err
}

func startContainers(ctx context.Context, spec Spec) (_ Env, err error) {
	ContainerDefaults()
	if ok, why := DockerUsable(ctx); !ok {
		return nil, fmt.Errorf("%w: no container engine: %s", ErrUnavailable, why)
	}
	if spec.Faults.any() {
		return nil, fmt.Errorf("%w: store faults need the proxy in this process", ErrUnsupported)
	}
	var closers []func() error
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
		if tag, err = BuildImage(ctx, spec.Binary); err != nil {
			return nil, err
		}
		closers = append(closers, func() error { return RemoveImage(cleanupCtx, tag) })
	}
	nw, err := network.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("create network: %w", err)
	}
	closers = append(closers, func() error { return nw.Remove(cleanupCtx) })

	fake, err := testcontainers.Run(ctx, tag,
		testcontainers.WithCmd(FakeArgs(spec, "0.0.0.0", 8000)...),
		testcontainers.WithExposedPorts(containerPort),
		network.WithNetwork([]string{"vllm"}, nw),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/health").WithPort(containerPort).WithStartupTimeout(60*time.Second)))
	closers = append(closers, func() error { return testcontainers.TerminateContainer(fake) })
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
	px, err := testcontainers.Run(ctx, tag,
		testcontainers.WithCmd("proxy", "--upstream", "http://vllm:8000", "--capture-dir", "/capture",
			"--host", "0.0.0.0", "--port", "8000"),
		testcontainers.WithExposedPorts(containerPort),
		network.WithNetwork([]string{"proxy"}, nw),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.Binds = append(hc.Binds, abs+":/capture")
		}),
		// /health through the proxy answers only once the proxy serves and
		// reaches vLLM by its alias (a port check passes on Docker's own
		// port forwarder before the process listens).
		testcontainers.WithWaitStrategy(wait.ForHTTP("/health").WithPort(containerPort).WithStartupTimeout(60*time.Second)))
	closers = append(closers, func() error { return testcontainers.TerminateContainer(px) })
	if err != nil {
		return nil, fmt.Errorf("start proxy container: %w", err)
	}
	fakeURL, err := fake.PortEndpoint(ctx, containerPort, "http")
	if err != nil {
		return nil, err
	}
	proxyURL, err := px.PortEndpoint(ctx, containerPort, "http")
	if err != nil {
		return nil, err
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
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false, err.Error()
	}
	defer p.Close()
	info, err := p.Client().Info(ctx, client.InfoOptions{})
	if err != nil {
		return false, "docker info: " + err.Error()
	}
	if _, ok := info.Info.Runtimes["nvidia"]; !ok {
		return false, "no NVIDIA container runtime on the Docker host (no GPU access)"
	}
	if _, err := p.Client().ImageInspect(ctx, image); err != nil {
		return false, fmt.Sprintf("image %s is not present locally (no registry pulls): %v", image, err)
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

func startRealVLLM(ctx context.Context, spec Spec) (_ Env, err error) {
	ContainerDefaults()
	image := spec.Image
	if image == "" {
		image = DefaultVLLMImage
	}
	if ok, why := RealVLLMAvailable(ctx, image); !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, why)
	}
	args := VLLMArgs(spec.Server)
	vllmCtr, err := testcontainers.Run(ctx, image,
		testcontainers.WithCmd(args...),
		testcontainers.WithExposedPorts(containerPort),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.DeviceRequests = append(hc.DeviceRequests, container.DeviceRequest{
				Driver: "nvidia", Count: -1, Capabilities: [][]string{{"gpu"}}})
			hc.IpcMode = "host"
			if cache := os.Getenv("HF_HOME"); cache != "" {
				hc.Binds = append(hc.Binds, cache+":/root/.cache/huggingface")
			}
		}),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/health").WithPort(containerPort).WithStartupTimeout(15*time.Minute)))
	stop := func() error { return testcontainers.TerminateContainer(vllmCtr) }
	if err != nil {
		_ = stop()
		return nil, fmt.Errorf("start vLLM %s %s: %w", image, strings.Join(args, " "), err)
	}
	u, err := vllmCtr.PortEndpoint(ctx, containerPort, "http")
	if err != nil {
		_ = stop()
		return nil, err
	}
	l := &local{backend: RealVLLM, vllmURL: u, closers: []func() error{stop}}
	if err := l.startProxy(ctx, spec, u); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
