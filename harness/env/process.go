package env

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/capbench/capbench/internal/loopback"
)

// MainPackage is the import path of the capbench command.
const MainPackage = "github.com/capbench/capbench/cmd/capbench"

// BuildBinary builds the capbench command into dir and returns its path. With
// static it is a CGO-free linux binary suitable for a FROM-scratch image.
func BuildBinary(ctx context.Context, dir string, static bool) (string, error) {
	out := filepath.Join(dir, "capbench")
	args := []string{"build", "-o", out}
	if static {
		args = append(args, "-trimpath", "-ldflags=-s -w")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, MainPackage)...)
	cmd.Env = os.Environ()
	if static {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0", "GOOS=linux")
	}
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s (run from the capbench repository, or pass a prebuilt binary: "+
			"`make build` makes a static one in bin/capbench)", MainPackage, err, bytes.TrimSpace(msg))
	}
	return out, nil
}

// IsStatic reports whether the ELF binary at path has no dynamic loader, so
// it can run in a FROM-scratch image.
func IsStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// FakeArgs turns server settings into `capbench fake-vllm` arguments.
func FakeArgs(spec Spec, host string, port int) []string {
	s := spec.Server
	args := []string{"fake-vllm", s.Model, "--host", host, "--port", strconv.Itoa(port), "--seed", "1"}
	if s.MaxModelLen > 0 {
		args = append(args, "--max-model-len", strconv.Itoa(s.MaxModelLen))
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
	if s.ChatTemplateVariant != "" {
		args = append(args, "--chat-template-variant", s.ChatTemplateVariant)
	}
	return args
}

func startProcess(ctx context.Context, spec Spec) (_ Env, err error) {
	l := &local{backend: Process}
	defer func() {
		if err != nil {
			_ = l.Close()
		}
	}()
	bin := spec.Binary
	if bin == "" {
		dir, err := os.MkdirTemp("", "capbench-bin-")
		if err != nil {
			return nil, err
		}
		l.closers = append(l.closers, func() error { return os.RemoveAll(dir) })
		if bin, err = BuildBinary(ctx, dir, false); err != nil {
			return nil, err
		}
	}
	port, err := loopback.FreePort()
	if err != nil {
		return nil, fmt.Errorf("pick a port: %w", err)
	}
	cmd := exec.Command(bin, FakeArgs(spec, "127.0.0.1", port)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(os.TempDir(), fmt.Sprintf("capbench-fake-%d.log", port))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	l.closers = append(l.closers, func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		return os.Remove(logPath)
	})
	l.vllmURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHealthy(ctx, l.vllmURL+"/health", 20*time.Second); err != nil {
		log, _ := os.ReadFile(logPath)
		return nil, errors.Join(fmt.Errorf("fake vLLM process: %w", err), fmt.Errorf("log: %s", log))
	}
	l.fakeHTTP = newFakeClient(l.vllmURL)
	if err := l.startProxy(ctx, spec, l.vllmURL); err != nil {
		return nil, err
	}
	return l, nil
}

func startExternal(ctx context.Context, spec Spec) (_ Env, err error) {
	if spec.ProxyURL == "" && spec.VLLMURL == "" {
		return nil, fmt.Errorf("%w: the external backend needs a vLLM URL and/or a proxy URL", ErrInvalidSpec)
	}
	if spec.ProxyURL != "" {
		if spec.CaptureDir == "" {
			return nil, fmt.Errorf("%w: an external proxy needs its capture directory", ErrInvalidSpec)
		}
		if spec.Faults.any() {
			return nil, fmt.Errorf("%w: store faults need the proxy in this process", ErrUnsupported)
		}
		return newRemote(External, spec.ProxyURL, spec.VLLMURL, spec.CaptureDir, nil)
	}
	l := &local{backend: External, vllmURL: spec.VLLMURL, fakeHTTP: newFakeClient(spec.VLLMURL)}
	defer func() {
		if err != nil {
			_ = l.Close()
		}
	}()
	if err := l.startProxy(ctx, spec, spec.VLLMURL); err != nil {
		return nil, err
	}
	return l, nil
}
