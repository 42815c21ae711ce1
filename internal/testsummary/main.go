// Command testsummary runs `go test -json` with Ginkgo's verbose output,
// prints what a plain `go test` prints (one line per package, and the whole
// output of a package that failed), and ends with a summary of every
// skipped spec and test with its reason, so a green run that skipped a
// suite says so. `make test` runs it:
//
//	go run ./internal/testsummary -count=1 -timeout 20m ./...
//
// Its arguments are go test's; its exit status is go test's.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	goTool := os.Getenv("GO")
	if goTool == "" {
		goTool = "go"
	}
	cmdArgs := append([]string{"test", "-json"}, args...)
	cmdArgs = append(cmdArgs, "-args", "-ginkgo.v", "-ginkgo.no-color")
	cmd := exec.CommandContext(ctx, goTool, cmdArgs...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testsummary:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testsummary:", err)
		return 2
	}
	s := newSummary(stdout)
	readErr := s.read(out)
	waitErr := cmd.Wait()
	s.report(stdout)
	if readErr != nil {
		fmt.Fprintln(stderr, "testsummary: reading go test's output:", readErr)
		return 2
	}
	if ee, ok := waitErr.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if waitErr != nil {
		fmt.Fprintln(stderr, "testsummary:", waitErr)
		return 2
	}
	if s.failed {
		return 1
	}
	return 0
}
