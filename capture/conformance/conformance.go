// Package conformance is the transport conformance kit (docs/conformance.md):
// ordered checks that any Sink/Source pair (the file store, the
// in-memory store, or a framework's own transport) must pass so that the
// consumer can trust what it freezes. Run executes them as plain Go and
// reports the first failure; DescribeConformance registers them as Ginkgo
// specs.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// DefaultRolloutID is the base rollout id when Run is given none.
const DefaultRolloutID = "conformance-rollout"

// Check names, in the order Run executes them.
const (
	CheckPutThenFreezeVisibility      = "put_then_freeze_visibility"
	CheckIdempotentReput              = "idempotent_reput"
	CheckConflictingReput             = "conflicting_reput"
	CheckMarkIncompleteDurability     = "mark_incomplete_durability"
	CheckFreezeIdempotency            = "freeze_idempotency"
	CheckPostFreezeWriteSafety        = "post_freeze_write_safety"
	CheckConditionalRetirement        = "conditional_retirement"
	CheckLineageVisibility            = "lineage_visibility"
	CheckFreshClientLineageVisibility = "fresh_client_lineage_visibility"
	CheckBeginCallCustody             = "begin_call_custody"
)

// Factories build fresh client instances over one shared backend. Fresh
// instances are how the kit proves cross-client visibility: what one sink
// put, a source or resolver created independently must see.
type Factories struct {
	NewSink   func() store.Sink
	NewSource func() store.Source
	// NewResolver is optional; without it the lineage checks are skipped.
	NewResolver func() Resolver
}

// Error is a failed check.
type Error struct {
	Check  string
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("conformance check %s failed: %s", e.Check, e.Detail)
}

// Checks lists the check names Run executes for f, in order.
func Checks(f Factories) []string {
	var names []string
	for _, c := range checks() {
		if c.needsResolver && f.NewResolver == nil {
			continue
		}
		names = append(names, c.name)
	}
	return names
}

// CheckRolloutID is the rollout id a check uses: the base id plus the check
// name with '_' replaced by '-'.
func CheckRolloutID(base, check string) string {
	return base + "-" + strings.ReplaceAll(check, "_", "-")
}

// Run executes the checks in order against f and returns the names that
// passed. It stops at the first failure with an *Error; a panic or an
// unexpected error inside a check becomes that check's failure. Every client
// instance created is closed before Run returns.
func Run(ctx context.Context, f Factories, rolloutID string) ([]string, error) {
	if f.NewSink == nil || f.NewSource == nil {
		return nil, errors.New("conformance: NewSink and NewSource are required")
	}
	if rolloutID == "" {
		rolloutID = DefaultRolloutID
	}
	var passed []string
	for _, c := range checks() {
		if c.needsResolver && f.NewResolver == nil {
			continue
		}
		if err := RunCheck(ctx, f, c.name, CheckRolloutID(rolloutID, c.name)); err != nil {
			return passed, err
		}
		passed = append(passed, c.name)
	}
	return passed, nil
}

// RunCheck runs one named check on rolloutID and closes the instances it
// created. It returns nil or an *Error.
func RunCheck(ctx context.Context, f Factories, name, rolloutID string) (err error) {
	i := slices.IndexFunc(checks(), func(c check) bool { return c.name == name })
	if i < 0 {
		return &Error{Check: name, Detail: "no such check"}
	}
	c := checks()[i]
	if c.needsResolver && f.NewResolver == nil {
		return &Error{Check: name, Detail: "needs a resolver factory"}
	}
	env := &clients{f: f}
	defer func() {
		if p := recover(); p != nil {
			err = &Error{Check: name, Detail: fmt.Sprintf("unexpected panic: %v", p)}
		}
		if cerr := env.closeAll(); cerr != nil && err == nil {
			err = &Error{Check: name, Detail: fmt.Sprintf("closing clients: %v", cerr)}
		}
	}()
	if err := clearRollout(ctx, env, rolloutID); err != nil {
		return &Error{Check: name, Detail: fmt.Sprintf("clearing rollout %s before the check: %v", rolloutID, err)}
	}
	if cerr := c.run(ctx, env, rolloutID); cerr != nil {
		var ce *Error
		if errors.As(cerr, &ce) {
			ce.Check = name
			return ce
		}
		return &Error{Check: name, Detail: fmt.Sprintf("unexpected %T: %v", cerr, cerr)}
	}
	return nil
}

// clearRollout deletes what an earlier run left under rolloutID when the
// transport offers the administrative delete (docs/store.md#operations), so the kit can
// run repeatedly against one backend; transports without it start clean.
func clearRollout(ctx context.Context, env *clients, rolloutID string) error {
	if d, ok := env.source().(interface {
		Delete(ctx context.Context, rolloutID string) error
	}); ok {
		return d.Delete(ctx, rolloutID)
	}
	return nil
}

type check struct {
	name          string
	needsResolver bool
	run           func(ctx context.Context, env *clients, rolloutID string) error
}

func checks() []check {
	return []check{
		{CheckPutThenFreezeVisibility, false, putThenFreezeVisibility},
		{CheckIdempotentReput, false, idempotentReput},
		{CheckConflictingReput, false, conflictingReput},
		{CheckMarkIncompleteDurability, false, markIncompleteDurability},
		{CheckFreezeIdempotency, false, freezeIdempotency},
		{CheckPostFreezeWriteSafety, false, postFreezeWriteSafety},
		{CheckConditionalRetirement, false, conditionalRetirement},
		{CheckLineageVisibility, true, func(ctx context.Context, env *clients, id string) error {
			return lineageVisibility(ctx, env, id, true)
		}},
		{CheckFreshClientLineageVisibility, true, func(ctx context.Context, env *clients, id string) error {
			return lineageVisibility(ctx, env, id, false)
		}},
		{CheckBeginCallCustody, false, beginCallCustody},
	}
}

// clients creates fresh instances and remembers them for closing.
type clients struct {
	f       Factories
	closers []func() error
}

func (c *clients) sink() store.Sink {
	s := c.f.NewSink()
	c.closers = append(c.closers, s.Close)
	return s
}

func (c *clients) source() store.Source {
	s := c.f.NewSource()
	c.closers = append(c.closers, s.Close)
	return s
}

func (c *clients) resolver() Resolver {
	r := c.f.NewResolver()
	c.closers = append(c.closers, r.Close)
	return r
}

func (c *clients) closeAll() error {
	var errs []error
	for _, cl := range c.closers {
		errs = append(errs, cl())
	}
	c.closers = nil
	return errors.Join(errs...)
}

func failf(format string, args ...any) error {
	return &Error{Detail: fmt.Sprintf(format, args...)}
}

// The realistic request the kit's records answer (docs/conformance.md).
const (
	question    = "What is the weather in Paris?"
	answer      = "It is sunny and 21 degrees in Paris."
	followUp    = "And tomorrow?"
	firstCallID = "call-1"
)

func userItem(text string) map[string]any {
	return map[string]any{"role": "user", "content": text}
}

func assistantItem() map[string]any {
	return map[string]any{"role": "assistant", "content": answer}
}

func requestItems() []any { return []any{userItem(question)} }

// Entry returns the kit's realistic record for callID: stamped with the
// continuation metadata of the weather request, ROOT lineage, a fixed
// created_at (so a retry is byte-identical), model conformance-model and one
// assistant output item. variant changes the sampled tokens.
func Entry(rolloutID, callID string, variant int) (*record.Entry, error) {
	prompt := []int{151644, 872, 198, 3838, 374, 279, 9104, 304, 12095, 30, 151645, 198, 151644, 77091, 198}
	gen := []int{2132, 374, 39698, 323, 220, 17, 16, 12348, 304, 12095, 13, 151645}
	for i := range gen[:len(gen)-1] {
		gen[i] += variant
	}
	lps := make([]float64, len(gen))
	for i := range lps {
		lps[i] = -0.0625 * float64(i%4+1)
	}
	zero := 0
	e := &record.Entry{
		SchemaVersion:      record.SchemaVersion,
		RolloutID:          rolloutID,
		ModelCallID:        callID,
		Model:              "conformance-model",
		PromptTokenIDs:     prompt,
		GenerationTokenIDs: gen,
		GenerationLogProbs: lps,
		OutputItems:        []record.Item{assistantItem()},
		TokenItemIndex:     &zero,
		CreatedAt:          1700000000.5,
	}
	if err := lineage.Stamp(e, requestItems(), lineage.Decision{Resolution: record.ResolutionRoot}); err != nil {
		return nil, fmt.Errorf("conformance: stamp entry: %w", err)
	}
	return e, nil
}

func canonicalOf(e *record.Entry) (string, error) {
	b, err := e.MarshalCanonical()
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func freezeWith(ctx context.Context, src store.Source, rolloutID string) (*store.Snapshot, error) {
	snap, err := src.Freeze(ctx, rolloutID)
	if err != nil {
		return nil, err
	}
	if snap == nil {
		return nil, failf("freeze returned no snapshot")
	}
	return snap, nil
}

func putFirst(ctx context.Context, env *clients, rolloutID string) (*record.Entry, error) {
	e, err := Entry(rolloutID, firstCallID, 0)
	if err != nil {
		return nil, err
	}
	if err := env.sink().Put(ctx, e.Clone()); err != nil {
		return nil, err
	}
	return e, nil
}

func putThenFreezeVisibility(ctx context.Context, env *clients, id string) error {
	e, err := putFirst(ctx, env, id)
	if err != nil {
		return err
	}
	snap, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	if len(snap.Entries) != 1 {
		return failf("expected 1 entry, got %d", len(snap.Entries))
	}
	if snap.Incomplete {
		return failf("a clean rollout froze incomplete")
	}
	if snap.SnapshotID == "" {
		return failf("empty snapshot id")
	}
	want, err := canonicalOf(e)
	if err != nil {
		return err
	}
	got, err := canonicalOf(snap.Entries[0])
	if err != nil {
		return err
	}
	if got != want {
		return failf("the frozen entry differs from the one put:\n got %s\nwant %s", got, want)
	}
	return nil
}

func idempotentReput(ctx context.Context, env *clients, id string) error {
	e, err := putFirst(ctx, env, id)
	if err != nil {
		return err
	}
	if err := env.sink().Put(ctx, e.Clone()); err != nil {
		return failf("a byte-identical re-put failed: %v", err)
	}
	snap, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	if len(snap.Entries) != 1 {
		return failf("expected 1 entry after an identical re-put, got %d", len(snap.Entries))
	}
	if snap.Incomplete {
		return failf("an identical re-put made the rollout incomplete")
	}
	return nil
}

func conflictingReput(ctx context.Context, env *clients, id string) error {
	if _, err := putFirst(ctx, env, id); err != nil {
		return err
	}
	other, err := Entry(id, firstCallID, 1)
	if err != nil {
		return err
	}
	if err := env.sink().Put(ctx, other); err != nil {
		return nil // refused: passes
	}
	snap, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	if !snap.Incomplete {
		return failf("a second payload for %s was accepted and the freeze is complete", firstCallID)
	}
	return nil
}

func markIncompleteDurability(ctx context.Context, env *clients, id string) error {
	if _, err := putFirst(ctx, env, id); err != nil {
		return err
	}
	first, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	if err := env.sink().MarkIncomplete(ctx, id, "call-lost"); err != nil {
		return failf("mark_incomplete after the freeze failed: %v", err)
	}
	second, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	if !second.Incomplete {
		return failf("the loss marked after the freeze is not visible to a fresh source")
	}
	if second.Version == first.Version {
		return failf("the version did not change after mark_incomplete (still %d)", first.Version)
	}
	ok, err := env.source().Drop(ctx, id, first.SnapshotID, first.Version)
	if err != nil {
		return err
	}
	if ok {
		return failf("a drop of the stale snapshot (version %d) retired the rollout", first.Version)
	}
	return nil
}

func freezeIdempotency(ctx context.Context, env *clients, id string) error {
	if _, err := putFirst(ctx, env, id); err != nil {
		return err
	}
	a, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	b, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	if a.SnapshotID != b.SnapshotID {
		return failf("snapshot id changed between freezes: %q then %q", a.SnapshotID, b.SnapshotID)
	}
	if a.Version != b.Version {
		return failf("version changed between freezes: %d then %d", a.Version, b.Version)
	}
	setA, err := entrySet(a)
	if err != nil {
		return err
	}
	setB, err := entrySet(b)
	if err != nil {
		return err
	}
	if !slices.Equal(setA, setB) {
		return failf("the entry set changed between freezes")
	}
	return nil
}

func entrySet(s *store.Snapshot) ([]string, error) {
	out := make([]string, 0, len(s.Entries))
	for _, e := range s.Entries {
		c, err := canonicalOf(e)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return out, nil
}

func postFreezeWriteSafety(ctx context.Context, env *clients, id string) error {
	if _, err := putFirst(ctx, env, id); err != nil {
		return err
	}
	snap, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	late, err := Entry(id, "call-2", 2)
	if err != nil {
		return err
	}
	if err := env.sink().Put(ctx, late); err != nil {
		return nil // refused: passes
	}
	ok, err := env.source().Drop(ctx, id, snap.SnapshotID, snap.Version)
	if err != nil {
		return err
	}
	if ok {
		return failf("a put after the freeze was accepted and the consumed snapshot still retired: the late record is lost silently")
	}
	return nil
}

func conditionalRetirement(ctx context.Context, env *clients, id string) error {
	if _, err := putFirst(ctx, env, id); err != nil {
		return err
	}
	snap, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	ok, err := env.source().Drop(ctx, id, snap.SnapshotID, snap.Version+1)
	if err != nil {
		return err
	}
	if ok {
		return failf("a drop with a stale version (%d) retired the rollout", snap.Version+1)
	}
	again, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return failf("the evidence is gone after a refused drop: %v", err)
	}
	if len(again.Entries) != 1 {
		return failf("the evidence is gone after a refused drop: %d entries", len(again.Entries))
	}
	ok, err = env.source().Drop(ctx, id, again.SnapshotID, again.Version)
	if err != nil {
		return err
	}
	if !ok {
		return failf("the exact drop (snapshot %s, version %d) was refused", again.SnapshotID, again.Version)
	}
	return nil
}

func lineageVisibility(ctx context.Context, env *clients, id string, resolverFirst bool) error {
	var res Resolver
	if resolverFirst {
		res = env.resolver()
	}
	e, err := putFirst(ctx, env, id)
	if err != nil {
		return err
	}
	if !resolverFirst {
		res = env.resolver()
	}
	faithful := []any{userItem(question), assistantItem(), userItem(followUp)}
	d, err := res.Resolve(ctx, id, faithful)
	if err != nil {
		return err
	}
	if d.Resolution != record.ResolutionResolved || d.ParentCallID != firstCallID {
		return failf("a faithful continuation resolved %s/%q (reason %q), want resolved to %s",
			d.Resolution, d.ParentCallID, d.Reason, firstCallID)
	}
	want := append(append([]int{}, e.PromptTokenIDs...), e.GenerationTokenIDs...)
	if !slices.Equal(d.ParentCumulative, want) {
		return failf("the resolved parent's cumulative tokens differ: got %d tokens, want %d",
			len(d.ParentCumulative), len(want))
	}
	rewritten := []any{userItem("What is the weather in Rome?"), assistantItem(), userItem(followUp)}
	if d, err = res.Resolve(ctx, id, rewritten); err != nil {
		return err
	}
	if d.Resolution != record.ResolutionUnresolved {
		return failf("a rewritten context resolved %s/%q, want unresolved", d.Resolution, d.ParentCallID)
	}
	if d, err = res.Resolve(ctx, id, []any{userItem("Tell me a joke.")}); err != nil {
		return err
	}
	if d.Resolution != record.ResolutionRoot {
		return failf("a fresh question resolved %s, want root", d.Resolution)
	}
	return nil
}

func beginCallCustody(ctx context.Context, env *clients, id string) error {
	if _, err := putFirst(ctx, env, id); err != nil {
		return err
	}
	if err := env.sink().BeginCall(ctx, id, "call-never-committed"); err != nil {
		return failf("begin_call failed: %v", err)
	}
	snap, err := freezeWith(ctx, env.source(), id)
	if err != nil {
		return err
	}
	if !snap.Incomplete {
		return failf("a call that began but never committed left the snapshot complete")
	}
	return nil
}
