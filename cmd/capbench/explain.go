package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/store"
)

func newExplainCmd() *cobra.Command {
	var captureDir, rolloutsPath, builderName, storeURL string
	var maskIncomplete bool
	cmd := &cobra.Command{
		Use:   "explain --capture-dir DIR ROLLOUT_ID",
		Short: "Show the chains, the attribution trail and why a rollout is or is not masked (read-only)",
		Long: `Build one captured rollout and explain the verdict in plain words.

This only reads: nothing is frozen, written or retired, so it is safe on a
directory a harness is still writing.

With --rollouts, the record with this rollout id supplies the verified
response, the explicit terminal call id and the declared response id, as in
delivery; without it, attribution has no response to work with. Give it the
records as the harness handed them over, before finalization (capbench run
keeps them in rollouts.input.jsonl next to rollouts.jsonl): a finalized
record's response.output is the rebuilt output, so it is reported as
finalized instead of being judged again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if captureDir == "" && storeURL == "" {
				return errors.New("--capture-dir (or --store) is required")
			}
			if err := consumer.ValidateBuilder(builderName); err != nil {
				return fmt.Errorf("--builder: %w", err)
			}
			rolloutID := args[0]
			if err := store.ValidateRolloutID(rolloutID); err != nil {
				return err
			}
			ro, err := openLooker(cmd.Context(), captureDir, storeURL)
			if err != nil {
				return err
			}
			defer ro.Close()
			in := consumer.Input{}
			if rolloutsPath != "" {
				rec, err := findRollout(rolloutsPath, rolloutID)
				if err != nil {
					return err
				}
				if consumer.IsFinalizedRecord(rec) {
					return explainFinalizedRecord(cmd, rolloutsPath, rolloutID, rec)
				}
				in = consumer.InputFromRollout(rec)
			}
			res, retired, err := consumer.Judge(cmd.Context(), ro, rolloutID, in,
				consumer.Options{Builder: builderName, MaskIncompleteWhenAttributed: maskIncomplete})
			if err != nil {
				return err
			}
			if retired {
				v := consumer.FinalizedVerdict(rolloutID, finalizedIn(captureDir, rolloutID))
				return fmt.Errorf("rollout %s: %s; its records were removed, so there is nothing left to explain", rolloutID, v.Reason)
			}
			return consumer.Explain(cmd.OutOrStdout(), res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&captureDir, "capture-dir", "", "capture (file store) directory; must exist")
	addStoreFlag(f, &storeURL)
	f.StringVar(&rolloutsPath, "rollouts", "", "rollout records (JSONL, before finalization) to take the verified response from")
	f.StringVar(&builderName, "builder", consumer.BuilderPrefixMerging, "builder: prefix_merging, or per_request (refused with Gym's message)")
	f.BoolVar(&maskIncomplete, "mask-incomplete-when-attributed", true, "mask incomplete snapshots even when the attributed chain was delivered")
	return cmd
}

// explainFinalizedRecord reports the verdict a finalized record carries
// instead of judging its rebuilt output as if the harness had returned it.
func explainFinalizedRecord(cmd *cobra.Command, path, id string, rec consumer.Rollout) error {
	masked := rec[consumer.KeyMaskSample] == true
	b, err := consumer.EncodeRollout(consumer.Rollout{"metrics": rec[consumer.KeyTokenCapture]})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(),
		"rollout %s: the record in %s was already finalized (its response.output is the rebuilt output), so it is not judged again.\n"+
			"Its verdict: mask_sample=%v, %s\n"+
			"To explain it, give --rollouts the records before finalization (capbench run keeps them in rollouts.input.jsonl).\n",
		id, path, masked, b)
	return err
}

func findRollout(path, id string) (consumer.Rollout, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--rollouts: %w", err)
	}
	defer f.Close()
	rec, err := consumer.FindRollout(f, id)
	if err != nil {
		return nil, fmt.Errorf("--rollouts: %w", err)
	}
	return rec, nil
}
