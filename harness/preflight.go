package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

// ErrEnvironment wraps what Preflight finds: the environment cannot run any
// scenario, so the run stops before the first one instead of reporting the
// same cause once per scenario.
var ErrEnvironment = errors.New("environment")

// Preflight checks, once and before anything runs, what every scenario of a
// run would need from its environment: URLs that parse and answer, the
// capture directory of an external proxy, a container engine, the real-vLLM
// prerequisites.
func Preflight(ctx context.Context, opts Options) error {
	switch opts.Backend {
	case env.External:
		if opts.VLLMURL != "" {
			if err := reachable(ctx, "--vllm-url", opts.VLLMURL, "/health"); err != nil {
				return err
			}
		}
		if opts.ProxyURL != "" {
			if err := reachable(ctx, "--proxy-url", opts.ProxyURL, ""); err != nil {
				return err
			}
			if fi, err := os.Stat(opts.CaptureDir); err != nil || !fi.IsDir() {
				return fmt.Errorf("%w: --capture-dir %s (the proxy's capture directory) does not exist", ErrEnvironment, opts.CaptureDir)
			}
		}
	case env.Container:
		if ok, why := env.DockerUsable(ctx); !ok {
			return fmt.Errorf("%w: the container backend needs a Docker engine: %s", ErrEnvironment, why)
		}
	case env.RealVLLM:
		image := opts.Image
		if image == "" {
			image = env.DefaultVLLMImage
		}
		if ok, why := env.RealVLLMAvailable(ctx, image); !ok {
			return fmt.Errorf("%w: the vllm backend cannot run here: %s", ErrEnvironment, why)
		}
	}
	return nil
}

// ValidateURL checks a base URL given by flag: absolute http(s) with a host,
// and not ending in /v1 (capbench adds the /v1 paths itself).
func ValidateURL(flag, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want an absolute http:// or https:// URL such as http://127.0.0.1:8000", flag, raw)
	}
	if p := strings.TrimRight(u.Path, "/"); strings.HasSuffix(p, "/v1") {
		return fmt.Errorf("%s %q: give the server's base URL without /v1 (%s://%s%s)", flag, raw, u.Scheme, u.Host, strings.TrimSuffix(p, "/v1"))
	}
	return nil
}

// reachable checks that something answers at raw: an HTTP GET of path when
// given (a vLLM's /health), else a TCP connect.
func reachable(ctx context.Context, flag, raw, path string) error {
	if err := ValidateURL(flag, raw); err != nil {
		return fmt.Errorf("%w: %w", ErrEnvironment, err)
	}
	u, _ := url.Parse(raw)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if path == "" {
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", host)
		if err != nil {
			return fmt.Errorf("%w: nothing answers at %s %s: %w", ErrEnvironment, flag, raw, err)
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(raw, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrEnvironment, flag, raw, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: nothing answers at %s %s: %w", ErrEnvironment, flag, raw, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s %s: GET %s answered %s", ErrEnvironment, flag, raw, path, resp.Status)
	}
	return nil
}

// externalServer picks the server settings an external vLLM is taken to
// run: those most of the selected scenarios need (the first such on a tie).
// Scenarios that need other settings are skipped with the flags that would
// serve them, since this process cannot restart someone else's server.
func externalServer(scs []scenarios.Scenario) string {
	count := map[string]int{}
	best, bestN := "", 0
	for _, sc := range scs {
		k := sc.Server.Key()
		count[k]++
		if count[k] > bestN {
			best, bestN = k, count[k]
		}
	}
	return best
}

// otherServerReason is the skip reason of a scenario an external server
// with other settings cannot run.
func otherServerReason(sc scenarios.Scenario) string {
	s := sc.Server
	if s.Model == "" {
		s.Model = scenarios.DefaultModel
	}
	args := env.FakeArgs(env.Spec{Server: s}, "127.0.0.1", 8000)
	return fmt.Sprintf("needs a server started with other flags than most selected scenarios; run it alone against `capbench %s` (--scenario %s)",
		strings.Join(args, " "), sc.Name)
}
