// Command capbench drives the capbench toolkit: a fake vLLM, the training-token
// capture proxy, the consumer's verdicts, scripted scenario runs and benchmarks.
// Each subcommand lives in its own file and only turns flags into options.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "capbench:", err)
		// A command may choose its status (doctor: 1 findings, 2 bad input).
		var coded interface{ ExitCode() int }
		if errors.As(err, &coded) {
			os.Exit(coded.ExitCode())
		}
		os.Exit(1)
	}
}
