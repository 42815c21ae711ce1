package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/reports"
	"github.com/capbench/capbench/walkthrough"
)

var errWalkthroughFailed = errors.New("walkthrough failed")

// newWalkthroughCmd is `capbench walkthrough [--page PAGE]`.
func newWalkthroughCmd() *cobra.Command {
	var (
		o         walkthrough.Options
		outDir    string
		asJSON    bool
		printPage bool
	)
	cmd := &cobra.Command{
		Use:   "walkthrough [--page PAGE.md|PAGE.mdx] [--gpu 48GiB|NAME]",
		Short: "Run a docs walkthrough end to end and check each documented mistake shows its symptom",
		Long: `Runs the page's steps on the embedded default (fake vLLM with the page's own
vllm serve flags on the page's GPU, the capture proxy with the overlay's
settings, a Claude-Code-like agent, the collector honouring whether the
overlay reached gym eval run), evaluates the page's jq check with gojq against
its documented outcome, then applies each documented mistake in turn.
Writes report.md, junit.xml, result.json and the page run's rollouts.jsonl
to --out. Exit status 1 when a
step fails or a mistake's symptom does not show. Without --page it runs the
built-in walkthrough (--print-page shows it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printPage {
				return walkthrough.BuiltinPage(cmd.OutOrStdout())
			}
			if o.CaptureDir != "" && o.ProxyURL == "" {
				return errors.New("--capture-dir goes with --proxy-url (the directory that proxy writes)")
			}
			res, err := walkthrough.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if err := writeWalkthrough(outDir, res); err != nil {
				return err
			}
			if asJSON {
				err = reports.WalkthroughJSON(cmd.OutOrStdout(), res)
			} else {
				err = reports.WalkthroughText(cmd.OutOrStdout(), res)
				fmt.Fprintf(cmd.OutOrStdout(), "wrote report.md, junit.xml, result.json and rollouts.jsonl in %s\n", outDir)
			}
			if err != nil {
				return err
			}
			if !res.OK() {
				var parts []string
				if b := res.BrokenSteps(); len(b) > 0 {
					parts = append(parts, "broken steps: "+strings.Join(b, "; "))
				}
				if u := res.UndetectedMistakes(); len(u) > 0 {
					parts = append(parts, "mistakes without their symptom: "+strings.Join(u, "; "))
				}
				return fmt.Errorf("%w: %s", errWalkthroughFailed, strings.Join(parts, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Page, "page", "", "the docs page (Markdown or MDX); default: the built-in walkthrough")
	f.StringVar(&o.GPU, "gpu", "", "GPU memory or name (default: what the page's prose says)")
	f.StringVar(&o.VLLMURL, "vllm-url", "", "run against a running vLLM instead of the fake (mistakes that restart it are skipped)")
	f.StringVar(&o.ProxyURL, "proxy-url", "", "run against a running capture proxy (e.g. NeMo Gym's model server)")
	f.StringVar(&o.CaptureDir, "capture-dir", "", "the capture directory --proxy-url writes")
	f.IntVar(&o.Rollouts, "rollouts", 2, "rollouts per run")
	f.StringVar(&outDir, "out", "capbench-walkthrough", "directory for report.md, junit.xml and result.json")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&printPage, "print-page", false, "print the built-in walkthrough page and exit")
	return cmd
}

func writeWalkthrough(dir string, r *walkthrough.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	for name, render := range map[string]func(io.Writer, *walkthrough.Result) error{
		"report.md": reports.WalkthroughMarkdown, "junit.xml": reports.WalkthroughJUnit,
		"result.json": reports.WalkthroughJSON, "rollouts.jsonl": reports.WalkthroughRollouts,
	} {
		if err := writeFile(filepath.Join(dir, name), r, render); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, r *walkthrough.Result, render func(io.Writer, *walkthrough.Result) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := render(f, r); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
