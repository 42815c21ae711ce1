// Command capbench drives the capbench toolkit: a fake vLLM, the training-token
// capture proxy, the consumer's verdicts, scripted scenario runs and benchmarks.
// Each subcommand lives in its own file and only turns flags into options.
package main

import (
	"context"
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
		os.Exit(1)
	}
}
