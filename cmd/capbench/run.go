package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/reports"
	"github.com/capbench/capbench/scenarios"
)

// errScenariosFailed makes the command exit non-zero without repeating the
// table's content.
var errScenariosFailed = errors.New("some scenarios disagree with their expectation")

func newRunCmd() *cobra.Command {
	var (
		scenarioNames []string
		backend       string
		opts          harness.Options
		list          bool
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the scenario catalog through the capture path and check every verdict",
		Long: "Runs scripted agents through the capture proxy in front of vLLM (by default an in-process\n" +
			"fake), finalizes each rollout with the consumer, checks token fidelity against the fake's\n" +
			"ledger and compares each verdict with the scenario's expectation. Writes rollouts.jsonl,\n" +
			"result.json and report.md to --out. Exits non-zero when any scenario disagrees.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list {
				for _, s := range scenarios.All() {
					fmt.Fprintf(cmd.OutOrStdout(), "%-36s %s\n", s.Name, s.Description)
				}
				return nil
			}
			b, err := env.ParseBackend(backend)
			if err != nil {
				return fmt.Errorf("--backend: %w", err)
			}
			opts.Backend = b
			if b == env.External && opts.VLLMURL == "" && opts.ProxyURL == "" {
				return errors.New("--backend external needs --vllm-url and/or --proxy-url")
			}
			if opts.ProxyURL != "" && opts.CaptureDir == "" {
				return errors.New("--proxy-url needs --capture-dir (the proxy's capture directory)")
			}
			if b == env.Container {
				env.ContainerDefaults()
			}
			// The process and container backends run this very binary when
			// it can (a container needs it static); else they go build one.
			if self, err := os.Executable(); err == nil && (b == env.Process || (b == env.Container && env.IsStatic(self))) {
				opts.Binary = self
			}
			scs, err := scenarios.Select(scenarioNames...)
			if err != nil {
				return fmt.Errorf("--scenario: %w", err)
			}
			out, err := filepath.Abs(opts.OutDir)
			if err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			opts.OutDir = out
			opts.OnScenario = func(s harness.ScenarioResult) {
				fmt.Fprintf(cmd.ErrOrStderr(), "%-5s %s\n", s.Status, s.Name)
			}
			res, runErr := harness.Run(cmd.Context(), scs, opts)
			if res == nil {
				return runErr
			}
			if err := harness.WriteJSON(filepath.Join(out, harness.ResultFileName), res); err != nil {
				return err
			}
			if err := writeMarkdown(filepath.Join(out, "report.md"), res); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			if err := reports.Table(cmd.OutOrStdout(), res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s and report.md in %s\n", harness.RolloutsFileName, harness.ResultFileName, out)
			if runErr != nil {
				return runErr
			}
			if !res.OK() {
				return errScenariosFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&scenarioNames, "scenario", []string{"all"}, "scenario name(s) to run, or all (see --list)")
	f.BoolVar(&list, "list", false, "list the catalog and exit")
	f.StringVar(&backend, "backend", string(env.InProcess), "environment: inprocess, process, container, vllm (real vLLM container, needs a GPU) or external")
	f.StringVar(&opts.VLLMURL, "vllm-url", "", "external: URL of a running vLLM (or fake); the proxy runs in-process unless --proxy-url is set")
	f.StringVar(&opts.ProxyURL, "proxy-url", "", "external: URL of a running capture proxy (e.g. NeMo Gym's model server)")
	f.StringVar(&opts.CaptureDir, "capture-dir", "", "the capture directory of --proxy-url (or where the in-process proxy writes)")
	f.StringVar(&opts.Image, "image", env.DefaultVLLMImage, "vllm backend: the vLLM image (must be present locally)")
	f.StringVar(&opts.OutDir, "out", "capbench-out", "directory for rollouts.jsonl, result.json and report.md")
	f.IntVar(&opts.Rollouts, "rollouts", 1, "rollouts per scenario")
	f.IntVar(&opts.Concurrency, "concurrency", 4, "parallel rollouts within a scenario")
	return cmd
}

func writeMarkdown(path string, r *harness.RunResult) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := reports.Markdown(f, r); err != nil {
		f.Close()
		return fmt.Errorf("report: %w", err)
	}
	return f.Close()
}
