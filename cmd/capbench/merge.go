package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/reports"
)

type mergeFlags struct {
	out, htmlOut, mdOut, junitOut string
	lateTolerance                 time.Duration
	jsonOut                       bool
}

func newMergeCmd() *cobra.Command {
	var f mergeFlags
	cmd := &cobra.Command{
		Use:   "merge RESULT... --out DIR",
		Short: "Combine the results of the shards of one sharded bench into the result one process would have written",
		Long: `Read the result of every shard of a sharded run ('capbench bench --shard I/N',
or a Kubernetes Indexed Job: docs/k8s.md), each a result.json or the directory
holding it, and write one result: the union of the samples on one clock (the
planned --start-at, else the earliest shard's start), phases re-tagged over
the union and every summary recomputed from it, with the shards listed under
"merge" (docs/bench-results.md). The merged result feeds capbench report and
capbench compare as any other.

Refused: a missing or duplicate shard index, shards of different totals,
schedules or --start-at. Kept but flagged (exit non-zero after writing):
a shard that started later than --late-tolerance after the planned start,
was interrupted, or had every request fail.`,
		Example: `  capbench merge /results/shard-*/result.json --out /results/merged --md /results/merged/report.md
  capbench compare single/result.json /results/merged/result.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runMerge(cmd, f, args) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "directory for the merged result.json and samples.jsonl (required)")
	fl.DurationVar(&f.lateTolerance, "late-tolerance", time.Second, "flag a shard that started later than this after the planned start")
	fl.StringVar(&f.htmlOut, "html", "", "write the self-contained HTML report of the merged result to this file")
	fl.StringVar(&f.mdOut, "md", "", "write the Markdown report of the merged result to this file")
	fl.StringVar(&f.junitOut, "junit", "", "write the merged result's gates as JUnit XML to this file")
	fl.BoolVar(&f.jsonOut, "json", false, "print the merged result JSON instead of the table")
	return cmd
}

func runMerge(cmd *cobra.Command, f mergeFlags, args []string) error {
	if f.out == "" {
		return errors.New("--out DIR is required: where the merged result.json and samples.jsonl go")
	}
	if f.lateTolerance < 0 {
		return fmt.Errorf("--late-tolerance must not be negative, got %s", f.lateTolerance)
	}
	rs := make([]*bench.Result, len(args))
	for i, a := range args {
		r, err := readBenchResult(a)
		if err != nil {
			return fmt.Errorf("merge: %w", err)
		}
		rs[i] = r
	}
	res, err := bench.MergeShards(rs, args, f.lateTolerance)
	if err != nil {
		return err
	}
	path, err := bench.WriteResult(f.out, res)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "merged %d shards, %d samples: %s (samples: %s)\n", len(rs), res.SampleCount, path, filepath.Join(f.out, bench.SamplesFileName))
	failed, rerr := writeReports(res, f.htmlOut, f.mdOut, f.junitOut)
	errs := []error{rerr}
	if f.jsonOut {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		errs = append(errs, enc.Encode(res))
	} else {
		errs = append(errs, reports.BenchTable(cmd.OutOrStdout(), res))
	}
	for _, p := range res.Merge.Problems {
		fmt.Fprintln(stderr, "warning:", p)
	}
	if n := len(res.Merge.Problems); n > 0 {
		errs = append(errs, fmt.Errorf("%d shard problem(s) (listed above and under merge.problems in %s)", n, path))
	}
	if failed > 0 {
		errs = append(errs, fmt.Errorf("%d bench gate(s) failed (see %s)", failed, f.junitOut))
	}
	return errors.Join(errs...)
}
