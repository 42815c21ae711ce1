package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the verdict subcommand lands.
func newVerdictCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "verdict",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("verdict is not built yet")
		},
	}
}
