package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/reports"
)

func newCompareCmd() *cobra.Command {
	var threshold float64
	cmd := &cobra.Command{
		Use:   "compare BASE.json NEW.json",
		Short: "Compare two bench results per metric with confidence intervals; non-zero exit on a regression",
		Long: `Compare two bench results of the same configuration. For every stage, path and
metric (TTFT, TPOT, ITL, E2EL, per-request output tok/s) the change is the ratio
of the medians of the per-request values with a 95% bootstrap interval from the
samples. A regression is worse than --threshold with its whole interval on the
worse side. Prints a Markdown table (for a CI comment); refuses results whose
configurations differ; exits non-zero when there is a regression.`,
		Example: `  capbench compare base/result.json new/result.json --threshold 0.1`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, err := readBenchResult(args[0])
			if err != nil {
				return err
			}
			next, err := readBenchResult(args[1])
			if err != nil {
				return err
			}
			c, err := bench.Compare(base, next, threshold)
			if err != nil {
				return err
			}
			if err := reports.CompareMarkdown(cmd.OutOrStdout(), base, next, c); err != nil {
				return err
			}
			if c.Regressions > 0 {
				return fmt.Errorf("%d regression(s) beyond noise (threshold %.0f%%)", c.Regressions, 100*threshold)
			}
			return nil
		},
	}
	cmd.Flags().Float64Var(&threshold, "threshold", 0.1, "smallest relative change that counts (0.1 = 10%)")
	return cmd
}
