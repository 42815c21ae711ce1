package proxy

import (
	"bytes"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/internal/jsonscan"
)

// conversationMemo is what a rollout's latest large chat or Messages
// request leaves for the next (docs/capture-path.md#a-conversation-carried-to-the-next-call):
// its messages list up to the end of the last element, those elements
// decoded, and the lineage hash state after them. An agent's next request
// repeats the conversation and adds a turn or two; when its list begins
// with the same bytes, only the new elements are decoded and hashed, and a
// call's resolution no longer grows with the number of earlier calls. It is
// never changed once made.
type conversationMemo struct {
	dialect lineage.Dialect // the items are the list's as this dialect reads it
	head    []byte          // the list's bytes up to the end of its last element
	elems   []any           // the list's elements, decoded
	cp      *lineage.Checkpoint
	chat    *chatTranslation // the list's translation to chat (Messages dialect), or nil
	bytes   int64            // what it holds, counted in the rollout's handed bytes
}

// continues reports whether the JSON array raw begins with head, a list's
// bytes up to the end of an element, and returns the index of the comma or
// closing bracket after it.
func continues(raw, head []byte) (next int, ok bool) {
	if !bytes.HasPrefix(raw, head) {
		return 0, false
	}
	i := jsonscan.SkipWS(raw, len(head))
	// Anything else means the last shared element goes on (a longer
	// number): head is not a prefix of raw's elements.
	return i, i < len(raw) && (raw[i] == ',' || raw[i] == ']')
}

// listAfter decodes the JSON array raw (a checked lazyValue's bytes) when
// it continues prev's list: prev's elements are reused and only the ones
// after them are decoded; at is the index in raw of the comma or closing
// bracket after prev's elements. ok is false when raw does not begin with
// prev's elements, and the caller decodes the whole list.
func listAfter(raw []byte, prev *conversationMemo, d lineage.Dialect) (list []any, at int, ok bool) {
	if prev == nil || prev.elems == nil || prev.dialect != d {
		return nil, 0, false
	}
	i, ok := continues(raw, prev.head)
	if !ok {
		return nil, 0, false
	}
	if raw[i] == ']' { // the same list
		return prev.elems[:len(prev.elems):len(prev.elems)], i, true
	}
	tail := make([]byte, 0, len(raw)-i)
	tail = append(append(tail, '['), raw[i+1:]...)
	v, err := decodeAny(tail)
	more, isList := v.([]any)
	if err != nil || !isList {
		return nil, 0, false
	}
	list = make([]any, 0, len(prev.elems)+len(more))
	return append(append(list, prev.elems...), more...), i, true
}

// listHead is raw's list up to the end of its last element, or nil when
// the list has none.
func listHead(raw []byte) []byte {
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return nil
	}
	head := bytes.TrimRight(raw[:len(raw)-1], " \t\r\n")
	if len(head) < 2 {
		return nil
	}
	return head
}

// readLazyItems reads the request items of a chat body whose messages were
// left undecoded (requestItemsOf), after the rollout's previous request
// where its list continues that one's.
func (p *Proxy) readLazyItems(cc *callCtx, d lineage.Dialect, body map[string]any, prev *conversationMemo) {
	p.requestItems(cc, d, decoded(messagesAfter(cc, body, prev, d)))
}

// messagesAfterPrevious is messagesAfter for a Messages body, after the
// rollout's previous request. The translation to chat reads every
// message, so they are decoded before the engine call; the lineage hashes
// resume in the resolution.
func (p *Proxy) messagesAfterPrevious(cc *callCtx, body map[string]any) map[string]any {
	var prev *conversationMemo
	if v, ok := p.rollouts.Load(cc.rt.RolloutID); ok {
		prev = v.(*rolloutLineage).conversation()
	}
	return messagesAfter(cc, body, prev, lineage.DialectMessages)
}

// messagesAfter returns body with its messages, left undecoded by
// serveDialect, decoded after prev's list where they continue it
// (listAfter), and keeps them in cc for the rollout's next request
// (rememberConversation); cc.resume is then prev's checkpoint. A body
// without undecoded messages is returned as it is.
func messagesAfter(cc *callCtx, body map[string]any, prev *conversationMemo, d lineage.Dialect) map[string]any {
	lv, ok := body["messages"].(*lazyValue)
	if !ok {
		return body
	}
	out := cloneMap(body)
	list, at, reused := listAfter(lv.raw, prev, d)
	if reused {
		out["messages"] = list
		cc.resume = prev.cp
		if prev.chat != nil {
			cc.resumedChat, cc.listFrom = prev.chat, at
		}
	} else {
		out["messages"] = lv.value()
		list, _ = lv.value().([]any)
	}
	if list != nil {
		cc.list, cc.listRaw, cc.dialect = list, lv.raw, d
	}
	return out
}

// previousList is the head of the rollout's latest remembered list (nil
// when there is none), which its next request's list likely begins with.
func (p *Proxy) previousList(rolloutID string) []byte {
	v, ok := p.rollouts.Load(rolloutID)
	if !ok {
		return nil
	}
	if m := v.(*rolloutLineage).conversation(); m != nil {
		return m.head
	}
	return nil
}

// conversation is the rollout's memo, or nil.
func (rl *rolloutLineage) conversation() *conversationMemo {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.conv
}

// rememberConversation leaves this call's conversation for the rollout's
// next request, within the handed-bytes budget (defaultHandedBudget): it
// holds the request body and the decoded messages. A call whose items did
// not hash, or that finds the budget spent, leaves none.
func (p *Proxy) rememberConversation(cc *callCtx) {
	if cc.list == nil || cc.prep == nil || cc.rl == nil {
		return
	}
	head := listHead(cc.listRaw)
	if head == nil {
		return
	}
	cp, ok := cc.prep.Checkpoint()
	if !ok {
		return
	}
	// The head keeps the whole body alive; decoded messages are about
	// twice their JSON.
	m := &conversationMemo{dialect: cc.dialect, head: head, elems: cc.list, cp: cp, bytes: int64(len(cc.raw) + 2*len(cc.listRaw))}
	if cc.chat != nil && cc.chat.t.Count == len(cc.list) {
		// The upstream body its encoding lies in, and the chat messages
		// decoded: about three times the list.
		m.chat = cc.chat
		m.bytes += 3 * int64(len(cc.listRaw))
	}
	rl := cc.rl
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.dropped {
		return
	}
	p.dropConversation(rl)
	if !p.reserveHanded(m.bytes) {
		p.reclaimHanded(rl)
		if !p.reserveHanded(m.bytes) {
			return
		}
	}
	rl.handed.Add(m.bytes)
	rl.conv = m
}

// dropConversation releases the rollout's memo. Caller holds rl.mu.
func (p *Proxy) dropConversation(rl *rolloutLineage) {
	if m := rl.conv; m != nil {
		rl.conv = nil
		rl.handed.Add(-m.bytes)
		p.handed.Add(-m.bytes)
	}
}
