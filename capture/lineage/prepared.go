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
	var cum []int
	if e.PromptIsDelta {
		if d.Resolution != record.ResolutionResolved {
			return fmt.Errorf("%w: delta record without a resolved parent", record.ErrInvalid)
		}
		cum = make([]int, 0, len(d.ParentCumulative)+len(e.PromptTokenIDs)+len(e.GenerationTokenIDs))
		cum = append(append(append(cum, d.ParentCumulative...), e.PromptTokenIDs...), e.GenerationTokenIDs...)
	}
	if err := e.StampLineage(d.Resolution, d.ParentCallID, d.Reason, cum); err != nil {
		return err
	}
	version := FingerprintVersion
	e.ContinuationFingerprint = fp
	e.ContinuationContextLen = len(p.items)
	e.ContinuationContextDigest = ctxDigest
	e.FingerprintVersion = &version
	return nil
}
