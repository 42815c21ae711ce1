package lineage

import (
	"fmt"

	"github.com/capbench/capbench/capture/record"
)

// Prepared is what parent resolution and Stamp need from a request's items
// alone, so a caller can work it out before the reply exists (the capture
// proxy does, while the engine generates). Each hash is one pass over the
// items: the assistant fingerprint's state after the request is extended by
// the reply's output items, and the conversation digest of the prefix that
// Resolve compares is extended to the whole request for Stamp. A Prepared is
// for one goroutine at a time.
type Prepared struct {
	items    []any
	fp       *fieldHasher // assistant fingerprint over all of items
	authored bool
	fpErr    error
	cd       *fieldHasher // conversation digest over items[:cdLen]
	cdLen    int
	cdErr    error
}

// Prepare hashes the request items' assistant fingerprint.
func Prepare(requestItems []any) *Prepared {
	p := &Prepared{items: requestItems, fp: newFieldHasher(fingerprintDomain), cd: newFieldHasher(contextDomain)}
	p.authored, p.fpErr = feedFingerprint(p.fp, false, requestItems, 0)
	return p
}

// Fingerprint is AssistantFingerprint of the request items.
func (p *Prepared) Fingerprint() (string, error) {
	if p.fpErr != nil {
		return "", p.fpErr
	}
	if !p.authored {
		return "", nil
	}
	return p.fp.hex(), nil
}

// ConversationDigest is ConversationDigest of the first n request items.
// Asked for growing n, it hashes each item once.
func (p *Prepared) ConversationDigest(n int) (string, error) {
	if n < p.cdLen || n > len(p.items) {
		return ConversationDigest(p.items[:min(n, len(p.items))])
	}
	for ; p.cdLen < n; p.cdLen++ {
		if p.cdErr == nil {
			p.cdErr = digestItem(p.cd, p.cdLen, p.items[p.cdLen])
		}
	}
	if p.cdErr != nil {
		return "", p.cdErr
	}
	return p.cd.hex(), nil
}

// fingerprintWith is AssistantFingerprint of the request items ++ outputs.
func (p *Prepared) fingerprintWith(outputs []record.Item) (string, error) {
	if p.fpErr != nil {
		return "", p.fpErr
	}
	h, err := p.fp.clone()
	if err != nil {
		return "", err
	}
	return fingerprintOn(h, p.authored, outputs, len(p.items))
}

// Stamp is the package's Stamp for the prepared request items.
func (p *Prepared) Stamp(e *record.Entry, d Decision) error {
	fp, err := p.fingerprintWith(e.OutputItems)
	if err != nil {
		return fmt.Errorf("continuation fingerprint: %w", err)
	}
	ctxDigest, err := p.ConversationDigest(len(p.items))
	if err != nil {
		return fmt.Errorf("context digest: %w", err)
	}
	if d.Resolution == "" {
		d = unresolved(ReasonNotAttempted)
	}
	var cum [][]int // the record's own prompt + generation
	if e.PromptIsDelta {
		if d.Resolution != record.ResolutionResolved {
			return fmt.Errorf("%w: delta record without a resolved parent", record.ErrInvalid)
		}
		cum = [][]int{d.ParentCumulative, e.PromptTokenIDs, e.GenerationTokenIDs}
	}
	if err := e.StampLineage(d.Resolution, d.ParentCallID, d.Reason, cum...); err != nil {
		return err
	}
	version := FingerprintVersion
	e.ContinuationFingerprint = fp
	e.ContinuationContextLen = len(p.items)
	e.ContinuationContextDigest = ctxDigest
	e.FingerprintVersion = &version
	return nil
}

// Checkpoint is the hash state of a Prepared after all its items. A later
// request of the same conversation repeats those items and adds a few, and
// PrepareAfter resumes from the checkpoint instead of hashing the repeated
// items again: without it, every call of a rollout hashes its whole
// conversation, and the rollout's hashing grows with the square of its
// length. A Checkpoint is never changed, so any number of requests may
// resume from it at once.
type Checkpoint struct {
	n        int
	envelope any // the envelope pseudo-item's content; nil when there is none
	fp, cd   *fieldHasher
	authored bool
}

// Checkpoint returns the hash state after all of p's items (computing the
// whole conversation digest, which Stamp needs anyway); ok is false when
// the items cannot be hashed, and a later request must hash them itself.
func (p *Prepared) Checkpoint() (cp *Checkpoint, ok bool) {
	if _, err := p.ConversationDigest(len(p.items)); err != nil || p.fpErr != nil {
		return nil, false
	}
	fp, err := p.fp.clone()
	if err != nil {
		return nil, false
	}
	cd, err := p.cd.clone()
	if err != nil {
		return nil, false
	}
	return &Checkpoint{n: len(p.items), envelope: envelopeOf(p.items), fp: fp, cd: cd, authored: p.authored}, true
}

// PrepareAfter is Prepare for request items that repeat the checkpointed
// request's: the caller knows that the list its items come from begins
// with that request's list (the same JSON bytes, say), and only the items
// after those are hashed. The envelope pseudo-item is built from other
// members (instructions, tools), so it is compared here: a changed one, or
// fewer items than the checkpoint's, hashes everything, as Prepare does.
func PrepareAfter(cp *Checkpoint, requestItems []any) *Prepared {
	if cp == nil || len(requestItems) < cp.n || !sameEnvelope(cp.envelope, envelopeOf(requestItems)) {
		return Prepare(requestItems)
	}
	fp, err := cp.fp.clone()
	if err != nil {
		return Prepare(requestItems)
	}
	cd, err := cp.cd.clone()
	if err != nil {
		return Prepare(requestItems)
	}
	p := &Prepared{items: requestItems, fp: fp, cd: cd, cdLen: cp.n}
	p.authored, p.fpErr = feedFingerprint(p.fp, cp.authored, requestItems[cp.n:], cp.n)
	return p
}

// envelopeOf is the content of the envelope pseudo-item RequestItems puts
// first, or nil when items do not begin with one.
func envelopeOf(items []any) any {
	if len(items) == 0 {
		return nil
	}
	if m, ok := items[0].(map[string]any); ok && m["role"] == envelopeRole {
		return m["content"]
	}
	return nil
}

// sameEnvelope compares two envelopes' contents (strings RequestItems
// wrote, or nil).
func sameEnvelope(a, b any) bool {
	as, aok := a.(string)
	bs, bok := b.(string)
	return aok == bok && as == bs && (aok || a == nil && b == nil)
}
