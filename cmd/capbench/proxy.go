package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the proxy subcommand lands.
func newProxyCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "proxy",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("proxy is not built yet")
		},
	}
}
