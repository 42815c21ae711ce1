// Command capbench drives the capbench toolkit: a fake vLLM, the training-token
// capture proxy, the consumer's verdicts, scripted scenario runs and benchmarks.
// Each subcommand lives in its own file and only turns flags into options.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		stop()
		os.Exit(reportError(os.Stderr, err))
	}
}

// reportError prints a command's error (unless the command has already
// printed it in its report) and returns the exit status: the one the error
// carries (doctor: 1 findings, 2 bad input), else 1.
func reportError(w io.Writer, err error) int {
	var reported interface{ Reported() bool }
	if !errors.As(err, &reported) || !reported.Reported() {
		fmt.Fprintln(w, "capbench:", err)
	}
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return 1
}

// reportedError is a failure whose message the command's own output already
// shows (plan's refusal table): main exits with its status, printing nothing.
type reportedError struct{ exitError }

func (reportedError) Reported() bool { return true }
