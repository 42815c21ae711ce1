package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/reports"
)

func newReportCmd() *cobra.Command {
	var htmlOut, mdOut, junitOut string
	cmd := &cobra.Command{
		Use:   "report RESULT.json",
		Short: "Render a bench result (console table, --html, --md, --junit)",
		Long: `Read a bench result written by 'capbench bench --out DIR' (the result.json, or
the directory holding it) with its samples, and render it again: a console table
on stdout, and the self-contained HTML, Markdown and JUnit files asked for.`,
		Example: `  capbench report /tmp/b1/result.json --html /tmp/b1/report.html --md /tmp/b1/report.md`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := readBenchResult(args[0])
			if err != nil {
				return err
			}
			failed, err := writeReports(res, htmlOut, mdOut, junitOut)
			if err != nil {
				return err
			}
			if err := reports.BenchTable(cmd.OutOrStdout(), res); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d bench gate(s) failed (see %s)", failed, junitOut)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&htmlOut, "html", "", "write the self-contained HTML report here")
	cmd.Flags().StringVar(&mdOut, "md", "", "write the Markdown report here")
	cmd.Flags().StringVar(&junitOut, "junit", "", "write the gates as JUnit XML here (exit non-zero when one fails)")
	return cmd
}

// readBenchResult accepts a result.json or the directory holding it.
func readBenchResult(path string) (*bench.Result, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "result.json")
	}
	res, err := bench.ReadResult(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such file (give the result.json that 'capbench bench --out DIR' wrote)", path)
	}
	return res, err
}
