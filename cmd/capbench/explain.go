package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the explain subcommand lands.
func newExplainCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "explain",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("explain is not built yet")
		},
	}
}
