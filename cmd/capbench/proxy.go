package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

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
		storeURL   string
		overrides  []string
		logLevel   string
		logFormat  string
		openRolls  int
		syncMode   string
		procs      int
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
--capture-dir or --store nothing is recorded: calls under the training prefix
are served and logged as call summaries only (docs/capture-path.md).
--upstream is vLLM's base URL without /v1. Metrics are at <proxy>/metrics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUpstream(o.Upstream); err != nil {
				return err
			}
			if err := checkProxyFlags(o); err != nil {
				return err
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
			if openRolls < 0 {
				return fmt.Errorf("--max-open-rollouts %d: must not be negative (0: a twelfth of the descriptor limit)", openRolls)
			}
			if err := checkProcs(procs); err != nil {
				return err
			}
			if openRolls == 0 {
				openRolls = proxy.DefaultOpenRollouts()
			}
			fileOpts := []store.FileOption{store.WithMaxIdleRollouts(openRolls)}
			switch syncMode {
			case "group":
			case "file":
				fileOpts = append(fileOpts, store.WithPerFileSync())
			default:
				return fmt.Errorf("--sync %q: must be group (one sync of the file system for every append waiting) or file (an fdatasync per append, as NeMo Gym's store)", syncMode)
			}
			if cs, err := openStore(cmd.Context(), captureDir, storeURL, fileOpts...); err != nil {
				return err
			} else if cs != nil {
				defer cs.Close()
				o.Store = cs
			}
			_, fileStore := o.Store.(*store.FileStore)
			n := proxyProcs(procs, gomaxprocsFromEnv(), fileStore && syncMode == "group", runtime.GOMAXPROCS(0))
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
			logger.Debug("scheduler", "gomaxprocs", n)
			p, err := proxy.New(o)
			if err != nil {
				return err
			}
			if o.Store == nil {
				// Before the address line, so a reader of both sees it first.
				fmt.Fprintln(cmd.ErrOrStderr(), noStoreWarning)
			}
			if err := p.Start(cmd.Context()); err != nil {
				// Only listening can fail here: a bad --host or a taken --port.
				return fmt.Errorf("--host %s --port %d: %w", o.Host, o.Port, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "capture proxy at %s → %s (capture dir %q)\n", p.URL(), o.Upstream, captureDir)
			if o.Model == "" {
				fmt.Fprintln(cmd.ErrOrStderr(), modelWarning(servedModels(cmd.Context(), o.Upstream, o.UpstreamAPIKey)))
			}
			<-cmd.Context().Done()
			return p.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Upstream, "upstream", "", "vLLM base URL, without /v1 (required)")
	f.StringVar(&captureDir, "capture-dir", "", "directory of the file store that receives token records; empty disables capture")
	f.IntVar(&openRolls, "max-open-rollouts", 0, "idle rollouts the file store keeps descriptors for, three each (0: a twelfth of the descriptor limit, at most 256)")
	addStoreFlag(f, &storeURL)
	f.StringVar(&syncMode, "sync", "group", "how the file store makes each record durable before the reply: group (appends waiting at once share one syncfs of the file system) or file (an fdatasync per append, as NeMo Gym's store; faster when the disk is shared with heavy writers)")
	f.IntVar(&procs, "gomaxprocs", 0, "Go scheduler threads (0: twice the CPUs with --sync group on the file store, where a writer waking from its group sync would otherwise wait behind other calls; else Go's default; the GOMAXPROCS environment variable also sets it)")
	f.StringVar(&o.Host, "host", "127.0.0.1", "listen address")
	f.IntVar(&o.Port, "port", 0, "listen port (0 picks a free one)")
	f.StringVar(&o.APIKey, "api-key", "", "key clients must send (Authorization: Bearer or x-api-key)")
	f.StringVar(&o.UpstreamAPIKey, "upstream-api-key", "", "key sent to the upstream instead of the client's")
	f.Int64Var(&o.MaxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest request body accepted")
	f.StringArrayVar(&overrides, "sampling-override", nil, "KEY=VALUE pinned on every engine request, e.g. temperature=0.6 (max_tokens caps); keys: "+samplingKeyList()+"; repeatable")
	f.BoolVar(&o.RequestTokenIDs, "request-token-ids", false, "ask vLLM for prompt ids with return_token_ids instead of calling /tokenize")
	f.BoolVar(&o.DeltaRecords, "delta-records", false, "store resolved prompts as suffixes of the parent's tokens")
	f.BoolVar(&o.BufferedStreams, "buffered-streams", false, "answer streaming clients as NeMo Gym's model server does: one non-streaming engine call, then the whole reply as a stream (default: pass the engine's stream through as it is generated)")
	f.StringVar(&o.Model, "model", "", "replace the model name of every engine request with this served name (needed for Claude Code, which asks for claude-* names)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	addProxyLimitFlags(f, &o)
	cmd.AddCommand(newRolloutTokenCmd())
	return cmd
}

// noStoreWarning says what the proxy does without a store: the training
// prefix is served like the summary prefix (docs/capture-path.md).
const noStoreWarning = "warning: neither --capture-dir nor --store is set, so nothing is captured: " +
	"calls under /ng-rollout/<rollout id>/training-token-capture/ are answered by the engine and logged as call summaries only, " +
	"with no token record written (capbench verdict will find no records); start the proxy with --capture-dir DIR to capture them"

// modelWarning tells a user who did not set --model that client model names
// reach the engine as they are: Claude Code asks for claude-* names, which
// vLLM answers with 404 "model does not exist".
func modelWarning(served []string) string {
	example := "<served model name>"
	if len(served) > 0 {
		example = served[0]
	}
	msg := "warning: --model is not set, so each request's model name is passed to the engine as it is. " +
		"Claude Code asks for claude-* models (claude-opus-5-5, claude-haiku-5-5, ...) that the engine does not serve and answers with 404; " +
		"start the proxy with --model " + example + " to send every call to the served model"
	if len(served) > 0 {
		msg += " (the engine serves: " + strings.Join(served, ", ") + ")"
	}
	return msg
}

// servedModels asks the upstream's /v1/models for its model ids; nil when it
// does not answer within two seconds (it may still be starting).
func servedModels(ctx context.Context, upstream, apiKey string) []string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(upstream, "/")+"/v1/models", nil)
	if err != nil {
		return nil
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list) != nil {
		return nil
	}
	var ids []string
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids
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
