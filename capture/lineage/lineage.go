package lineage

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/capbench/capbench/capture/record"
)

// Dialect names the API shape of a request body.
type Dialect string

// The three request dialects the capture proxy serves.
const (
	DialectChat      Dialect = "chat"
	DialectResponses Dialect = "responses"
	DialectMessages  Dialect = "messages"
)

// Reasons recorded with an UNRESOLVED verdict (docs/capture-path.md#parent-resolution, docs/record.md).
const (
	ReasonNoMatch             = "no_match"
	ReasonAmbiguous           = "ambiguous"
	ReasonLookupError         = "lookup_error"
	ReasonResolverUnavailable = "resolver_unavailable"
	ReasonNotAttempted        = "not_attempted"
)

// envelopeRole marks the pseudo-item carrying instructions and tools; it can
// collide with no dialect role and is never model-authored.
const envelopeRole = "_ng_request_envelope"

// ErrRequest reports a request body whose items cannot be read.
var ErrRequest = errors.New("malformed request body")

// RequestItems returns a request's items (docs/capture-path.md#parent-resolution): the messages of a Chat or
// Anthropic Messages body, the input array of a Responses body (a string
// input gives none), with the envelope pseudo-item prepended when the request
// has non-empty instructions or tools. Null elements are skipped, as Python
// does; other non-object elements are an error. The returned items share
// structure with body.
//
// Anthropic's top-level system prompt is treated as the envelope's
// instructions: the Messages route is served as a Responses request whose
// instructions come from system, so a changed system prompt must break the
// link just as changed Responses instructions do. A string system is used as
// is, a list of blocks as its plain JSON value. An explicit "instructions"
// key, if present on a Messages body, takes precedence.
func RequestItems(d Dialect, body map[string]any) ([]any, error) {
	var listKey string
	switch d {
	case DialectChat, DialectMessages:
		listKey = "messages"
	case DialectResponses:
		listKey = "input"
	default:
		return nil, fmt.Errorf("%w: unknown dialect %q", ErrRequest, string(d))
	}
	var items []any
	switch list := body[listKey].(type) {
	case nil, string:
		// No items: absent, or a plain-text Responses input.
		if _, isString := list.(string); isString && d != DialectResponses {
			return nil, fmt.Errorf("%w: %s is a string, want an array", ErrRequest, listKey)
		}
	case []any:
		items = make([]any, 0, len(list)+1)
		for i, el := range list {
			switch el.(type) {
			case nil:
				continue
			case map[string]any:
				items = append(items, el)
			default:
				return nil, fmt.Errorf("%w: %s[%d] is %s, not an object", ErrRequest, listKey, i, jsonKind(el))
			}
		}
	default:
		return nil, fmt.Errorf("%w: %s is %s, want an array", ErrRequest, listKey, jsonKind(list))
	}

	instructions, hasInstructions := body["instructions"]
	if d == DialectMessages && !hasInstructions {
		instructions = body["system"]
	}
	tools := body["tools"]
	if !truthy(instructions) && !truthy(tools) {
		return items, nil
	}
	text, err := PythonDumps(map[string]any{"instructions": instructions, "tools": tools})
	if err != nil {
		return nil, fmt.Errorf("%w: request envelope: %w", ErrRequest, err)
	}
	envelope := map[string]any{"role": envelopeRole, "content": text}
	return append([]any{envelope}, items...), nil
}

// Node is what the resolver keeps of one committed record.
type Node struct {
	CallID        string
	CumLen        int
	Digest        string
	ContextLen    int
	ContextDigest string
}

// Decision is a request-time parent verdict (docs/capture-path.md#parent-resolution). The zero value means
// "no decision was made".
type Decision struct {
	Resolution       record.Resolution
	ParentCallID     string
	ParentCumulative []int
	ParentDigest     string
	Reason           string
}

// Index maps continuation fingerprints to the records that carry them.
// Colliding fingerprints are all kept. It is safe for concurrent use.
type Index struct {
	mu      sync.RWMutex
	buckets map[string][]Node
	byCall  map[string]Node
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{buckets: make(map[string][]Node), byCall: make(map[string]Node)}
}

// ErrReindex reports a call id added twice with different lineage values.
var ErrReindex = errors.New("call id re-indexed with a different node")

// Add indexes a committed record. Records without a continuation fingerprint
// or stamped with another fingerprint version are skipped. Adding the same
// call again with an identical node is a no-op.
func (ix *Index) Add(e *record.Entry) error {
	if e == nil || e.ContinuationFingerprint == "" {
		return nil
	}
	if e.FingerprintVersion != nil && *e.FingerprintVersion != FingerprintVersion {
		return nil
	}
	node := Node{
		CallID:        e.ModelCallID,
		ContextLen:    e.ContinuationContextLen,
		ContextDigest: e.ContinuationContextDigest,
	}
	if e.CumLen != nil {
		node.CumLen = *e.CumLen
	} else if !e.PromptIsDelta {
		node.CumLen = len(e.PromptTokenIDs) + len(e.GenerationTokenIDs)
	}
	if e.Digest != nil {
		node.Digest = *e.Digest
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if old, ok := ix.byCall[node.CallID]; ok {
		if old != node {
			return fmt.Errorf("%w: %s", ErrReindex, node.CallID)
		}
		return nil
	}
	ix.byCall[node.CallID] = node
	ix.buckets[e.ContinuationFingerprint] = append(ix.buckets[e.ContinuationFingerprint], node)
	return nil
}

// Len reports how many records are indexed.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.byCall)
}

// Resolve decides a request's parent (docs/capture-path.md#parent-resolution). cumulative returns a call's
// full prompt + generation tokens (materialising delta records); its error,
// or tokens that do not match the indexed digest, yield UNRESOLVED
// lookup_error. A nil index yields UNRESOLVED resolver_unavailable.
func (ix *Index) Resolve(requestItems []any, cumulative func(callID string) ([]int, error)) Decision {
	return ix.ResolvePrepared(Prepare(requestItems), cumulative)
}

// ResolvePrepared is Resolve for prepared request items; the prefix digests
// it computes are reused by p.Stamp.
func (ix *Index) ResolvePrepared(p *Prepared, cumulative func(callID string) ([]int, error)) Decision {
	if cumulative == nil {
		return ix.ResolveKnown(p, nil)
	}
	return ix.ResolveKnown(p, func(callID string) ([]int, string, error) {
		tokens, err := cumulative(callID)
		return tokens, "", err
	})
}

// ResolveKnown is ResolvePrepared with a cumulative that may also name the
// token digest its tokens are already known to have (an entry this process
// stamped from those very tokens), else "": a parent whose indexed digest
// is that one is not hashed again.
func (ix *Index) ResolveKnown(p *Prepared, cumulative func(callID string) (tokens []int, knownDigest string, err error)) Decision {
	requestItems := p.items
	fp, err := p.Fingerprint()
	if err != nil {
		return unresolved(ReasonLookupError)
	}
	if fp == "" {
		return Decision{Resolution: record.ResolutionRoot}
	}
	if ix == nil {
		return unresolved(ReasonResolverUnavailable)
	}
	ix.mu.RLock()
	bucket := slices.Clone(ix.buckets[fp])
	ix.mu.RUnlock()

	digests := map[int]string{} // context length → digest of that prefix
	var candidates []Node
	for _, n := range bucket {
		if n.ContextDigest == "" || n.ContextLen > len(requestItems) || n.ContextLen < 0 {
			continue
		}
		d, ok := digests[n.ContextLen]
		if !ok {
			if d, err = p.ConversationDigest(n.ContextLen); err != nil {
				return unresolved(ReasonLookupError)
			}
			digests[n.ContextLen] = d
		}
		if d == n.ContextDigest {
			candidates = append(candidates, n)
		}
	}
	candidates = collapseIdentical(candidates)
	switch {
	case len(candidates) == 0:
		return unresolved(ReasonNoMatch)
	case len(candidates) > 1:
		return unresolved(ReasonAmbiguous)
	}
	parent := candidates[0]
	if cumulative == nil {
		return unresolved(ReasonLookupError)
	}
	tokens, known, err := cumulative(parent.CallID)
	if err != nil {
		return unresolved(ReasonLookupError)
	}
	if parent.Digest != "" {
		got := known
		if got != parent.Digest {
			if got, err = record.TokenDigest(tokens); err != nil {
				return unresolved(ReasonLookupError)
			}
		}
		if got != parent.Digest || len(tokens) != parent.CumLen {
			return unresolved(ReasonLookupError)
		}
	}
	return Decision{
		Resolution:       record.ResolutionResolved,
		ParentCallID:     parent.CallID,
		ParentCumulative: tokens,
		ParentDigest:     parent.Digest,
	}
}

func unresolved(reason string) Decision {
	return Decision{Resolution: record.ResolutionUnresolved, Reason: reason}
}

// collapseIdentical keeps one node per call id and, when every remaining
// node shares one non-empty (digest, cum_len), only the smallest call id
// (identical retries).
func collapseIdentical(nodes []Node) []Node {
	seen := make(map[string]bool, len(nodes))
	uniq := nodes[:0:0]
	for _, n := range nodes {
		if !seen[n.CallID] {
			seen[n.CallID] = true
			uniq = append(uniq, n)
		}
	}
	if len(uniq) < 2 || uniq[0].Digest == "" {
		return uniq
	}
	for _, n := range uniq[1:] {
		if n.Digest != uniq[0].Digest || n.CumLen != uniq[0].CumLen {
			return uniq
		}
	}
	return []Node{slices.MinFunc(uniq, func(a, b Node) int { return cmp.Compare(a.CallID, b.CallID) })}
}

// Stamp fills the continuation fields (docs/record.md#fields) of a freshly captured record: the continuation
// fingerprint over requestItems ++ output items, the context length and
// digest, fingerprint_version 3, the parent verdict (a zero Decision stamps
// unresolved/not_attempted) and cum_len/digest. A delta record's full
// cumulative is the decision's parent cumulative ++ its own tokens. On error
// the record is left unchanged.
func Stamp(e *record.Entry, requestItems []any, d Decision) error {
	return Prepare(requestItems).Stamp(e, d)
}

// ApplyDelta performs the optional delta transform (prompt_is_delta, docs/record.md#fields) on a stamped,
// full-prompt record: when d is RESOLVED with a non-empty parent cumulative
// that the prompt starts with, the prompt is cut to the suffix and the record
// marked prompt_is_delta. It reports whether it changed the record.
func ApplyDelta(e *record.Entry, d Decision) bool {
	if e.PromptIsDelta || d.Resolution != record.ResolutionResolved || len(d.ParentCumulative) == 0 {
		return false
	}
	p := d.ParentCumulative
	if len(e.PromptTokenIDs) < len(p) || !slices.Equal(e.PromptTokenIDs[:len(p)], p) {
		return false
	}
	e.PromptTokenIDs = slices.Clone(e.PromptTokenIDs[len(p):])
	e.PromptIsDelta = true
	return true
}
