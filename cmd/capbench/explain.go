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
		Short: "Show the chains, the attribution trail and why a rollout is or is not masked",
		Long: `Build one captured rollout and explain the verdict in plain words.

With --rollouts, the record with this rollout id supplies the verified
response, the explicit terminal call id and the declared response id, as in
delivery; without it, attribution has no response to work with. The rollout is
frozen first (as Gym's consumer does); nothing is retired or rewritten.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if captureDir == "" && storeURL == "" {
				return errors.New("--capture-dir (or --store) is required")
			}
			rolloutID := args[0]
			if err := store.ValidateRolloutID(rolloutID); err != nil {
				return err
			}
			in := consumer.Input{}
			if rolloutsPath != "" {
				rec, err := findRollout(rolloutsPath, rolloutID)
				if err != nil {
					return err
				}
				in = consumer.InputFromRollout(rec)
			}
			fs, err := openStore(cmd.Context(), captureDir, storeURL)
			if err != nil {
				return err
			}
			defer fs.Close()
			res, err := consumer.Consume(cmd.Context(), fs, rolloutID, in,
				consumer.Options{Builder: builderName, MaskIncompleteWhenAttributed: maskIncomplete})
			if err != nil {
				return err
			}
			return consumer.Explain(cmd.OutOrStdout(), res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&captureDir, "capture-dir", "", "capture (file store) directory")
	addStoreFlag(f, &storeURL)
	f.StringVar(&rolloutsPath, "rollouts", "", "rollout records (JSONL) to take the verified response from")
	f.StringVar(&builderName, "builder", consumer.BuilderPrefixMerging, "builder")
	f.BoolVar(&maskIncomplete, "mask-incomplete-when-attributed", true, "mask incomplete snapshots even when the attributed chain was delivered")
	return cmd
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
