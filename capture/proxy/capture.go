package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// callCtx is the per-request capture context (docs/capture-path.md).
type callCtx struct {
	rt      route
	api     string
	callID  string
	capture bool // training capture with a store
	hdr     http.Header
	log     *slog.Logger
	raw     []byte     // the client's request body
	req     *rawObject // its members, re-sent as written (chat, completions)

	items    []any             // request items for lineage (docs/capture-path.md#parent-resolution)
	itemsErr bool              // the items could not be read; decision is lookup_error
	prep     *lineage.Prepared // the items' hashes, shared by resolution and the record's stamp
	decision lineage.Decision
	rl       *rolloutLineage
	// resolving is closed when a parent resolution running beside the
	// engine call (resolveAhead) has set decision and rl; nil when it ran
	// inline.
	resolving chan struct{}
	// readItems, when set, reads items (and itemsErr) from a request whose
	// members were left undecoded, after the rollout's previous request
	// (conversationMemo); resolveParent runs it first.
	readItems func(prev *conversationMemo)
	// list and listRaw are a large chat or Messages request's messages,
	// decoded (readItems, messagesAfter) and as the client sent them, in
	// dialect; resume is the previous request's checkpoint when the list
	// continues that request's (conversationMemo).
	list    []any
	listRaw []byte
	dialect lineage.Dialect
	resume  *lineage.Checkpoint
	// resumedChat is, on the Messages route, the previous request's
	// translation to chat when this one's list continues it, and listFrom
	// the index in listRaw of the comma or bracket after that request's
	// messages; chat is this request's, for the next (messagesToChat).
	// members are the request's top-level members as sent.
	resumedChat *chatTranslation
	chat        *chatTranslation
	members     []rawMember
	listFrom    int
	// prompt is the canonical text of the engine's prompt ids, which the
	// record copies instead of formatting them (record.TokenText), and the
	// rollout's previous prompt they were read after.
	prompt promptIDs
	// intent is the call intent written ahead of its durability
	// (store.IntentWriter), settled before the reply; nil when begin_call
	// made it durable at once or nothing is captured.
	intent *pendingIntent
}

// resolved waits for the parent resolution begin started; decision and rl
// are read only after it.
func (cc *callCtx) resolved() {
	if cc.resolving != nil {
		<-cc.resolving
	}
}

// rolloutLineage is one rollout's parent index, fed by this proxy's own
// commits and refreshed from the store when other writers added entries.
// It keeps only the index nodes and the indexed call ids, never token
// arrays: a parent's cumulative tokens are materialised from the entries
// read for that one decision.
type rolloutLineage struct {
	mu       sync.Mutex
	index    *lineage.Index
	indexed  map[string]struct{}
	follow   *store.Follower // with a store.TailReader; nil until first read
	lastUsed atomic.Int64    // unix nanoseconds of the latest call
	// handed is the bytes of the entries this rollout's follower holds
	// from handToFollower, as it counts them (written under mu, read by
	// reclaimHanded without it); dropped is set, under mu, once the proxy
	// no longer tracks the rollout.
	handed  atomic.Int64
	dropped bool
	// prompt is the text of the prompt ids of the call that handed its
	// entry last, counted in handed; the rollout's next call takes it to
	// read its own prompt ids after (promptIDs.prev).
	prompt atomic.Pointer[record.TokenText]
	// conv is the latest large chat request's conversation, counted in
	// handed (rememberConversation); guarded by mu.
	conv *conversationMemo
}

func (p *Proxy) lineageFor(rolloutID string) *rolloutLineage {
	now := time.Now().UnixNano()
	if v, ok := p.rollouts.Load(rolloutID); ok {
		rl := v.(*rolloutLineage)
		rl.lastUsed.Store(now)
		return rl
	}
	fresh := &rolloutLineage{index: lineage.NewIndex(), indexed: map[string]struct{}{}}
	fresh.lastUsed.Store(now)
	v, loaded := p.rollouts.LoadOrStore(rolloutID, fresh)
	rl := v.(*rolloutLineage)
	if loaded {
		rl.lastUsed.Store(now)
		return rl
	}
	n := p.tracked.Add(1)
	p.metrics.trackedRollouts.Set(float64(n))
	if n > int64(p.opts.MaxTrackedRollouts) {
		p.evictLeastRecentlyUsed(rolloutID)
	}
	return rl
}

// evictLeastRecentlyUsed drops the indexes of the least recently used
// rollouts (never keep) until an eighth of the capacity is free again. Evicting
// in batches keeps the scan over all tracked rollouts rare: one scan per
// capacity/8 new rollouts instead of one per call. A dropped index is rebuilt
// from the store if its rollout calls again. One eviction runs at a time;
// callers that find one running leave the work to it.
func (p *Proxy) evictLeastRecentlyUsed(keep string) {
	if !p.evicting.TryLock() {
		return
	}
	defer p.evicting.Unlock()
	uses := p.byLastUse(func(id string, _ *rolloutLineage) bool { return id != keep })
	target := p.opts.MaxTrackedRollouts - p.opts.MaxTrackedRollouts/8
	excess := len(uses) + 1 - target
	if excess <= 0 {
		return
	}
	for _, u := range uses[:min(excess, len(uses))] {
		p.drop(u.id)
	}
}

// trackedRollout is one entry of p.rollouts, with its last use.
type trackedRollout struct {
	id string
	rl *rolloutLineage
	at int64
}

// byLastUse lists the tracked rollouts that pick, least recently used first.
func (p *Proxy) byLastUse(pick func(id string, rl *rolloutLineage) bool) []trackedRollout {
	var out []trackedRollout
	p.rollouts.Range(func(k, v any) bool {
		id, _ := k.(string)
		if rl, _ := v.(*rolloutLineage); rl != nil && pick(id, rl) {
			out = append(out, trackedRollout{id, rl, rl.lastUsed.Load()})
		}
		return true
	})
	sort.Slice(out, func(a, b int) bool { return out[a].at < out[b].at })
	return out
}

// drop removes a rollout's index, once.
func (p *Proxy) drop(rolloutID string) {
	if v, ok := p.rollouts.LoadAndDelete(rolloutID); ok {
		p.metrics.trackedRollouts.Set(float64(p.tracked.Add(-1)))
		rl := v.(*rolloutLineage)
		rl.mu.Lock()
		rl.dropped = true
		p.takeBack(rl)
		rl.mu.Unlock()
	}
}

// defaultHandedBudget bounds the memory of the committed entries the
// followers hold between calls, counted as their lines' bytes plus 8 per
// token id: 64 MiB is about 150 rollouts at 32k tokens. Past it the least
// recently used rollouts give theirs back, and a rollout without one
// parses its parent's line again on its next call.
const defaultHandedBudget = 64 << 20

// handOverBytes is the shortest line worth handing over: parsing a shorter
// one back costs microseconds, and holding one entry for each of thousands
// of small rollouts would cost more than that saves.
const handOverBytes = 32 << 10

// handToFollower gives the rollout's follower the entry this call just
// committed, so that the next call's refresh takes it for its line instead
// of parsing the line back (docs/store.md#what-a-call-costs). A delta
// record (fullPrompt, its full prompt, not nil) is handed over whatever
// its length, with its full prompt: its child would otherwise walk the
// delta chain back to its anchor, reading one line per earlier call.
// Caller holds rl.mu.
func (p *Proxy) handToFollower(rl *rolloutLineage, e *record.Entry, canonical []byte, prompt promptIDs, fullPrompt []int) {
	if rl.follow == nil || rl.dropped || (len(canonical) < handOverBytes && fullPrompt == nil) {
		return
	}
	n := int64(len(canonical) + 8*(len(e.PromptTokenIDs)+len(e.GenerationTokenIDs)+len(fullPrompt)))
	keepPrompt := !prompt.text.IsZero()
	if keepPrompt {
		n += int64(prompt.held + 8*max(len(e.PromptTokenIDs), len(fullPrompt))) // the buffer the text is in, and its copy of the ids
	}
	if !p.reserveHanded(n) {
		p.reclaimHanded(rl)
		if !p.reserveHanded(n) {
			return
		}
	}
	rl.handed.Add(n)
	if fullPrompt != nil {
		rl.follow.WroteDelta(e, canonical, fullPrompt)
	} else {
		rl.follow.Wrote(e, canonical)
	}
	if keepPrompt {
		rl.prompt.Store(&prompt.text)
	}
}

func (p *Proxy) reserveHanded(n int64) bool {
	if p.handed.Add(n) > p.handedBudget.Load() {
		p.handed.Add(-n)
		return false
	}
	return true
}

// reclaimHanded takes back the handed entries of the least recently used
// rollouts until half the budget is free; rollouts busy with a call (their
// lock held, skip's by the caller) keep theirs. One scan runs at a time.
func (p *Proxy) reclaimHanded(skip *rolloutLineage) {
	if !p.reclaiming.TryLock() {
		return
	}
	defer p.reclaiming.Unlock()
	holders := p.byLastUse(func(_ string, rl *rolloutLineage) bool { return rl != skip && rl.handed.Load() > 0 })
	for _, h := range holders {
		if p.handed.Load() <= p.handedBudget.Load()/2 {
			return
		}
		if h.rl.mu.TryLock() {
			p.takeBack(h.rl)
			h.rl.mu.Unlock()
		}
	}
}

// takeBack releases what handToFollower gave rl's follower, which holds it
// no longer (or is being dropped). Caller holds rl.mu.
func (p *Proxy) takeBack(rl *rolloutLineage) {
	if rl.follow != nil {
		rl.follow.ForgetWritten()
	}
	rl.prompt.Store(nil)
	rl.conv = nil // its bytes are in handed
	p.handed.Add(-rl.handed.Swap(0))
}

// forget drops a rollout's index once the store refuses it (frozen or
// retired): no later call of that rollout can be captured.
func (p *Proxy) forget(rolloutID string, err error) {
	if errors.Is(err, store.ErrFrozen) || errors.Is(err, store.ErrRetired) {
		p.drop(rolloutID)
	}
}

// indexesGone reports whether some indexed call is missing from entries,
// the rollout's records as the store holds them now. Caller holds rl.mu.
func (rl *rolloutLineage) indexesGone(entries []*record.Entry) bool {
	if len(rl.indexed) == 0 {
		return false
	}
	inStore := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		inStore[e.ModelCallID] = struct{}{}
	}
	for id := range rl.indexed {
		if _, ok := inStore[id]; !ok {
			return true
		}
	}
	return false
}

// add indexes a committed entry once. Caller holds rl.mu.
func (rl *rolloutLineage) add(e *record.Entry) error {
	if _, ok := rl.indexed[e.ModelCallID]; ok {
		return nil
	}
	rl.indexed[e.ModelCallID] = struct{}{}
	return rl.index.Add(e)
}

// cumulativeFrom returns a function giving a committed call's full prompt +
// generation from entries, walking delta records back to their full-prompt
// anchor.
func cumulativeFrom(entries []*record.Entry) func(callID string) ([]int, error) {
	byID := make(map[string]*record.Entry, len(entries))
	for _, e := range entries {
		if _, dup := byID[e.ModelCallID]; !dup {
			byID[e.ModelCallID] = e
		}
	}
	return func(callID string) ([]int, error) {
		var chain []*record.Entry
		seen := map[string]bool{}
		for id := callID; ; {
			e, ok := byID[id]
			if !ok {
				return nil, fmt.Errorf("call %s is not in the rollout's entries", id)
			}
			if seen[id] {
				return nil, fmt.Errorf("delta chain loops at call %s", id)
			}
			seen[id] = true
			chain = append(chain, e)
			if !e.PromptIsDelta {
				break
			}
			if e.ParentCallID == nil {
				return nil, fmt.Errorf("delta record %s has no parent", id)
			}
			id = *e.ParentCallID
		}
		var out []int
		for _, e := range slices.Backward(chain) {
			out = append(out, e.PromptTokenIDs...)
			out = append(out, e.GenerationTokenIDs...)
		}
		return out, nil
	}
}

// mayContinue reports whether request items can hold a model-authored turn;
// when none can, the decision is ROOT and the store need not be re-read.
func mayContinue(items []any) bool {
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return true
		}
		if m["role"] == "assistant" {
			return true
		}
		if t, _ := m["type"].(string); t == "function_call" {
			return true
		}
	}
	return false
}

// resolveParent makes the request-time parent decision (docs/capture-path.md#parent-resolution);
// it never fails.
func (p *Proxy) resolveParent(ctx context.Context, cc *callCtx) {
	rl := p.lineageFor(cc.rt.RolloutID)
	cc.rl = rl
	if cc.readItems != nil {
		cc.readItems(rl.conversation())
		cc.readItems = nil
	}
	if cc.itemsErr {
		return // the decision is already UNRESOLVED lookup_error
	}
	cc.prep = lineage.PrepareAfter(cc.resume, cc.items)
	var entries []*record.Entry
	read := mayContinue(cc.items)
	if tr, ok := p.opts.Store.(store.TailReader); ok && read {
		p.resolveFollowing(ctx, cc, rl, tr)
		return
	}
	if read {
		start := time.Now()
		var err error
		entries, err = p.opts.Store.ReadEntries(ctx, cc.rt.RolloutID)
		p.metrics.storeLatency.WithLabelValues("read").Observe(time.Since(start).Seconds())
		if err != nil {
			cc.decision = lineage.Decision{Resolution: record.ResolutionUnresolved, Reason: lineage.ReasonLookupError}
			cc.log.Warn("reading the rollout for parent resolution failed", "err", err)
			return
		}
	}
	rl.mu.Lock()
	if read && rl.indexesGone(entries) {
		// The store no longer holds a call the index has: the rollout was
		// deleted (or dropped) and its id is being reused. Stale nodes would
		// match the new conversation's identical turns and resolve to calls
		// that no longer exist, so the index is rebuilt from the store.
		rl.index, rl.indexed = lineage.NewIndex(), map[string]struct{}{}
	}
	// Other processes may write the same rollout: index what they added.
	if len(entries) != len(rl.indexed) {
		for _, e := range entries {
			if err := rl.add(e); err != nil {
				cc.log.Warn("indexing a stored entry failed", "entry_call_id", e.ModelCallID, "err", err)
			}
		}
	}
	cc.decision = rl.index.ResolvePrepared(cc.prep, cumulativeFrom(entries))
	rl.mu.Unlock()
	cc.log.Debug("parent resolved", "resolution", cc.decision.Resolution, "parent_call_id", cc.decision.ParentCallID, "reason", cc.decision.Reason)
}

// resolveFollowing is resolveParent over a store that reads incrementally:
// each call reads only the lines appended since the rollout's last call, and
// a candidate parent's tokens from that parent's own line, so no call costs
// more for the calls before it.
func (p *Proxy) resolveFollowing(ctx context.Context, cc *callCtx, rl *rolloutLineage, tr store.TailReader) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	first := rl.follow == nil
	if first {
		rl.follow = store.NewFollower(tr, cc.rt.RolloutID)
	}
	start := time.Now()
	added, reset, err := rl.follow.Refresh(ctx)
	p.metrics.storeLatency.WithLabelValues("read").Observe(time.Since(start).Seconds())
	if err != nil {
		p.takeBack(rl)
		rl.follow = nil
		cc.decision = lineage.Decision{Resolution: record.ResolutionUnresolved, Reason: lineage.ReasonLookupError}
		cc.log.Warn("reading the rollout for parent resolution failed", "err", err)
		return
	}
	if reset || (first && rl.indexesGone(added)) {
		// The records file is not the one indexed (the rollout was deleted
		// and its id reused): stale nodes would resolve to calls that no
		// longer exist, so the index is rebuilt from the store.
		rl.index, rl.indexed = lineage.NewIndex(), map[string]struct{}{}
	}
	for _, e := range added {
		if err := rl.add(e); err != nil {
			cc.log.Warn("indexing a stored entry failed", "entry_call_id", e.ModelCallID, "err", err)
		}
	}
	cc.decision = rl.index.ResolveKnown(cc.prep, func(callID string) ([]int, string, error) {
		return rl.follow.CumulativeDigest(ctx, callID)
	})
	// The follower outlives the call (one per tracked rollout): the entries
	// its refresh read, handed ones included, were for this resolution only.
	rl.follow.ForgetRead()
	p.takeBack(rl)
	cc.log.Debug("parent resolved", "resolution", cc.decision.Resolution, "parent_call_id", cc.decision.ParentCallID, "reason", cc.decision.Reason)
}

// beginError is a failed begin_call: the model call fails before generation.
type beginError struct {
	rolloutID string
	err       error
}

func (e *beginError) Error() string { return "registering the call intent failed: " + e.err.Error() }
func (e *beginError) Unwrap() error { return e.err }

// begin resolves the parent and registers the call intent (steps 1–2 of
// docs/capture-path.md#one-captured-call-in-order). The intent is written
// before begin returns, so a refused call never reaches the engine; it is
// durable then, or settled before the reply (writeIntent). A large
// request's resolution may still be running (resolveAhead), and cc.resolved
// waits for it.
func (p *Proxy) begin(ctx context.Context, cc *callCtx, stream bool) error {
	if !cc.capture {
		return nil
	}
	if v, ok := p.rollouts.Load(cc.rt.RolloutID); ok {
		if prev := v.(*rolloutLineage).prompt.Swap(nil); prev != nil {
			cc.prompt.prev = *prev
		}
	}
	p.resolveAhead(ctx, cc)
	start := time.Now()
	err := p.writeIntent(ctx, cc, stream)
	p.metrics.storeLatency.WithLabelValues("begin_call").Observe(time.Since(start).Seconds())
	if err != nil {
		// The resolution may re-create the rollout's lineage: let it finish
		// before forgetting a rollout that is gone.
		cc.resolved()
		p.forget(cc.rt.RolloutID, err)
		cc.log.Error("begin_call failed; the model call fails", "err", err)
		return &beginError{rolloutID: cc.rt.RolloutID, err: err}
	}
	return nil
}

// resolveAheadBytes is the request size from which the parent resolution
// (hashing the conversation, reading the parent's tokens: both grow with the
// prompt) runs on its own goroutine while the intent is written and the
// engine generates. It only reads the request and the store's records, and
// nothing sent to the engine depends on it; below this size a goroutine
// costs more than the resolution.
const resolveAheadBytes = 32 << 10

// resolveAhead runs resolveParent, beside the caller for a large request.
func (p *Proxy) resolveAhead(ctx context.Context, cc *callCtx) {
	if len(cc.raw) < resolveAheadBytes {
		p.resolveParent(ctx, cc)
		return
	}
	done := make(chan struct{})
	cc.resolving = done
	go func() {
		defer close(done)
		p.resolveParent(ctx, cc)
		if cc.prep != nil {
			// The record's context digest: the rest of the same pass.
			_, _ = cc.prep.ConversationDigest(len(cc.items))
			p.rememberConversation(cc)
		}
	}()
}

// markIncomplete marks the rollout incomplete; its own errors are logged and
// swallowed (docs/capture-path.md#failures).
func (p *Proxy) markIncomplete(ctx context.Context, cc *callCtx, reason string, cause error) {
	p.metrics.incomplete.WithLabelValues(reason).Inc()
	cc.log.Warn("rollout marked incomplete", "reason", reason, "err", cause)
	start := time.Now()
	// The client may have gone; the mark must still land.
	err := p.opts.Store.MarkIncomplete(context.WithoutCancel(ctx), cc.rt.RolloutID, cc.callID)
	p.metrics.storeLatency.WithLabelValues("mark_incomplete").Observe(time.Since(start).Seconds())
	if err != nil {
		cc.log.Error("mark_incomplete failed", "err", err)
	}
}

// prepareUpstream adds the token-information fields (docs/record.md#reading-tokens-from-a-served-reply) on the capture
// path and applies the sampling pin on every engine-bound request.
func (p *Proxy) prepareUpstream(cc *callCtx, out map[string]any, completions bool) {
	if cc.capture {
		if completions {
			if n, err := asInt(out["logprobs"]); err != nil || n < 1 {
				out["logprobs"] = 1
			}
		} else {
			out["logprobs"] = true
			out["top_logprobs"] = 0
		}
		out["return_tokens_as_token_ids"] = true
		if p.opts.RequestTokenIDs {
			out["return_token_ids"] = true
		}
	} else if v, ok := out["top_logprobs"]; ok && v == nil {
		delete(out, "top_logprobs")
	}
	p.applyOverrides(out, completions)
	p.overrideModel(out)
}

// applyOverrides pins sampling settings; max_tokens (and its chat alias
// max_completion_tokens) is a cap.
func (p *Proxy) applyOverrides(out map[string]any, completions bool) {
	for k, v := range p.opts.SamplingOverrides {
		if k == "max_tokens" || k == "max_completion_tokens" {
			limit, err := asInt(v)
			if err != nil {
				continue
			}
			keys := []string{"max_tokens"}
			if !completions {
				keys = append(keys, "max_completion_tokens")
			}
			capped := false
			for _, key := range keys {
				if cur, ok := out[key]; ok && cur != nil {
					if n, err := asInt(cur); err == nil && n <= limit {
						capped = true
						continue
					}
					out[key] = limit
					capped = true
				}
			}
			if !capped {
				out["max_tokens"] = limit
			}
			continue
		}
		out[k] = v
	}
}

// exchange sends a chat (or completions) request upstream non-streaming and,
// on the capture path, reads the token information back. A failed exchange
// marks the rollout incomplete; tokErr reports a reply without usable ids.
func (p *Proxy) exchange(ctx context.Context, cc *callCtx, path string, out map[string]any) (resp map[string]any, tok *tokenInfo, tokErr, err error) {
	completions := path == pathCompletions
	p.prepareUpstream(cc, out, completions)
	body, err := cc.req.encodeSized(out, len(cc.raw)+512)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("encoding the upstream request: %w", err)
	}
	resp, err = p.postReply(ctx, path, cc.hdr, body, &cc.prompt)
	if err != nil {
		if cc.capture {
			p.markIncomplete(ctx, cc, "upstream_error", err)
		}
		cc.log.Warn("upstream call failed", "err", err)
		return nil, nil, nil, err
	}
	if !cc.capture {
		return resp, nil, nil, nil
	}
	tokenize := func(ctx context.Context, sub map[string]any) ([]int, error) { return p.tokenizeReq(ctx, cc.req, sub) }
	if completions {
		tok, tokErr = readCompletionTokens(ctx, resp, out, tokenize)
	} else {
		tok, tokErr = readChatTokens(ctx, resp, out, tokenize)
	}
	return resp, tok, tokErr, nil
}

// tokenize asks the engine's /tokenize for prompt ids.
func (p *Proxy) tokenize(ctx context.Context, body map[string]any) ([]int, error) {
	return p.tokenizeReq(ctx, nil, body)
}

// tokenizeReq is tokenize for a body built from req's members, which are
// sent as the client wrote them (the prompt must render as it did for the
// generation).
func (p *Proxy) tokenizeReq(ctx context.Context, req *rawObject, body map[string]any) ([]int, error) {
	b, err := req.encode(body)
	if err != nil {
		return nil, err
	}
	resp, err := p.postJSON(ctx, "/tokenize", nil, b)
	if err != nil {
		return nil, err
	}
	return asIntSlice(resp["tokens"])
}

// commit extracts, stamps, validates and puts the record of one captured
// call (docs/capture-path.md#failures). It never fails the model call: every failure marks the
// rollout incomplete.
func (p *Proxy) commit(ctx context.Context, cc *callCtx, payload map[string]any, tokErr error) {
	if !cc.capture {
		return
	}
	cc.resolved()
	if tokErr != nil {
		reason := "token_error"
		if errors.Is(tokErr, errNoTokenIDs) {
			reason = "no_token_ids"
		}
		p.markIncomplete(ctx, cc, reason, tokErr)
		return
	}
	e, fullPrompt, err := p.buildEntry(cc, payload)
	if errors.Is(err, errNoTokenIDs) {
		p.markIncomplete(ctx, cc, "no_token_ids", err)
		return
	}
	if err != nil {
		p.markIncomplete(ctx, cc, "capture_error", err)
		return
	}
	start := time.Now()
	canonical, err := p.put(context.WithoutCancel(ctx), e)
	took := time.Since(start)
	p.metrics.storeLatency.WithLabelValues("put").Observe(took.Seconds())
	if p.opts.OnPut != nil {
		p.opts.OnPut(took, err)
	}
	p.forget(cc.rt.RolloutID, err)
	if errors.Is(err, store.ErrFrozen) {
		// The rollout was frozen meanwhile: the record is dropped without
		// marking, as Gym's newest line does (docs/capture-path.md#failures).
		cc.log.Warn("rollout frozen before the record was written; record dropped", "err", err)
		return
	}
	if err != nil {
		p.markIncomplete(ctx, cc, "put_error", err)
		return
	}
	if cc.intent != nil {
		cc.intent.recorded = true
	}
	p.metrics.captured.Inc()
	e.UsePromptText(record.TokenText{}) // the index keeps the entry, not the reply's text
	cc.rl.mu.Lock()
	if err := cc.rl.add(e); err != nil {
		cc.log.Warn("indexing the committed entry failed", "err", err)
	}
	if canonical != nil {
		p.handToFollower(cc.rl, e, canonical, cc.prompt, fullPrompt)
	}
	cc.rl.mu.Unlock()
	cc.log.Info("call captured", "resolution", cc.decision.Resolution, "parent_call_id", cc.decision.ParentCallID,
		"prompt_tokens", len(e.PromptTokenIDs), "generation_tokens", len(e.GenerationTokenIDs))
}

// put stores e, and returns its canonical line when the store took the
// line encoded here (a store.CanonicalSink).
func (p *Proxy) put(ctx context.Context, e *record.Entry) (canonical []byte, err error) {
	cs, ok := p.opts.Store.(store.CanonicalSink)
	if !ok {
		return nil, p.opts.Store.Put(ctx, e)
	}
	if canonical, err = store.EncodeLine(e); err != nil {
		return nil, err
	}
	if _, err := cs.PutCanonical(ctx, e, canonical); err != nil {
		return nil, err
	}
	return canonical, nil
}

// buildEntry turns the served payload into a stamped, validated record,
// and returns the record's full prompt when it stores only a delta.
func (p *Proxy) buildEntry(cc *callCtx, payload map[string]any) (e *record.Entry, fullPrompt []int, err error) {
	ex, err := record.Extract(payload)
	if err != nil {
		return nil, nil, fmt.Errorf("extracting token fields: %w", err)
	}
	if !ex.Found {
		return nil, nil, errNoTokenIDs
	}
	model, _ := payload["model"].(string)
	e = &record.Entry{
		SchemaVersion:      record.SchemaVersion,
		RolloutID:          cc.rt.RolloutID,
		ModelCallID:        cc.callID,
		Model:              model,
		PromptTokenIDs:     ex.PromptTokenIDs,
		GenerationTokenIDs: ex.GenerationTokenIDs,
		GenerationLogProbs: ex.GenerationLogProbs,
		RoutedExperts:      ex.RoutedExperts,
		OutputItems:        ex.OutputItems,
		TokenItemIndex:     ex.TokenItemIndex,
		ResponseID:         ex.ResponseID,
		CreatedAt:          float64(time.Now().UnixNano()) / 1e9,
	}
	e.UsePromptText(cc.prompt.text)
	prep := cc.prep
	if prep == nil { // no resolution ran (lookup_error)
		prep = lineage.Prepare(cc.items)
	}
	if err := prep.Stamp(e, cc.decision); err != nil {
		return nil, nil, fmt.Errorf("stamping lineage: %w", err)
	}
	full := e.PromptTokenIDs
	if p.opts.DeltaRecords && lineage.ApplyDelta(e, cc.decision) {
		fullPrompt = full
	}
	if err := e.Validate(); err != nil {
		return nil, nil, fmt.Errorf("validating the record: %w", err)
	}
	return e, fullPrompt, nil
}
