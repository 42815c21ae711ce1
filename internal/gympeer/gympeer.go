// Package gympeer runs NeMo Gym's own token-capture code beside ours, so a
// benchmark reports a ratio measured in the same run rather than against a
// quoted figure.
//
// The Gym checkout is named by the environment variable CAPBENCH_GYM_DIR: a
// directory that contains nemo_gym/ (a clone of NVIDIA-NeMo/Gym, or just its
// nemo_gym folder). A small Python driver shipped in this package (driver.py,
// embedded and written to a temporary file) imports Gym's modules from there
// and times one Gym call per request, answering with one JSON line. The
// driver runs either as a long-lived session (Gym timed inside a warm
// interpreter) or as one process per request (whole-process wall time:
// interpreter start and imports included). CAPBENCH_PYTHON names the
// interpreter (default python3; it needs pydantic and orjson, as Gym does).
// See docs/gym-peer.md.
package gympeer

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvDir names the Gym checkout; EnvPython the interpreter.
const (
	EnvDir    = "CAPBENCH_GYM_DIR"
	EnvPython = "CAPBENCH_PYTHON"
)

// NotConfigured is what a benchmark prints when it ran ours only.
const NotConfigured = "NeMo Gym peer not run: set " + EnvDir +
	" to a Gym checkout (a directory containing nemo_gym/) to measure Gym's code side by side (docs/gym-peer.md)"

//go:embed driver.py
var driverPy []byte

// Peer is a usable Gym checkout and the driver written for it.
type Peer struct {
	dir, python, script string
	// SchemaVersion is the newest record schema the checkout's reader takes.
	SchemaVersion int
}

// FromEnv opens the checkout CAPBENCH_GYM_DIR names, writing the driver
// under tmp. It returns (nil, nil) when the variable is unset, and an error
// when it is set but the checkout cannot be used.
func FromEnv(ctx context.Context, tmp string) (*Peer, error) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return nil, nil
	}
	p, err := Open(ctx, dir, os.Getenv(EnvPython), tmp)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", EnvDir, dir, err)
	}
	return p, nil
}

// Open checks dir holds Gym's token-capture package, writes the driver under
// tmp and asks it (one process) which record schema Gym reads.
func Open(ctx context.Context, dir, python, tmp string) (*Peer, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(abs, "nemo_gym", "token_id_capture", "consumer.py")); err != nil {
		return nil, fmt.Errorf("no nemo_gym/token_id_capture/consumer.py there (want a NeMo Gym checkout, the directory that contains nemo_gym/): %w", err)
	}
	if python == "" {
		python = "python3"
	}
	script := filepath.Join(tmp, "capbench_gym_driver.py")
	if err := os.WriteFile(script, driverPy, 0o600); err != nil {
		return nil, fmt.Errorf("write the Gym driver: %w", err)
	}
	p := &Peer{dir: abs, python: python, script: script}
	rep, err := p.Once(ctx, Request{Op: OpInfo})
	if err != nil {
		return nil, err
	}
	p.SchemaVersion = rep.Reply.SchemaVersion
	return p, nil
}

// Reads says whether Gym's reader takes records of schema version v, with a
// reason naming what to check out when it does not.
func (p *Peer) Reads(v int) error {
	if p.SchemaVersion < v {
		return fmt.Errorf("the Gym checkout at %s reads record schema up to %d, but capbench writes %d: "+
			"point %s at a Gym ref whose records.py has TOKEN_ENTRY_RECORD_SCHEMA_VERSION >= %d (docs/gym-peer.md)",
			p.dir, p.SchemaVersion, v, EnvDir, v)
	}
	return nil
}

// Dir is the checkout's absolute path.
func (p *Peer) Dir() string { return p.dir }

func (p *Peer) command(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, p.python, p.script)
	path := p.dir
	if prev := os.Getenv("PYTHONPATH"); prev != "" {
		path += string(os.PathListSeparator) + prev
	}
	// Gym's checkout first. Its bytecode is cached beside the driver, not
	// in the checkout, and reused by every later process, as an installed
	// Gym's would be.
	cmd.Env = append(os.Environ(), "PYTHONPATH="+path,
		"PYTHONPYCACHEPREFIX="+filepath.Join(filepath.Dir(p.script), "pycache"))
	cmd.Dir = filepath.Dir(p.script)
	return cmd
}

// Process is one whole-process run of the driver.
type Process struct {
	Reply Reply
	// Wall is start to exit, measured here; CPU is the child's user+system.
	Wall, CPU time.Duration
}

// Once runs one request in a fresh interpreter.
func (p *Peer) Once(ctx context.Context, req Request) (Process, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return Process{}, err
	}
	cmd := p.command(ctx)
	cmd.Stdin = bytes.NewReader(append(line, '\n'))
	var stdout bytes.Buffer
	stderr := &tail{max: 4096}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	start := time.Now()
	runErr := cmd.Run()
	wall := time.Since(start)
	if runErr != nil {
		return Process{}, fmt.Errorf("gym driver (%s %s): %w; stderr: %s", p.python, req.Op, runErr, stderr)
	}
	rep, err := ParseReply(bytes.TrimSpace(stdout.Bytes()), req.Op)
	if err != nil {
		return Process{}, fmt.Errorf("%w; stderr: %s", err, stderr)
	}
	st := cmd.ProcessState
	return Process{Reply: rep, Wall: wall, CPU: st.UserTime() + st.SystemTime()}, nil
}

// Session is one long-lived driver: requests are answered in a warm
// interpreter with Gym already imported.
type Session struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *tail
}

// Start starts a session; Close ends it.
func (p *Peer) Start(ctx context.Context) (*Session, error) {
	cmd := p.command(ctx)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s := &Session{cmd: cmd, in: in, out: bufio.NewReader(out), stderr: &tail{max: 4096}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the gym driver (%s): %w", p.python, err)
	}
	if _, err := s.Do(Request{Op: OpInfo}); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Do sends one request and waits for its reply.
func (s *Session) Do(req Request) (Reply, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return Reply{}, err
	}
	if _, err := s.in.Write(append(line, '\n')); err != nil {
		return Reply{}, fmt.Errorf("gym driver %s: %w; stderr: %s", req.Op, err, s.stderr)
	}
	got, err := s.out.ReadBytes('\n')
	if err != nil {
		return Reply{}, fmt.Errorf("gym driver %s: no reply: %w; stderr: %s", req.Op, err, s.stderr)
	}
	rep, err := ParseReply(bytes.TrimSpace(got), req.Op)
	if err != nil {
		return Reply{}, fmt.Errorf("%w; stderr: %s", err, s.stderr)
	}
	return rep, nil
}

// Close ends the session (the driver exits at end of input).
func (s *Session) Close() error {
	_ = s.in.Close()
	err := s.cmd.Wait()
	if err != nil {
		return fmt.Errorf("gym driver: %w; stderr: %s", err, s.stderr)
	}
	return nil
}

// tail keeps the last max bytes written (the driver's stderr, for errors).
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return "(empty)"
	}
	return s
}

// ForBenchmark is the peer the environment configures, checked to read
// record schema, with a session closed when tb's cleanup runs. Without a
// configured peer it logs NotConfigured and returns nils; an unusable one
// fails tb.
func ForBenchmark(tb testing.TB, schema int) (*Peer, *Session) {
	tb.Helper()
	ctx := context.Background()
	peer, err := FromEnv(ctx, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	if peer == nil {
		tb.Log(NotConfigured)
		return nil, nil
	}
	if err := peer.Reads(schema); err != nil {
		tb.Fatal(err)
	}
	s, err := peer.Start(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return peer, s
}
