package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/harness/chaos"
	"github.com/capbench/capbench/reports"
)

// newChaosCmd is `capbench chaos`: the chaos scenarios of harness/chaos,
// run for as long as asked, printed as one table (docs/chaos.md).
func newChaosCmd() *cobra.Command {
	var (
		cfg       chaos.Config
		only      []string
		jsonOut   bool
		showProxy bool
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Kill, flood and starve capbench proxy processes under load; count what survives",
		Long: `Run the chaos scenarios against real capbench proxy processes in front of an
in-process fake vLLM: kill -9 under load, two proxies on one directory, a capture
disk that fills (a tmpfs; needs root), every upstream fault, a flood of idle
connections, and a memory and descriptor watch. Afterwards every rollout is frozen
and each acknowledged call is looked up: stored once with the engine's tokens,
masked, or lost. Exits non-zero when a call was lost or a record is corrupt.`,
		Example: `  capbench chaos                                   # the bounded form CI runs
  capbench chaos --duration 2m --kills 30 --calls 50000 --concurrency 32
  capbench chaos --scenario kill-9,watch --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--binary: cannot find this executable: %w", err)
				}
				cfg.Binary = exe
			}
			if showProxy {
				cfg.Log = cmd.ErrOrStderr()
			}
			todo, err := pickScenarios(only)
			if err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			res := chaos.Result{Version: chaos.ResultVersion}
			for _, s := range todo {
				fmt.Fprintf(cmd.ErrOrStderr(), "chaos: %s …\n", s.Name)
				row, err := s.Run(cmd.Context(), cfg)
				if err != nil {
					return fmt.Errorf("scenario %s: %w", s.Name, err)
				}
				res.Rows = append(res.Rows, row)
			}
			if jsonOut {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else if err := reports.Chaos(cmd.OutOrStdout(), res); err != nil {
				return err
			}
			return verdict(res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Binary, "binary", "", "capbench executable the proxies run (default: this one)")
	f.StringVar(&cfg.Dir, "dir", "", "where capture directories go (default: the temp dir)")
	f.IntVar(&cfg.Concurrency, "concurrency", 8, "concurrent callers")
	f.DurationVar(&cfg.Duration, "duration", 3*time.Second, "load time of each timed scenario")
	f.IntVar(&cfg.Kills, "kills", 3, "kill -9 count of the kill-9 scenario")
	f.IntVar(&cfg.WatchCalls, "calls", 1500, "calls of the memory and descriptor watch")
	f.IntVar(&cfg.FloodConns, "flood-conns", 1100, "idle connections of the slow-client flood")
	f.Int64Var(&cfg.BodyBytes, "body-bytes", 4<<20, "size of each body of the big-bodies scenario")
	f.Int64Var(&cfg.TmpfsBytes, "tmpfs-bytes", 2<<20, "size of the tmpfs the full-disk scenario fills")
	f.BoolVar(&cfg.RequireTmpfs, "require-tmpfs", os.Getenv("CI") == "true", "fail, rather than skip, when no tmpfs can be mounted (default true when CI=true)")
	f.StringSliceVar(&only, "scenario", nil, "run only these scenarios (comma-separated): "+strings.Join(scenarioNames(), ", "))
	f.BoolVar(&jsonOut, "json", false, "print the result as JSON instead of the table")
	f.BoolVar(&showProxy, "proxy-logs", false, "copy the proxies' output to stderr")
	return cmd
}

func scenarioNames() []string {
	var names []string
	for _, s := range chaos.Scenarios() {
		names = append(names, s.Name)
	}
	return names
}

func pickScenarios(only []string) ([]chaos.Scenario, error) {
	all := chaos.Scenarios()
	if len(only) == 0 {
		return all, nil
	}
	var out []chaos.Scenario
	for _, name := range only {
		i := slices.IndexFunc(all, func(s chaos.Scenario) bool { return s.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("--scenario %q: unknown; want one of %s", name, strings.Join(scenarioNames(), ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// verdict fails the command when a call was lost or a record is corrupt, or
// when no scenario ran at all.
func verdict(res chaos.Result) error {
	ran := 0
	var bad []string
	for _, r := range res.Rows {
		if r.Skipped != "" {
			continue
		}
		ran++
		if r.Lost > 0 || r.Corrupt > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d lost, %d corrupt", r.Scenario, r.Lost, r.Corrupt))
		}
	}
	if ran == 0 {
		return errors.New("chaos: every scenario was skipped; nothing was tested")
	}
	if len(bad) > 0 {
		return errors.New("chaos: " + strings.Join(bad, "; "))
	}
	return nil
}
