package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/reports"
)

func newVerdictCmd() *cobra.Command {
	var (
		captureDir, rolloutsPath, outPath, builderName string
		storeURL                                       string
		maskIncomplete, asJSON, withResponse           bool
		maxMaskFraction                                float64
		minSamples                                     int
	)
	cmd := &cobra.Command{
		Use:   "verdict --capture-dir DIR [ROLLOUT_ID...] | verdict --capture-dir DIR --rollouts IN.jsonl --out OUT.jsonl",
		Short: "Judge captured rollouts (read-only), or finalize rollout records as NeMo Gym's collector does",
		Long: `Without --rollouts, judge every rollout in the capture directory (or the ones
named) and print one row per rollout: id, mask, calls, chains, attribution and
the reason. This only reads: nothing is frozen, written or retired, so it is
safe on a directory a harness is still writing. --json prints one JSON object
per rollout (metrics, no response); --response adds the rebuilt response.

With --rollouts and --out, finalize (consume) every rollout record as Gym's
collector does: freeze the rollout, replace response.output with the rebuilt
token-bearing output, attach _ng_token_capture and mask_sample, append the
record to OUT (fsynced), and only then retire the consumed snapshot. Masked
and failed builds keep their evidence. The whole input is checked before
anything is changed. An existing OUT is never truncated: a rerun after a crash
continues after the records OUT already holds, so every record is written
once. The formats are described in docs/consumer.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if captureDir == "" && storeURL == "" {
				return errors.New("--capture-dir (or --store) is required")
			}
			if (rolloutsPath == "") != (outPath == "") {
				return errors.New("--rollouts and --out go together")
			}
			if err := consumer.ValidateBuilder(builderName); err != nil {
				return fmt.Errorf("--builder: %w", err)
			}
			if minSamples < 0 {
				return errors.New("--mask-fraction-min-samples must not be negative")
			}
			opts := consumer.Options{Builder: builderName, MaskIncompleteWhenAttributed: maskIncomplete}
			if rolloutsPath == "" {
				for _, name := range []string{"max-mask-fraction", "mask-fraction-min-samples"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s applies only when finalizing (--rollouts and --out)", name)
					}
				}
				return judgeDir(cmd, captureDir, storeURL, args, opts, asJSON || withResponse, withResponse)
			}
			if len(args) > 0 {
				return errors.New("rollout ids and --rollouts do not go together: --rollouts finalizes every record of its file")
			}
			if asJSON || withResponse {
				return errors.New("--json and --response apply only without --rollouts (the finalized records go to --out)")
			}
			// Checked before anything is opened: a percentage typed as 5 would
			// otherwise never trip, and a negative one would trip on the first mask.
			var maxFraction *float64
			if cmd.Flags().Changed("max-mask-fraction") {
				if !(maxMaskFraction >= 0 && maxMaskFraction <= 1) {
					return fmt.Errorf("--max-mask-fraction %v: want a fraction in [0, 1] (0.05 for 5%%)", maxMaskFraction)
				}
				maxFraction = &maxMaskFraction
			}
			kill := &consumer.KillSwitch{MinSamples: minSamples, MaxMaskFraction: maxFraction}
			return finalize(cmd, captureDir, storeURL, rolloutsPath, outPath, opts, kill)
		},
	}
	f := cmd.Flags()
	f.StringVar(&captureDir, "capture-dir", "", "capture (file store) directory; must exist")
	addStoreFlag(f, &storeURL)
	f.StringVar(&rolloutsPath, "rollouts", "", "finished rollout records to finalize (JSONL); freezes and retires what it consumes")
	f.StringVar(&outPath, "out", "", "where to append the finalized records (JSONL; an existing file is continued, never truncated)")
	f.StringVar(&builderName, "builder", consumer.BuilderPrefixMerging, "builder: prefix_merging, or per_request (refused with Gym's message)")
	f.BoolVar(&maskIncomplete, "mask-incomplete-when-attributed", true, "mask incomplete snapshots even when the attributed chain was delivered")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per rollout (verdict and metrics) instead of the table")
	f.BoolVar(&withResponse, "response", false, "with the JSON, include the full rebuilt response (large)")
	f.Float64Var(&maxMaskFraction, "max-mask-fraction", 0, "abort when more than this fraction of finalized rollouts is masked (unset: never)")
	f.IntVar(&minSamples, "mask-fraction-min-samples", consumer.DefaultMaskFractionMinSamples, "finalized rollouts needed before --max-mask-fraction applies")
	return cmd
}

// judgeDir judges rollouts read-only and prints them.
func judgeDir(cmd *cobra.Command, dir, storeURL string, ids []string, opts consumer.Options, asJSON, withResponse bool) error {
	ro, err := openLooker(cmd.Context(), dir, storeURL)
	if err != nil {
		return err
	}
	defer ro.Close()
	vs, err := consumer.JudgeDir(cmd.Context(), ro, ids, opts, withResponse, func(id string) string { return finalizedIn(dir, id) })
	if errors.Is(err, consumer.ErrNoRollouts) {
		return fmt.Errorf("%s %w", storeName(dir, storeURL), err)
	}
	if err != nil {
		return err
	}
	if asJSON {
		return reports.VerdictJSON(cmd.OutOrStdout(), vs)
	}
	return reports.VerdictTable(cmd.OutOrStdout(), vs)
}

// finalizedIn looks for the finalized record of a retired rollout where
// capbench run puts it: rollouts.jsonl beside the capture directory.
func finalizedIn(captureDir, id string) string {
	if captureDir == "" {
		return ""
	}
	path := filepath.Join(filepath.Dir(filepath.Clean(captureDir)), "rollouts.jsonl")
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := consumer.FindRollout(f, id); err != nil {
		return ""
	}
	return path
}

func finalize(cmd *cobra.Command, dir, storeURL, inPath, outPath string, opts consumer.Options, kill *consumer.KillSwitch) error {
	if same, _ := samePath(inPath, outPath); same {
		return errors.New("--out must not be the --rollouts file: the finalized records are appended to --out")
	}
	// A mistyped directory would otherwise be created empty and every
	// record masked as having no capture.
	if fi, err := os.Stat(dir); storeURL == "" && (err != nil || !fi.IsDir()) {
		if err == nil {
			err = errors.New("not a directory")
		}
		return fmt.Errorf("--capture-dir %s: %w", dir, err)
	}
	in, err := os.Open(inPath)
	if err != nil {
		return fmt.Errorf("--rollouts: %w", err)
	}
	recs, err := consumer.ReadRollouts(in)
	in.Close()
	if err != nil {
		return fmt.Errorf("--rollouts %s: %w (nothing was finalized)", inPath, err)
	}
	fs, err := openStore(cmd.Context(), dir, storeURL)
	if err != nil {
		return err
	}
	defer fs.Close()
	w, done, err := consumer.OpenWriter(outPath)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	sum, runErr := consumer.FinalizeRecords(cmd.Context(), recs, done, w, fs, opts, kill)
	if err := w.Close(); err != nil && runErr == nil {
		runErr = err
	}
	if errors.Is(runErr, consumer.ErrOutputMismatch) {
		runErr = fmt.Errorf("--out %s: %w; give a new --out, or the --rollouts it was written from", outPath, runErr)
	}
	if err := reports.FinalizeSummary(cmd.ErrOrStderr(), sum, outPath); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

func samePath(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}
