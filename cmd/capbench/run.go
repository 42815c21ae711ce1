package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the run subcommand lands.
func newRunCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "run",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("run is not built yet")
		},
	}
}
