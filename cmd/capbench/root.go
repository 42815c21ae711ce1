package main

import "github.com/spf13/cobra"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "capbench",
		Short:         "Test harness and benchmarks for training-token capture",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
	}
	root.AddCommand(
		newFakeVLLMCmd(),
		newProxyCmd(),
		newVerdictCmd(),
		newExplainCmd(),
		newRunCmd(),
		newBenchCmd(),
		newChaosCmd(),
		newPlanCmd(),
		newDoctorCmd(),
		newWalkthroughCmd(),
		newReportCmd(),
		newCompareCmd(),
		newMergeCmd(),
	)
	return root
}
