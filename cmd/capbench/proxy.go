package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
)

// newProxyCmd is `capbench proxy --upstream URL --capture-dir DIR`: the
// training-token capture proxy in front of a vLLM server.
func newProxyCmd() *cobra.Command {
	var (
		o          proxy.Options
		captureDir string
		overrides  []string
		logLevel   string
		logFormat  string
	)
	cmd := &cobra.Command{
		Use:   "proxy --upstream URL [--capture-dir DIR]",
		Short: "Run the training-token capture proxy in front of vLLM",
		Long: `Run the capture proxy. Harnesses send their model calls to
  <proxy>/ng-rollout/<rollout id>/training-token-capture/v1/...  (recorded)
  <proxy>/ng-rollout/<rollout id>/v1/...                         (summary log only)
  <proxy>/v1/...                                                 (forwarded)
Chat Completions, Completions, Responses and Anthropic Messages are served;
records go to --capture-dir in NeMo Gym's file-store format. Without
--capture-dir nothing is recorded. Metrics are at <proxy>/metrics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Upstream == "" {
				return errors.New("--upstream is required")
			}
			logger, err := proxyLogger(cmd, logLevel, logFormat)
			if err != nil {
				return err
			}
			o.Logger = logger
			if o.RolloutSecret == "" {
				o.RolloutSecret = os.Getenv(rolloutSecretEnv)
			}
			if o.SamplingOverrides, err = parseSamplingOverrides(overrides); err != nil {
				return err
			}
			if captureDir != "" {
				fs, err := store.NewFileStore(captureDir)
				if err != nil {
					return fmt.Errorf("--capture-dir: %w", err)
				}
				defer fs.Close()
				o.Store = fs
			}
			p, err := proxy.New(o)
			if err != nil {
				return err
			}
			if err := p.Start(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "capture proxy at %s → %s (capture dir %q)\n", p.URL(), o.Upstream, captureDir)
			<-cmd.Context().Done()
			return p.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Upstream, "upstream", "", "vLLM base URL, without /v1 (required)")
	f.StringVar(&captureDir, "capture-dir", "", "directory of the file store that receives token records; empty disables capture")
	f.StringVar(&o.Host, "host", "127.0.0.1", "listen address")
	f.IntVar(&o.Port, "port", 0, "listen port (0 picks a free one)")
	f.StringVar(&o.APIKey, "api-key", "", "key clients must send (Authorization: Bearer or x-api-key)")
	f.StringVar(&o.UpstreamAPIKey, "upstream-api-key", "", "key sent to the upstream instead of the client's")
	f.Int64Var(&o.MaxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest request body accepted")
	f.StringArrayVar(&overrides, "sampling-override", nil, "KEY=JSON pinned on every engine request, e.g. temperature=0.6 (max_tokens caps); repeatable")
	f.BoolVar(&o.RequestTokenIDs, "request-token-ids", false, "ask vLLM for prompt ids with return_token_ids instead of calling /tokenize")
	f.BoolVar(&o.DeltaRecords, "delta-records", false, "store resolved prompts as suffixes of the parent's tokens")
	f.StringVar(&o.Model, "model", "", "replace the model name of every engine request (e.g. for Claude Code's claude-* names)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	addProxyLimitFlags(f, &o)
	cmd.AddCommand(newRolloutTokenCmd())
	return cmd
}

// parseSamplingOverrides reads KEY=JSON pairs; a value that is not JSON is a string.
func parseSamplingOverrides(pairs []string) (map[string]any, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--sampling-override %q: want KEY=VALUE", p)
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		out[k] = val
	}
	return out, nil
}

func proxyLogger(cmd *cobra.Command, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), hopts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}
