package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/capbench/capbench/capture/proxy"
)

// rolloutSecretEnv is read when --rollout-secret is not given, so the
// secret need not appear in the process list.
const rolloutSecretEnv = "CAPBENCH_ROLLOUT_SECRET"

// addProxyLimitFlags adds the hardening flags of `capbench proxy`
// (docs/proxy-security.md).
func addProxyLimitFlags(f *pflag.FlagSet, o *proxy.Options) {
	l := &o.Limits
	f.Int64Var(&l.MaxInflightBodyBytes, "max-inflight-body-bytes", 0, "budget of request-body bytes handled at once; over it calls queue, then get 503 (0: twice --max-body-bytes)")
	f.DurationVar(&l.AdmissionWait, "admission-wait", proxy.DefaultAdmissionWait, "how long a call may queue for the in-flight budget before a 503 with Retry-After")
	f.DurationVar(&l.ReadHeaderTimeout, "read-header-timeout", proxy.DefaultReadHeaderTimeout, "time a client has to send a request's headers")
	f.DurationVar(&l.ReadBodyTimeout, "read-body-timeout", proxy.DefaultReadBodyTimeout, "time a client has to send a request's whole body (replies are not limited)")
	f.DurationVar(&l.IdleTimeout, "idle-timeout", proxy.DefaultIdleTimeout, "close keep-alive connections idle this long")
	f.IntVar(&l.MaxConnections, "max-connections", 0, "most client connections open at once; at the cap the oldest idle one is closed (0: half the descriptor limit, at most 4096)")
	f.DurationVar(&l.UpstreamTimeout, "upstream-timeout", proxy.DefaultUpstreamTimeout, "longest wait for the upstream's response headers (a non-streamed call's whole generation); 504 after it")
	f.DurationVar(&l.StreamIdleTimeout, "stream-idle-timeout", 0, "longest gap between bytes of an upstream reply after its headers (a stalled stream); the call is cut and its rollout marked incomplete (0: --upstream-timeout)")
	f.StringVar(&o.RolloutSecret, "rollout-secret", "", "require on every /ng-rollout/<id>/ call the token that \"capbench proxy rollout-token <id>\" prints (or set "+rolloutSecretEnv+")")
}

// newRolloutTokenCmd is `capbench proxy rollout-token ID...`: prints the
// token a proxy started with the same secret accepts for each rollout id.
func newRolloutTokenCmd() *cobra.Command {
	var secret string
	cmd := &cobra.Command{
		Use:   "rollout-token ROLLOUT_ID...",
		Short: "Print the per-rollout token for a proxy run with --rollout-secret",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if secret == "" {
				secret = os.Getenv(rolloutSecretEnv)
			}
			if secret == "" {
				return errors.New("--rollout-secret (or " + rolloutSecretEnv + ") is required: the secret the proxy runs with")
			}
			for _, id := range args {
				if len(args) == 1 {
					fmt.Fprintln(cmd.OutOrStdout(), proxy.RolloutToken(secret, id))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", id, proxy.RolloutToken(secret, id))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&secret, "rollout-secret", "", "the proxy's rollout secret (or set "+rolloutSecretEnv+")")
	return cmd
}
