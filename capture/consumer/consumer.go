package consumer

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"

	"github.com/capbench/capbench/capture/consumer/attribution"
	"github.com/capbench/capbench/capture/consumer/builder"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// BuilderPrefixMerging is the only builder the target implements.
const BuilderPrefixMerging = builder.PrefixMerging

// Persisted error values (docs/consumer.md, "The mask decision" and
// "Delivery and retirement").
const (
	ErrTextNoRecords  = "capture contains no token records"
	ErrTextPerRequest = "per_request returns multiple trajectories and is not supported by single-response delivery"
	ErrTextNoKey      = "no capture key"
	ErrTextNothing    = "nothing recorded"
)

// builderPerRequest is the L1 builder name rejected with the explicit message.
const builderPerRequest = "per_request"

// Terminal chain verdicts as reported in terminal_attribution.chain.
const (
	ChainNone        = builder.TerminalNone
	ChainDelivered   = builder.TerminalDelivered
	ChainBroken      = builder.TerminalBroken
	ChainNotCaptured = builder.TerminalNotCaptured
	ChainError       = "error"
)

// ErrNilSource is returned by Consume when it is given no source.
var ErrNilSource = errors.New("consumer: nil token source")

// Input is the evidence from the finished rollout that attribution uses.
type Input struct {
	// Model is written into the rebuilt response.
	Model string
	// Response is the verified response (the result's `response`) or nil.
	Response map[string]any
	// ExplicitCallID is `_ng_terminal_model_call_id` (gate seal or agent).
	ExplicitCallID string
	// DeclaredResponseID is `terminal_response_id`.
	DeclaredResponseID string
}

// Options are the consumer settings.
type Options struct {
	// Builder names the builder; "" means prefix_merging.
	Builder string
	// MaskIncompleteWhenAttributed masks incomplete snapshots even when the
	// attributed chain was delivered (the default, true).
	MaskIncompleteWhenAttributed bool
	// Logger receives delivery's warnings (a masked rollout, a redundant
	// capture that cannot be frozen); nil means slog.Default().
	Logger *slog.Logger
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

// DefaultOptions returns Gym's defaults.
func DefaultOptions() Options {
	return Options{Builder: BuilderPrefixMerging, MaskIncompleteWhenAttributed: true}
}

// Attribution is the `terminal_attribution` metric (always four keys).
type Attribution struct {
	Method string  `json:"method"`
	CallID *string `json:"call_id"`
	Reason string  `json:"reason"`
	Chain  string  `json:"chain"`
}

// SnapshotRef identifies the frozen snapshot a result was built from.
type SnapshotRef struct {
	SnapshotID string `json:"snapshot_id"`
	Version    int    `json:"version"`
}

// Chain is one built trajectory (exposed for explanations).
type Chain = builder.Chain

// Result is one consumer build (Gym's built dict).
type Result struct {
	RolloutID       string
	Builder         string
	RebuiltResponse map[string]any
	Metrics         Metrics
	MaskSample      bool
	// Error is set for failed builds and unusable records.
	Error                 string
	UnresolvedRetries     []string
	UnresolvedParentCalls []string
	Snapshot              *SnapshotRef
	// Redundant marks a record that already carried token ids (docs/consumer.md, "Delivery and retirement").
	Redundant bool
	// Unusable marks a record delivery could not consume at all (no capture
	// key, malformed id, consumer failure): its JSON has no rollout_id or
	// builder, as in Gym.
	Unusable bool
	// Chains are the built chains, main first when delivered (for explain).
	Chains []Chain
	// Quarantined lists quarantined call ids (for explain).
	Quarantined []string
	// EmptyGenerationCalls lists calls without generated tokens (for explain).
	EmptyGenerationCalls []string
}

// Consume freezes rolloutID in src and assembles the result (docs/consumer.md). A failed
// freeze becomes a masked failed build, not a Go error; Consume returns an
// error only when ctx is cancelled or src is nil.
func Consume(ctx context.Context, src store.Source, rolloutID string, in Input, opts Options) (*Result, error) {
	if src == nil {
		return nil, ErrNilSource
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	snap, err := src.Freeze(ctx, rolloutID)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return nil, err
		}
		return freezeFailed(rolloutID, opts, PythonErrorText(err)), nil
	}
	if snap == nil {
		return freezeFailed(rolloutID, opts, "RuntimeError: token source returned no snapshot"), nil
	}
	r := ConsumeSnapshot(snap, in, opts)
	r.RolloutID = rolloutID
	return r, nil
}

func builderName(opts Options) string {
	if opts.Builder == "" {
		return BuilderPrefixMerging
	}
	return opts.Builder
}

func freezeFailed(rolloutID string, opts Options, text string) *Result {
	return &Result{
		RolloutID:  rolloutID,
		Builder:    builderName(opts),
		MaskSample: true,
		Error:      text,
		Metrics:    Metrics{Failed: true},
	}
}

// ConsumeSnapshot assembles a result from an already frozen snapshot.
func ConsumeSnapshot(snap *store.Snapshot, in Input, opts Options) *Result {
	if snap == nil {
		return freezeFailed("", opts, "RuntimeError: token source returned no snapshot")
	}
	r := &Result{
		RolloutID: snap.RolloutID,
		Builder:   builderName(opts),
		Snapshot:  &SnapshotRef{SnapshotID: snap.SnapshotID, Version: snap.Version},
	}
	if len(snap.Entries) == 0 {
		r.fail(ErrTextNoRecords, 0, nil)
	} else {
		assemble(r, snap.Entries, in)
	}
	if snap.Incomplete {
		r.Metrics.CaptureIncomplete = true
		delivered := r.Metrics.TerminalAttribution != nil && r.Metrics.TerminalAttribution.Chain == ChainDelivered
		if opts.MaskIncompleteWhenAttributed || !delivered {
			r.MaskSample = true
		}
	}
	return r
}

func (r *Result) fail(text string, nCalls int, attr *Attribution) {
	r.RebuiltResponse = nil
	r.MaskSample = true
	r.Error = text
	r.Metrics = Metrics{Failed: true, NCalls: nCalls, TerminalAttribution: attr}
	r.UnresolvedRetries, r.UnresolvedParentCalls = nil, nil
}

// attribute runs terminal attribution; a panic inside it (a defect, never
// expected) is an abstention, as an exception is in Gym.
func attribute(entries []*record.Entry, in Input) (res attribution.Result) {
	defer func() {
		if p := recover(); p != nil {
			res = attribution.Result{Reason: attribution.ReasonAttributionError}
		}
	}()
	return attribution.Resolve(entries, attribution.Inputs{
		Response:           in.Response,
		ExplicitCallID:     in.ExplicitCallID,
		DeclaredResponseID: in.DeclaredResponseID,
	})
}

func assemble(r *Result, entries []*record.Entry, in Input) {
	nCalls := len(entries)
	term := attribute(entries, in)
	attr := &Attribution{Method: attribution.MethodNone, Reason: term.Reason}
	if term.Attributed() {
		id := term.CallID
		attr.Method, attr.CallID = term.Method, &id
	}

	if r.Builder == builderPerRequest {
		attr.Chain = ChainError
		r.fail(ErrTextPerRequest, nCalls, attr)
		return
	}
	out, err := builder.Run(entries, r.Builder, term.CallID)
	if err != nil {
		attr.Chain = ChainError
		r.fail(PythonErrorText(err), nCalls, attr)
		return
	}
	attr.Chain = out.Notes.TerminalChain
	r.Chains = make([]Chain, len(out.Chains))
	for i, c := range out.Chains {
		r.Chains[i] = *c
	}
	r.Quarantined = out.Quarantined
	r.EmptyGenerationCalls = out.Notes.EmptyGenerationCalls

	rebuilt, err := project(r.RolloutID, out, in.Model)
	if err != nil {
		if attr.Chain == "" {
			attr.Chain = ChainError
		}
		r.fail(PythonErrorText(err), nCalls, attr)
		return
	}

	n := out.Notes
	r.RebuiltResponse = rebuilt
	r.UnresolvedRetries = n.UnresolvedRetries
	r.UnresolvedParentCalls = n.UnresolvedParentCalls
	quarantinedFraction := 0.0
	if nCalls > 0 {
		quarantinedFraction = builder.Round4(float64(len(out.Quarantined)) / float64(nCalls))
	}
	r.Metrics = Metrics{
		NCalls:                   nCalls,
		TerminalAttribution:      attr,
		Chains:                   n.Chains,
		Roots:                    n.Roots,
		QuarantinedCalls:         len(out.Quarantined),
		QuarantinedFraction:      quarantinedFraction,
		DeliveredFraction:        n.DeliveredFraction,
		GeneratedTokensCaptured:  n.GeneratedTokensCaptured,
		GeneratedTokensDelivered: n.GeneratedTokensDelivered,
		ParentLinkFailures:       n.ParentLinkFailures,
		UnresolvedParentCalls:    len(n.UnresolvedParentCalls),
		EmptyGenerationCalls:     len(n.EmptyGenerationCalls),
	}
	r.MaskSample = maskDecision(n, term.Attributed(), in.DeclaredResponseID != "")
}

// project validates every chain, projects the main chain and checks that the
// projection is prefix-contiguous.
func project(rolloutID string, out *builder.Output, model string) (map[string]any, error) {
	for _, c := range out.Chains {
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	rebuilt, err := builder.Project(rolloutID, out, model)
	if err != nil {
		return nil, err
	}
	if err := builder.CheckContiguity(rebuilt); err != nil {
		return nil, err
	}
	return rebuilt, nil
}

// maskDecision applies rows 2–6 of the mask decision table (docs/consumer.md); row 1
// (failed builds) and the overrides are applied by the callers.
func maskDecision(n builder.Notes, attributed, declared bool) bool {
	switch {
	case n.TerminalChain == ChainDelivered:
		return false
	case attributed:
		return true
	case declared:
		return true
	case len(n.UnresolvedRetries) > 0, len(n.UnresolvedParentCalls) > 0, n.Roots != 1, n.Chains != 1:
		return true
	default:
		return false
	}
}

// PythonErrorText renders an error as Gym persists an exception:
// "<ErrorType>: <message>". Go errors are mapped to the Python type Gym
// raises for the same condition.
func PythonErrorText(err error) string {
	if err == nil {
		return ""
	}
	if kind := builder.ErrorKind(err); kind != "" {
		return kind + ": " + err.Error()
	}
	return pythonErrorType(err) + ": " + err.Error()
}

func pythonErrorType(err error) string {
	switch {
	case errors.Is(err, store.ErrFrozen), errors.Is(err, store.ErrRetired):
		return "RuntimeError"
	case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrConflict),
		errors.Is(err, store.ErrInvalidRolloutID), errors.Is(err, record.ErrInvalid):
		return "ValueError"
	case errors.Is(err, context.Canceled):
		return "CancelledError"
	case errors.Is(err, context.DeadlineExceeded):
		return "TimeoutError"
	}
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return "OSError"
	}
	return "Error"
}
