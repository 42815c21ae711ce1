package figures

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Raw-output file names inside a run's folder.
const (
	commandFile = "command.txt"
	stdoutFile  = "stdout.txt"
	stderrFile  = "stderr.txt"
	outDir      = "out" // capbench bench --out
)

// Runner performs one run and leaves its raw outputs (stdout.txt,
// stderr.txt, out/ for capbench bench) in dir, which exists and is empty.
// Tests use a fake one; --from uses one that only reads.
type Runner interface {
	Run(ctx context.Context, run Run, dir string) error
}

// Exec runs the real commands.
type Exec struct {
	Root     string        // the checkout; go test runs here
	Go       string        // the go tool
	Capbench string        // the capbench binary
	Timeout  time.Duration // per run; 0: none
	Echo     io.Writer     // gets a copy of both streams as they come; nil: none
}

// Show is the command line Exec runs for run, with its raw outputs in dir
// (--dry-run, command.txt).
func (e Exec) Show(run Run, dir string) string {
	if run.Kind == CapbenchShards {
		return e.shardsShow(run, dir)
	}
	return shellJoin(e.argv(run, dir))
}

func (e Exec) argv(run Run, dir string) []string {
	switch run.Kind {
	case GoTest:
		return append([]string{e.Go}, run.Args...)
	case CapbenchBench:
		a := append([]string{e.Capbench}, run.Args...)
		return append(a, "--progress", "off", "--out", filepath.Join(dir, outDir))
	default:
		return append(append([]string{e.Capbench}, run.Args...), "--json")
	}
}

// Run implements Runner.
func (e Exec) Run(ctx context.Context, run Run, dir string) error {
	argv := e.argv(run, dir)
	if err := os.WriteFile(filepath.Join(dir, commandFile), []byte(e.Show(run, dir)+"\n"), 0o644); err != nil {
		return err
	}
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	cwd := e.Root
	if run.Kind != GoTest {
		// capbench runs write where they stand: give each a fresh folder.
		tmp, err := os.MkdirTemp("", "capbench-figures-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		cwd = tmp
	}
	if run.Kind == CapbenchShards {
		return e.runShards(ctx, run, dir, cwd)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = cwd
	if _, err := os.Stat(e.Capbench); err == nil && run.Kind == GoTest && os.Getenv("CAPBENCH_BIN") == "" {
		// Benchmarks that time a whole capbench process use this binary
		// rather than building their own.
		cmd.Env = append(os.Environ(), "CAPBENCH_BIN="+e.Capbench)
	}
	stdout, err := os.Create(filepath.Join(dir, stdoutFile))
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, stderrFile))
	if err != nil {
		return err
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = io.Writer(stdout), io.Writer(stderr)
	if e.Echo != nil {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(stdout, e.Echo), io.MultiWriter(stderr, e.Echo)
	}
	ownGroup(cmd, syscall.SIGKILL)
	runErr := cmd.Run()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		runErr = fmt.Errorf("%w (after %s)", ctx.Err(), e.Timeout)
	case ctx.Err() != nil:
		runErr = ctx.Err()
	}
	if runErr != nil {
		return fmt.Errorf("%s: %w%s", shellJoin(argv), runErr, tail(filepath.Join(dir, stderrFile), filepath.Join(dir, stdoutFile)))
	}
	return errors.Join(stdout.Close(), stderr.Close())
}

// ownGroup runs cmd in its own process group and, when ctx ends, sends sig
// to the whole group: go test runs the benchmark as a child of its own,
// which a signal to the go process alone would leave running.
func ownGroup(cmd *exec.Cmd, sig syscall.Signal) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, sig) }
	cmd.WaitDelay = 10 * time.Second
}

// tail is the last lines a failed run wrote, for the error message.
func tail(paths ...string) string {
	var lines []string
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		lines = append(lines, strings.Split(strings.TrimSpace(string(b)), "\n")...)
	}
	var keep []string
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			keep = append(keep, "    "+l)
		}
	}
	if len(keep) > 8 {
		keep = keep[len(keep)-8:]
	}
	if len(keep) == 0 {
		return ""
	}
	return "\n" + strings.Join(keep, "\n")
}

// Saved reads the raw outputs an earlier run left (--from): it runs
// nothing.
type Saved struct{ Dir string }

// Run implements Runner; dir is where Generate expects the outputs, which
// for Saved is the folder they are already in.
func (s Saved) Run(_ context.Context, run Run, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, stdoutFile)); err != nil {
		return fmt.Errorf("no saved output for run %s in %s: %w", run.ID, s.Dir, err)
	}
	return nil
}
