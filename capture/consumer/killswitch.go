package consumer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// DefaultMaskFractionMinSamples is Gym's `mask_fraction_min_samples` default.
const DefaultMaskFractionMinSamples = 50

// ErrMaskFractionExceeded is wrapped by the kill switch's error.
var ErrMaskFractionExceeded = errors.New("token capture mask fraction exceeded max_mask_fraction")

// KillSwitch aborts a run whose finalized builds are masked too often
// (`max_mask_fraction`, docs/consumer.md). A nil MaxMaskFraction disables it. It is not
// safe for concurrent use.
type KillSwitch struct {
	MaxMaskFraction *float64
	MinSamples      int

	finalized, masked int
	reasons           map[string]int
}

// Observe counts one finalized build (nil results are not finalized) and
// returns an error listing the reason counts once the masked fraction is
// above the maximum with at least MinSamples builds seen.
func (k *KillSwitch) Observe(r *Result) error {
	if r == nil {
		return nil
	}
	k.finalized++
	if r.MaskSample {
		k.masked++
		if k.reasons == nil {
			k.reasons = map[string]int{}
		}
		for _, reason := range maskReasons(r) {
			k.reasons[reason]++
		}
	}
	if k.MaxMaskFraction == nil || k.finalized < k.MinSamples {
		return nil
	}
	fraction := float64(k.masked) / float64(k.finalized)
	if fraction <= *k.MaxMaskFraction {
		return nil
	}
	return fmt.Errorf("%w: %d of %d finalized rollouts masked (%.4f > %g); reasons: %s",
		ErrMaskFractionExceeded, k.masked, k.finalized, fraction, *k.MaxMaskFraction, k.reasonSummary())
}

// Counts returns the finalized and masked counts seen so far.
func (k *KillSwitch) Counts() (finalized, masked int) { return k.finalized, k.masked }

func (k *KillSwitch) reasonSummary() string {
	keys := make([]string, 0, len(k.reasons))
	for r := range k.reasons {
		keys = append(keys, r)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if d := k.reasons[b] - k.reasons[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, key := range keys {
		parts[i] = fmt.Sprintf("%s=%d", key, k.reasons[key])
	}
	return strings.Join(parts, ", ")
}

// maskReasons names why a build was masked, in Gym's vocabulary where it
// has one (capture_incomplete, unresolved_parent_calls, the error string).
func maskReasons(r *Result) []string {
	var out []string
	if r.Metrics.CaptureIncomplete {
		out = append(out, "capture_incomplete")
	}
	if r.Metrics.UnresolvedParentCalls > 0 {
		out = append(out, "unresolved_parent_calls")
	}
	if r.Error != "" {
		out = append(out, r.Error)
	}
	if len(out) > 0 {
		return out
	}
	ta := r.Metrics.TerminalAttribution
	switch {
	case ta != nil && ta.Chain != "" && ta.Chain != ChainDelivered:
		out = append(out, "terminal_chain="+ta.Chain)
	case len(r.UnresolvedRetries) > 0:
		out = append(out, "unresolved_retries")
	case ta != nil && strings.Contains(ta.Reason, "declared_"):
		out = append(out, "declared_terminal_unconfirmed")
	case r.Metrics.Roots != 1 || r.Metrics.Chains != 1:
		out = append(out, "not_single_chain")
	default:
		out = append(out, "masked")
	}
	return out
}
