package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/capbench/capbench/capture/store"
)

// KnownBuilders are the builder names Gym's consumer knows: prefix_merging
// builds; per_request is refused with Gym's explicit message.
var KnownBuilders = []string{BuilderPrefixMerging, builderPerRequest}

// ValidateBuilder rejects a builder name no consumer knows, so a typo is an
// error at startup rather than a masked failed build per rollout.
func ValidateBuilder(name string) error {
	if name == "" || slices.Contains(KnownBuilders, name) {
		return nil
	}
	return fmt.Errorf("unknown builder %q (known: %s)", name, strings.Join(KnownBuilders, ", "))
}

// Verdict statuses.
const (
	// StatusJudged: the rollout's records were read and judged.
	StatusJudged = "judged"
	// StatusFinalized: the rollout was already consumed and retired; its
	// records are gone and its finalized record is wherever that run wrote it.
	StatusFinalized = "finalized"
)

// Verdict is one rollout as the inspection commands report it: the verdict,
// the metrics and a short reason, without the rebuilt response unless
// Response is set.
type Verdict struct {
	RolloutID  string   `json:"rollout_id"`
	Status     string   `json:"status"`
	MaskSample bool     `json:"mask_sample"`
	Metrics    *Metrics `json:"metrics,omitempty"`
	Error      *string  `json:"error"`
	Reason     string   `json:"reason"`
	// FinalizedIn names the file holding the finalized record of a retired
	// rollout, when it could be found.
	FinalizedIn string `json:"finalized_in,omitempty"`
	// Response is the rebuilt response, only when asked for.
	Response map[string]any `json:"rebuilt_response,omitempty"`
}

// NewVerdict summarises a result; withResponse keeps the rebuilt response.
func NewVerdict(r *Result, withResponse bool) Verdict {
	m := r.Metrics
	v := Verdict{RolloutID: r.RolloutID, Status: StatusJudged, MaskSample: r.MaskSample, Metrics: &m, Reason: ShortReason(r)}
	if r.Error != "" {
		e := r.Error
		v.Error = &e
	}
	if withResponse {
		v.Response = r.RebuiltResponse
	}
	return v
}

// FinalizedVerdict reports a rollout whose snapshot was retired.
func FinalizedVerdict(id, where string) Verdict {
	reason := "already finalized: consumed and retired by an earlier run"
	if where != "" {
		reason += "; its record is in " + where
	}
	return Verdict{RolloutID: id, Status: StatusFinalized, Reason: reason, FinalizedIn: where}
}

// ShortReason is the mask decision in a few words (MaskExplanation says it
// in full), for one-row-per-rollout tables.
func ShortReason(r *Result) string {
	ta := r.Metrics.TerminalAttribution
	switch {
	case r.Redundant:
		return "native agent: the record already carried token ids"
	case r.Error != "":
		return "failed build: " + r.Error
	case r.Metrics.CaptureIncomplete && r.MaskSample:
		return "capture incomplete (a call was lost or not recorded)"
	case ta != nil && ta.Chain == ChainDelivered:
		return "attributed chain delivered"
	case ta != nil && ta.CallID != nil && ta.Chain == ChainBroken:
		return "attributed chain crosses an unproven link or a quarantined retry"
	case ta != nil && ta.CallID != nil:
		return "attributed call is not among the buildable records"
	case ta != nil && (strings.Contains(ta.Reason, "declared_") || strings.Contains(ta.Reason, "[declared=")):
		return "declared response not confirmed by the records"
	case len(r.UnresolvedRetries) > 0:
		return "retried call, kept attempt unknown"
	case len(r.UnresolvedParentCalls) > 0:
		return "unproven parent link"
	case r.Metrics.Roots != 1:
		return fmt.Sprintf("%d roots", r.Metrics.Roots)
	case r.Metrics.Chains != 1:
		return fmt.Sprintf("%d chains", r.Metrics.Chains)
	}
	return "one clean chain"
}

// Looker is a read-only source: the view of one rollout without freezing it
// (store.ReadOnlyStore).
type Looker interface {
	Look(ctx context.Context, rolloutID string) (*store.View, error)
}

// Judge builds and judges one rollout of a read-only source without
// changing it. A retired rollout returns (nil, true, nil); an unknown or
// invalid rollout id is an error; records that cannot be read give a masked
// failed build, as a failed freeze does in Consume.
func Judge(ctx context.Context, src Looker, rolloutID string, in Input, opts Options) (*Result, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	v, err := src.Look(ctx, rolloutID)
	switch {
	case errors.Is(err, store.ErrNoSuchRollout), errors.Is(err, store.ErrInvalidRolloutID):
		return nil, false, err
	case err != nil && ctx.Err() != nil:
		return nil, false, err
	case err != nil:
		return freezeFailed(rolloutID, opts, PythonErrorText(err)), false, nil
	case v.State.Retired:
		return nil, true, nil
	}
	r := ConsumeSnapshot(v.Snapshot, in, opts)
	r.RolloutID = rolloutID
	return r, false, nil
}

// DirLooker is a read-only store that can also list its rollouts.
type DirLooker interface {
	Looker
	RolloutLister
}

// JudgeDir judges the named rollouts (all of them, in id order, when ids is
// empty) without changing anything and returns one verdict each. A retired
// rollout is reported as finalized, with where(id) naming the file that
// holds its record when where is set. An unknown id, or a directory without
// rollouts, is an error.
func JudgeDir(ctx context.Context, src DirLooker, ids []string, opts Options, withResponse bool, where func(id string) string) ([]Verdict, error) {
	if len(ids) == 0 {
		var err error
		if ids, err = src.Rollouts(ctx); err != nil {
			return nil, fmt.Errorf("list rollouts: %w", err)
		}
		if len(ids) == 0 {
			return nil, ErrNoRollouts
		}
	}
	vs := make([]Verdict, 0, len(ids))
	for _, id := range ids {
		res, retired, err := Judge(ctx, src, id, Input{}, opts)
		switch {
		case err != nil:
			return nil, err
		case retired:
			w := ""
			if where != nil {
				w = where(id)
			}
			vs = append(vs, FinalizedVerdict(id, w))
		default:
			vs = append(vs, NewVerdict(res, withResponse))
		}
	}
	return vs, nil
}

// ErrNoRollouts is returned by JudgeDir for a directory without rollouts.
var ErrNoRollouts = errors.New("holds no captured rollouts (no *.tokens.* files)")

// IsFinalizedRecord reports whether a rollout record was already
// finalized (it carries the consumer's metrics), so its response.output is
// the rebuilt output rather than what the harness returned.
func IsFinalizedRecord(rec Rollout) bool {
	_, ok := rec[KeyTokenCapture]
	return ok
}
