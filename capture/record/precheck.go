package record

import (
	"runtime"
	"sync"
)

// Checking stamped digests is most of a cold verdict's CPU: one SHA-256 of
// every parent's cumulative tokens (docs/record.md#digests), which cannot be
// extended along the chain because the length is hashed first. A reader
// that hands each parsed line to a DigestPrecheck gets that hashing done on
// the machine's other cores while it parses the lines that follow.

// precheckTokens is the queued hashing (tokens) below which a precheck
// starts no goroutine: a small rollout is judged before one would help.
const precheckTokens = 1 << 18

// stampedCheck is the memo behind StampedDigestMatches: the answer, and the
// token slices and digest it was worked out on, so an entry whose fields
// were replaced since reads as not worked out.
type stampedCheck struct {
	prompt, gen       *int
	promptLen, genLen int
	digest            string
	matches, done     bool
}

func sliceHead(s []int) *int {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// StampedDigestMatches reports whether e carries a stamped digest that is
// the token digest of its prompt ++ generation, and whether that was worked
// out ahead by a DigestPrecheck (known). It never hashes. Delta records
// (prompt_is_delta) are never worked out ahead: their cumulative tokens
// start in an earlier record.
func (e *Entry) StampedDigestMatches() (matches, known bool) {
	c := &e.stamped
	if !c.done || e.Digest == nil || *e.Digest != c.digest ||
		c.prompt != sliceHead(e.PromptTokenIDs) || c.promptLen != len(e.PromptTokenIDs) ||
		c.gen != sliceHead(e.GenerationTokenIDs) || c.genLen != len(e.GenerationTokenIDs) {
		return false, false
	}
	return c.matches, true
}

// checkStamped works out and memoises StampedDigestMatches.
func (e *Entry) checkStamped() {
	d, err := tokenDigest(e.PromptTokenIDs, e.GenerationTokenIDs)
	e.stamped = stampedCheck{
		prompt: sliceHead(e.PromptTokenIDs), promptLen: len(e.PromptTokenIDs),
		gen: sliceHead(e.GenerationTokenIDs), genLen: len(e.GenerationTokenIDs),
		digest: *e.Digest, matches: err == nil && d == *e.Digest, done: true,
	}
}

// DigestPrecheck works out StampedDigestMatches, on background goroutines,
// for the entries a later entry names as its parent: the ones a chain
// builder checks. The zero value is ready; Add entries in file order, then
// Wait before anything else reads them. On a single core it does nothing.
type DigestPrecheck struct {
	seen    map[string]*Entry
	queued  map[*Entry]bool
	pending []*Entry
	tokens  int
	work    chan *Entry
	wg      sync.WaitGroup
}

// Add records e and queues the parent it names, if an earlier entry is that
// parent and carries a stamped digest.
func (p *DigestPrecheck) Add(e *Entry) {
	if p.seen == nil {
		p.seen, p.queued = map[string]*Entry{}, map[*Entry]bool{}
	}
	if _, dup := p.seen[e.ModelCallID]; !dup {
		p.seen[e.ModelCallID] = e
	}
	if e.ParentCallID == nil {
		return
	}
	parent := p.seen[*e.ParentCallID]
	if parent == nil || parent == e || parent.Digest == nil || parent.PromptIsDelta || p.queued[parent] {
		return
	}
	p.queued[parent] = true
	p.queue(parent)
}

// queue hands parent to the workers, starting them once the queued hashing
// is worth a goroutine.
func (p *DigestPrecheck) queue(parent *Entry) {
	if p.work != nil {
		p.work <- parent
		return
	}
	p.pending = append(p.pending, parent)
	p.tokens += len(parent.PromptTokenIDs) + len(parent.GenerationTokenIDs)
	workers := runtime.GOMAXPROCS(0)
	if p.tokens < precheckTokens || workers < 2 {
		return
	}
	p.work = make(chan *Entry, 64)
	for range workers {
		p.wg.Go(func() {
			for e := range p.work {
				e.checkStamped()
			}
		})
	}
	for _, e := range p.pending {
		p.work <- e
	}
	p.pending = nil
}

// Wait returns once every queued entry is worked out. Entries queued below
// the threshold are left to the builder, which hashes what it needs.
func (p *DigestPrecheck) Wait() {
	if p.work != nil {
		close(p.work)
		p.wg.Wait()
		p.work = nil
	}
	p.pending = nil
}
