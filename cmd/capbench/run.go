package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
		list, verbose bool
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
			if list || verbose {
				if !list {
					return errors.New("-v goes with --list")
				}
				return reports.CatalogList(cmd.OutOrStdout(), scenarios.All(), verbose)
			}
			b, err := env.ParseBackend(backend)
			if err != nil {
				return fmt.Errorf("--backend: %w", err)
			}
			opts.Backend = b
			if err := checkRunFlags(cmd, b, opts); err != nil {
				return err
			}
			if err := checkScenarioNames(scenarioNames); err != nil {
				return err
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
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s, %s and report.md in %s\n",
				harness.RolloutsFileName, harness.InputsFileName, harness.ResultFileName, out)
			switch {
			case errors.Is(runErr, context.Canceled), errors.Is(runErr, context.DeadlineExceeded):
				return fmt.Errorf("interrupted after %d of %d scenarios", len(res.Scenarios), len(scs))
			case runErr != nil:
				return runErr
			case !res.OK():
				return errScenariosFailed
			case res.Passed == 0:
				return fmt.Errorf("nothing ran: all %d selected scenarios were skipped (reasons above)", res.Skipped)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&scenarioNames, "scenario", []string{"all"}, "scenario name(s) to run, or all (see --list)")
	f.BoolVar(&list, "list", false, "list the catalog (one short line per scenario) and exit")
	f.BoolVarP(&verbose, "verbose", "v", false, "with --list: the full descriptions")
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

// checkRunFlags rejects, before anything starts, values no run can use and
// flags the chosen backend would silently ignore.
func checkRunFlags(cmd *cobra.Command, b env.Backend, opts harness.Options) error {
	if opts.Rollouts < 1 {
		return fmt.Errorf("--rollouts %d: want at least 1 rollout per scenario", opts.Rollouts)
	}
	if opts.Concurrency < 1 {
		return fmt.Errorf("--concurrency %d: want at least 1", opts.Concurrency)
	}
	only := map[string][]env.Backend{
		"vllm-url":    {env.External},
		"proxy-url":   {env.External},
		"capture-dir": {env.External, env.InProcess, env.Process, env.Container, env.RealVLLM},
		"image":       {env.RealVLLM},
	}
	for _, name := range []string{"vllm-url", "proxy-url", "capture-dir", "image"} {
		if cmd.Flags().Changed(name) && !slices.Contains(only[name], b) {
			return fmt.Errorf("--%s does not apply to --backend %s (only to %s)", name, b, backendList(only[name]))
		}
	}
	for flag, u := range map[string]string{"--vllm-url": opts.VLLMURL, "--proxy-url": opts.ProxyURL} {
		if u != "" {
			if err := harness.ValidateURL(flag, u); err != nil {
				return err
			}
		}
	}
	if b == env.External && opts.VLLMURL == "" {
		return errors.New("--backend external needs --vllm-url: the scenarios are scripted, and their scripts are installed on the capbench fake-vllm at that URL (add --proxy-url to test someone else's proxy in front of it)")
	}
	if opts.ProxyURL != "" && opts.CaptureDir == "" {
		return errors.New("--proxy-url needs --capture-dir (the proxy's capture directory)")
	}
	return nil
}

func backendList(bs []env.Backend) string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = string(b)
	}
	return strings.Join(names, ", ")
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
