package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the fake-vllm subcommand lands.
func newFakeVLLMCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "fake-vllm",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("fake-vllm is not built yet")
		},
	}
}
