package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/capture/consumer"
)

func newVerdictCmd() *cobra.Command {
	var (
		captureDir, rolloutsPath, outPath, builderName string
		storeURL                                       string
		maskIncomplete                                 bool
		maxMaskFraction                                float64
		minSamples                                     int
	)
	cmd := &cobra.Command{
		Use:   "verdict --capture-dir DIR [--rollouts IN.jsonl --out OUT.jsonl]",
		Short: "Decide mask_sample and the capture metrics for captured rollouts, as NeMo Gym's consumer does",
		Long: `With --rollouts and --out, finalize every rollout record as Gym's collector does:
replace response.output with the rebuilt token-bearing output, attach
_ng_token_capture and mask_sample, append the record to OUT (fsynced), and only
then retire the consumed snapshot. Masked and failed builds keep their evidence.

Without --rollouts, print one JSON object per rollout in the capture directory,
in rollout-id order (rollout_id, mask_sample, metrics, error, output), without a
verified response and without retiring anything.

Either way each rollout is frozen first: freezing marks it frozen in the
capture directory (later writes to it are refused), exactly as Gym's consumer
does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if captureDir == "" && storeURL == "" {
				return errors.New("--capture-dir (or --store) is required")
			}
			if (rolloutsPath == "") != (outPath == "") {
				return errors.New("--rollouts and --out go together")
			}
			if minSamples < 0 {
				return errors.New("--mask-fraction-min-samples must not be negative")
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
			opts := consumer.Options{Builder: builderName, MaskIncompleteWhenAttributed: maskIncomplete}
			fs, err := openStore(cmd.Context(), captureDir, storeURL)
			if err != nil {
				return err
			}
			defer fs.Close()
			if rolloutsPath == "" {
				return consumer.VerdictDir(cmd.Context(), fs, opts, cmd.OutOrStdout())
			}
			in, err := os.Open(rolloutsPath)
			if err != nil {
				return fmt.Errorf("--rollouts: %w", err)
			}
			defer in.Close()
			w, err := consumer.CreateWriter(outPath)
			if err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			kill := &consumer.KillSwitch{MinSamples: minSamples, MaxMaskFraction: maxFraction}
			sum, runErr := consumer.FinalizeRollouts(cmd.Context(), in, w, fs, opts, kill)
			if err := w.Close(); err != nil && runErr == nil {
				runErr = err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "records %d, finalized %d, masked %d, retired %d\n",
				sum.Records, sum.Finalized, sum.Masked, sum.Retired)
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&captureDir, "capture-dir", "", "capture (file store) directory")
	addStoreFlag(f, &storeURL)
	f.StringVar(&rolloutsPath, "rollouts", "", "finished rollout records to finalize (JSONL)")
	f.StringVar(&outPath, "out", "", "where to write the finalized records (JSONL, created or truncated)")
	f.StringVar(&builderName, "builder", consumer.BuilderPrefixMerging, "builder (only prefix_merging builds; others give masked failed builds)")
	f.BoolVar(&maskIncomplete, "mask-incomplete-when-attributed", true, "mask incomplete snapshots even when the attributed chain was delivered")
	f.Float64Var(&maxMaskFraction, "max-mask-fraction", 0, "abort when more than this fraction of finalized rollouts is masked (unset: never)")
	f.IntVar(&minSamples, "mask-fraction-min-samples", consumer.DefaultMaskFractionMinSamples, "finalized rollouts needed before --max-mask-fraction applies")
	return cmd
}
