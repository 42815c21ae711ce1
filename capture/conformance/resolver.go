package conformance

import (
	"context"
	"fmt"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// Resolver is a transport's request-time parent resolver (docs/capture-path.md#parent-resolution): it
// decides a request's parent from the rollout's committed records. Fresh
// instances must see every record whose put returned, whichever client put
// it.
type Resolver interface {
	Resolve(ctx context.Context, rolloutID string, requestItems []any) (lineage.Decision, error)
	Close() error
}

// ReaderResolver resolves against a store.Reader: it re-reads the rollout's
// committed entries on every call, as Gym's file resolver re-reads the JSONL
// under the shared lock, so nothing it answers can be stale.
type ReaderResolver struct {
	reader store.Reader
	closer func() error
}

// NewReaderResolver returns a resolver over r. If r also has a Close method
// the resolver's Close calls it.
func NewReaderResolver(r store.Reader) *ReaderResolver {
	rr := &ReaderResolver{reader: r}
	if c, ok := r.(interface{ Close() error }); ok {
		rr.closer = c.Close
	}
	return rr
}

// Resolve indexes the rollout's entries and resolves requestItems.
func (r *ReaderResolver) Resolve(ctx context.Context, rolloutID string, requestItems []any) (lineage.Decision, error) {
	entries, err := r.reader.ReadEntries(ctx, rolloutID)
	if err != nil {
		return lineage.Decision{}, fmt.Errorf("conformance: read entries of %s: %w", rolloutID, err)
	}
	ix := lineage.NewIndex()
	byCall := make(map[string]*record.Entry, len(entries))
	for _, e := range entries {
		if err := ix.Add(e); err != nil {
			return lineage.Decision{}, fmt.Errorf("conformance: index %s: %w", e.ModelCallID, err)
		}
		byCall[e.ModelCallID] = e
	}
	return ix.Resolve(requestItems, func(callID string) ([]int, error) {
		return cumulative(byCall, callID)
	}), nil
}

// cumulative materialises a call's full prompt + generation, walking delta
// records back to their full-prompt ancestor.
func cumulative(byCall map[string]*record.Entry, callID string) ([]int, error) {
	var chain []*record.Entry
	for id := callID; ; {
		e, ok := byCall[id]
		if !ok {
			return nil, fmt.Errorf("conformance: call %s not found", id)
		}
		chain = append(chain, e)
		if !e.PromptIsDelta {
			break
		}
		if e.ParentCallID == nil || len(chain) > len(byCall) {
			return nil, fmt.Errorf("conformance: broken delta chain at %s", id)
		}
		id = *e.ParentCallID
	}
	var out []int
	for i := len(chain) - 1; i >= 0; i-- {
		out = append(out, chain[i].PromptTokenIDs...)
		out = append(out, chain[i].GenerationTokenIDs...)
	}
	return out, nil
}

// Close closes the underlying reader when it has a Close method.
func (r *ReaderResolver) Close() error {
	if r.closer != nil {
		return r.closer()
	}
	return nil
}
