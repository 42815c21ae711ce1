package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/doctor/page"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/reports"
)

// errFindings is returned when a doctor check found errors (exit status 1);
// a check that could not run returns its own error (exit status 2).
var errFindings = errors.New("doctor found errors")

// newDoctorCmd is `capbench doctor rollouts|config|page|server`.
func newDoctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor rollouts|config|page|server",
		Short: "Explain what went wrong in a first capture run (rows, overlay, serve flags, docs page, running stack)",
		Long: `Each subcommand prints its findings with the likely cause and the fix.
Exit status: 0 when nothing is an error (warnings and notes allowed),
1 when a check found errors, 2 when the check could not run (bad input).
--json prints the versioned report instead.`,
	}
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	// Bad flags and arguments are "could not check" (2), not findings (1).
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	out := func(c *cobra.Command, rep *doctor.Report) error {
		var err error
		if asJSON {
			err = reports.DoctorJSON(c.OutOrStdout(), rep)
		} else {
			err = reports.DoctorText(c.OutOrStdout(), rep)
		}
		if err != nil {
			return err
		}
		if !rep.OK() {
			return exitError{code: 1, err: fmt.Errorf("%w: %s", errFindings, joinRules(rep))}
		}
		return nil
	}
	cmd.AddCommand(doctorRolloutsCmd(out), doctorConfigCmd(out), doctorPageCmd(out), doctorServerCmd(out))
	return cmd
}

func joinRules(r *doctor.Report) string {
	s := ""
	for i, rule := range r.Rules(doctor.Error) {
		if i > 0 {
			s += ", "
		}
		s += rule
	}
	return s
}

type emit func(*cobra.Command, *doctor.Report) error

func doctorRolloutsCmd(out emit) *cobra.Command {
	var o doctor.RolloutOptions
	cmd := &cobra.Command{
		Use:   "rollouts ROLLOUTS.jsonl [--capture-dir DIR] [--expect-tools]",
		Short: "Check every result row the way the walkthrough's first-run check does",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := doctor.CheckRolloutsFile(args[0], o)
			if err != nil {
				return usageErr(err)
			}
			return out(cmd, rep)
		},
	}
	cmd.Flags().StringVar(&o.CaptureDir, "capture-dir", "", "the capture directory behind the rows (read only): tells text-only rows from uncaptured ones")
	cmd.Flags().BoolVar(&o.ExpectTools, "expect-tools", false, "the tasks use tools: one call per rollout is an error")
	return cmd
}

func doctorConfigCmd(out emit) *cobra.Command {
	c := doctor.ConfigCheck{}
	cmd := &cobra.Command{
		Use:   "config [OVERLAY.yaml] [--vllm-args \"...\"] [--gpu 48GiB|NAME]",
		Short: "Check a capture overlay as Gym's startup validation would, and vLLM serve flags on a GPU",
		Args:  usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				c.Path = args[0]
			}
			rep, err := doctor.CheckConfig(c)
			if err != nil {
				return usageErr(err)
			}
			return out(cmd, rep)
		},
	}
	cmd.Flags().StringVar(&c.VLLMArgs, "vllm-args", "", "the `vllm serve` command line (or just its arguments)")
	cmd.Flags().StringVar(&c.GPU, "gpu", "", "GPU memory (48GiB) or name (L40S, H100, ...) for the memory checks")
	cmd.Flags().StringVar(&c.Model, "model", vllm.DefaultModel, "the model when --vllm-args names none")
	return cmd
}

func doctorPageCmd(out emit) *cobra.Command {
	var gpuFlag string
	cmd := &cobra.Command{
		Use:   "page PAGE.md|PAGE.mdx [--gpu 48GiB|NAME]",
		Short: "Check a docs page's vllm serve, overlays, gym commands and jq checks, with line numbers",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := page.Read(args[0])
			if err != nil {
				return usageErr(err)
			}
			rep, _, err := doctor.CheckPage(p, gpuFlag)
			if err != nil {
				return usageErr(err)
			}
			return out(cmd, rep)
		},
	}
	cmd.Flags().StringVar(&gpuFlag, "gpu", "", "the GPU the page is for (default: what its prose says, e.g. \"48 GB GPU\")")
	return cmd
}

func doctorServerCmd(out emit) *cobra.Command {
	var o doctor.ServerOptions
	cmd := &cobra.Command{
		Use:   "server URL [--proxy-url URL] [--capture-dir DIR]",
		Short: "Probe a running stack: model served, auto tool choice, token ids, 32k context, capture",
		Long: `Sends a few small requests to vLLM at URL and, with --proxy-url, one call under
/ng-rollout/capbench-doctor-<random>/training-token-capture, whose record is
looked for in --capture-dir (and left there).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.URL = args[0]
			return out(cmd, doctor.CheckServer(cmd.Context(), o))
		},
	}
	cmd.Flags().StringVar(&o.ProxyURL, "proxy-url", "", "the capture proxy (or Gym's model server) in front of vLLM")
	cmd.Flags().StringVar(&o.CaptureDir, "capture-dir", "", "the directory --proxy-url writes records to")
	cmd.Flags().StringVar(&o.Model, "model", "", "the model to call (default: the first served)")
	return cmd
}

// exitError carries an exit status to main.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }
func (e exitError) ExitCode() int { return e.code }

func usageErr(err error) error { return exitError{code: 2, err: err} }

func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageErr(err)
		}
		return nil
	}
}
