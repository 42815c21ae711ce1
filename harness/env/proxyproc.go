package env

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/scenarios"

	"github.com/capbench/capbench/internal/loopback"
)

// StartFake starts an in-process fake vLLM with the given server settings,
// for stacks whose proxy runs elsewhere (a process that chaos tests kill);
// tune, when set, adjusts the options (faults, timing) before it starts.
// Close it when done.
func StartFake(ctx context.Context, server scenarios.Server, tune func(*vllm.Options)) (*vllm.Server, error) {
	if server.Model == "" {
		server.Model = scenarios.DefaultModel
	}
	opts := fakeOptions(server)
	opts.Logger = discardLogger(nil)
	if tune != nil {
		tune(&opts)
	}
	fake, err := vllm.New(opts)
	if err != nil {
		return nil, fmt.Errorf("create fake vLLM: %w", err)
	}
	if err := fake.Start(ctx); err != nil {
		return nil, fmt.Errorf("start fake vLLM: %w", err)
	}
	return fake, nil
}

// ProxySpec describes a `capbench proxy` process.
type ProxySpec struct {
	// Binary is the capbench executable.
	Binary string
	// Upstream and CaptureDir are its --upstream and --capture-dir.
	Upstream, CaptureDir string
	// Port to listen on; 0 picks a free one (kept across Restart).
	Port int
	// Args are extra flags (limits, timeouts).
	Args []string
	// MaxOpenFiles, when > 0, caps the process's descriptors (RLIMIT_NOFILE,
	// set with the shell's ulimit before the proxy starts).
	MaxOpenFiles uint64
	// Log receives the process's output; nil discards it.
	Log io.Writer
}

// ProxyProcess is a running `capbench proxy`, which can be killed and
// restarted on the same address.
type ProxyProcess struct {
	spec ProxySpec
	url  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProxyProcess starts `capbench proxy` and waits until it serves.
func StartProxyProcess(ctx context.Context, spec ProxySpec) (*ProxyProcess, error) {
	if spec.Binary == "" {
		return nil, fmt.Errorf("%w: ProxySpec.Binary is required", ErrInvalidSpec)
	}
	if spec.Port == 0 {
		port, err := loopback.FreePort()
		if err != nil {
			return nil, fmt.Errorf("pick a port: %w", err)
		}
		spec.Port = port
	}
	p := &ProxyProcess{spec: spec, url: fmt.Sprintf("http://127.0.0.1:%d", spec.Port)}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// URL is the proxy's base URL (the same after a restart).
func (p *ProxyProcess) URL() string { return p.url }

// PID is the current process id (0 when not running).
func (p *ProxyProcess) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

var listeningLine = regexp.MustCompile(`capture proxy at (http://\S+)`)

func (p *ProxyProcess) start(ctx context.Context) error {
	args := append([]string{"proxy", "--upstream", p.spec.Upstream, "--capture-dir", p.spec.CaptureDir,
		"--port", strconv.Itoa(p.spec.Port), "--log-level", "error"}, p.spec.Args...)
	cmd := exec.Command(p.spec.Binary, args...)
	if p.spec.MaxOpenFiles > 0 {
		// Set before exec, so the proxy sizes its defaults from it: the
		// shell lowers the limit and replaces itself with the proxy.
		cmd = exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, p.spec.MaxOpenFiles), p.spec.Binary}, args...)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	log := p.spec.Log
	if log == nil {
		log = io.Discard
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s proxy: %w", p.spec.Binary, err)
	}
	done := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			if listeningLine.MatchString(sc.Text()) {
				once.Do(func() { close(ready) })
			}
			fmt.Fprintln(log, sc.Text())
		}
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-done:
		return fmt.Errorf("capbench proxy exited before listening on %s (exit %v)", p.url, cmd.ProcessState)
	case <-time.After(20 * time.Second):
		_ = p.Kill()
		return errors.New("capbench proxy did not report its address within 20s")
	case <-ctx.Done():
		_ = p.Kill()
		return ctx.Err()
	}
}

// Kill sends SIGKILL and waits for the process to go.
func (p *ProxyProcess) Kill() error { return p.stop(syscall.SIGKILL) }

// Stop sends SIGTERM (a clean shutdown) and waits, killing after 10 s.
func (p *ProxyProcess) Stop() error { return p.stop(syscall.SIGTERM) }

func (p *ProxyProcess) stop(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}

// Restart starts the proxy again on the same port, after Kill or Stop.
func (p *ProxyProcess) Restart(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.start(ctx)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // the port may linger a moment
	}
}

// Usage is a process's memory and descriptors, read from /proc.
type Usage struct {
	RSSBytes     int64 // resident now (VmRSS)
	PeakRSSBytes int64 // high-water mark (VmHWM)
	OpenFiles    int
}

// Usage reads the running process's /proc entries.
func (p *ProxyProcess) Usage() (Usage, error) {
	pid := p.PID()
	if pid == 0 {
		return Usage{}, errors.New("proxy process is not running")
	}
	return ProcUsage(pid)
}

// ProcUsage reads a process's memory and descriptor counts from /proc.
func ProcUsage(pid int) (Usage, error) {
	var u Usage
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			u.RSSBytes = kb << 10
		case "VmHWM":
			u.PeakRSSBytes = kb << 10
		}
	}
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return u, err
	}
	u.OpenFiles = len(fds)
	return u, nil
}
