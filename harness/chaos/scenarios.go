package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

// fakeServer is the engine every scenario runs against: the catalogue's
// defaults, serving the name the load asks for.
func fakeServer() scenarios.Server { return scenarios.Server{Model: scenarios.DefaultModel} }

// stack is a fake vLLM and the proxies in front of it, on one directory.
type stack struct {
	cfg     Config
	fake    *vllm.Server
	dir     string
	proxies []*env.ProxyProcess
	peakRSS int64
	cleanup []func()
}

// newStack starts a fake vLLM, its options adjusted by tune when set.
func newStack(ctx context.Context, cfg Config, name string, tune func(*vllm.Options)) (*stack, error) {
	s := &stack{cfg: cfg}
	dir, rm, err := scratch(cfg, name)
	if err != nil {
		return nil, err
	}
	s.dir = dir
	s.cleanup = append(s.cleanup, rm)
	fake, err := env.StartFake(ctx, fakeServer(), tune)
	if err != nil {
		s.close()
		return nil, err
	}
	s.fake = fake
	s.cleanup = append(s.cleanup, func() { _ = fake.Close() })
	return s, nil
}

// addProxy starts one more `capbench proxy` on the stack's directory.
func (s *stack) addProxy(ctx context.Context, spec env.ProxySpec) (*env.ProxyProcess, error) {
	spec.Binary, spec.Upstream, spec.Log = s.cfg.Binary, s.fake.URL(), s.cfg.Log
	if spec.CaptureDir == "" {
		spec.CaptureDir = s.dir
	}
	p, err := env.StartProxyProcess(ctx, spec)
	if err != nil {
		return nil, err
	}
	s.proxies = append(s.proxies, p)
	return p, nil
}

// sample folds the proxies' peak RSS into the stack's.
func (s *stack) sample() {
	for _, p := range s.proxies {
		if u, err := p.Usage(); err == nil {
			s.peakRSS = max(s.peakRSS, u.PeakRSSBytes)
		}
	}
}

// stopProxies samples, then stops every proxy cleanly (SIGTERM).
func (s *stack) stopProxies() {
	s.sample()
	for _, p := range s.proxies {
		_ = p.Stop()
	}
}

func (s *stack) close() {
	for _, p := range s.proxies {
		_ = p.Kill()
	}
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
}

// finish stops the proxies and counts the load into a row.
func (s *stack) finish(ctx context.Context, l *load, row Row, dir string) (Row, error) {
	s.stopProxies()
	if err := tally(ctx, dir, l, s.fake.Ledger(), &row); err != nil {
		return row, err
	}
	row.PeakRSSBytes = s.peakRSS
	if f := l.failures(); f != "" {
		row.Notes = strings.TrimSpace(row.Notes + " refused: " + f)
	}
	return row, nil
}

func loadLabel(workers int, d time.Duration) string {
	return fmt.Sprintf("%d callers, %s", workers, d)
}

// runFor drives l until d has passed.
func runFor(ctx context.Context, l *load, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	l.run(ctx)
}

// KillUnderLoad kills the proxy with SIGKILL cfg.Kills times while the
// callers keep going, restarting it on the same port each time.
func KillUnderLoad(ctx context.Context, cfg Config) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	s, err := newStack(ctx, cfg, "kill", nil)
	if err != nil {
		return Row{}, err
	}
	defer s.close()
	p, err := s.addProxy(ctx, env.ProxySpec{})
	if err != nil {
		return Row{}, err
	}
	l := newLoad("kill", cfg.Concurrency, p.URL())
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.run(lctx) }()
	every := cfg.Duration / time.Duration(cfg.Kills+1)
	var restartErr error
	for range cfg.Kills {
		time.Sleep(every)
		s.sample()
		_ = p.Kill()
		if restartErr = p.Restart(ctx); restartErr != nil {
			break
		}
	}
	time.Sleep(every)
	stop()
	wg.Wait()
	if restartErr != nil {
		return Row{}, fmt.Errorf("restart after kill -9: %w", restartErr)
	}
	row := Row{Scenario: fmt.Sprintf("kill -9 ×%d", cfg.Kills), Load: loadLabel(cfg.Concurrency, cfg.Duration), Faults: "SIGKILL of the proxy"}
	return s.finish(ctx, l, row, s.dir)
}

// TwoProxies runs two proxy processes on one directory, each rollout's
// calls alternating between them.
func TwoProxies(ctx context.Context, cfg Config) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	s, err := newStack(ctx, cfg, "two", nil)
	if err != nil {
		return Row{}, err
	}
	defer s.close()
	var urls []string
	for range 2 {
		p, err := s.addProxy(ctx, env.ProxySpec{})
		if err != nil {
			return Row{}, err
		}
		urls = append(urls, p.URL())
	}
	l := newLoad("two", cfg.Concurrency, urls...)
	runFor(ctx, l, cfg.Duration)
	row := Row{Scenario: "two proxies, one dir", Load: loadLabel(cfg.Concurrency, cfg.Duration), Faults: "concurrent writers"}
	return s.finish(ctx, l, row, s.dir)
}

// errNoTmpfs means a tmpfs could not be mounted here.
var errNoTmpfs = errors.New("cannot mount a tmpfs")

// FullDisk puts the capture directory on a small tmpfs and keeps calling
// until well after it is full.
func FullDisk(ctx context.Context, cfg Config) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	row := Row{Scenario: "capture disk fills", Load: loadLabel(cfg.Concurrency, cfg.Duration),
		Faults: fmt.Sprintf("%d KiB tmpfs", cfg.TmpfsBytes>>10)}
	s, err := newStack(ctx, cfg, "full", nil)
	if err != nil {
		return Row{}, err
	}
	defer s.close()
	mnt, err := mountTmpfs(s.dir, cfg.TmpfsBytes)
	if err != nil {
		if cfg.RequireTmpfs {
			return Row{}, err
		}
		row.Skipped = err.Error()
		return row, nil
	}
	s.cleanup = append(s.cleanup, func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	p, err := s.addProxy(ctx, env.ProxySpec{CaptureDir: mnt})
	if err != nil {
		return Row{}, err
	}
	l := newLoad("full", cfg.Concurrency, p.URL())
	runFor(ctx, l, cfg.Duration)
	var st syscall.Statfs_t
	if syscall.Statfs(mnt, &st) == nil {
		row.Notes = fmt.Sprintf("free at end: %d KiB", int64(st.Bavail)*st.Bsize>>10)
	}
	// Count on a copy: freezing writes, and the tmpfs is full.
	counted := s.dir + "/counted"
	if err := copyTree(mnt, counted); err != nil {
		return Row{}, fmt.Errorf("copy the full capture dir: %w", err)
	}
	return s.finish(ctx, l, row, counted)
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, 0o600)
		}
		return nil
	})
}

// mountTmpfs mounts a tmpfs of size bytes on dir/mnt.
func mountTmpfs(dir string, size int64) (string, error) {
	mnt := dir + "/mnt"
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return "", err
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return "", fmt.Errorf("%w on %s (needs root or CAP_SYS_ADMIN): %v", errNoTmpfs, mnt, err)
	}
	return mnt, nil
}

// allFaults are every fault kind the fake vLLM can inject.
var allFaults = []string{vllm.Fault500, vllm.Fault503, vllm.FaultDropMidStream, vllm.FaultStall,
	vllm.FaultNoLogprobs, vllm.FaultTruncatedJSON, vllm.FaultStreamError}

// UpstreamFaults puts the proxy in front of a fake that fails 30% of the
// calls with every kind of fault it knows; stalls outlast the proxy's
// --upstream-timeout.
func UpstreamFaults(ctx context.Context, cfg Config) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	s, err := newStack(ctx, cfg, "faults", func(o *vllm.Options) {
		o.Faults = vllm.Faults{Rate: 0.3, Kinds: allFaults, Stall: 3 * time.Second}
	})
	if err != nil {
		return Row{}, err
	}
	defer s.close()
	p, err := s.addProxy(ctx, env.ProxySpec{Args: []string{"--upstream-timeout", "1s"}})
	if err != nil {
		return Row{}, err
	}
	l := newLoad("faults", cfg.Concurrency, p.URL())
	runFor(ctx, l, cfg.Duration)
	row := Row{Scenario: "upstream faults", Load: loadLabel(cfg.Concurrency, cfg.Duration),
		Faults: "30%: " + strings.Join(allFaults, ",")}
	return s.finish(ctx, l, row, s.dir)
}
