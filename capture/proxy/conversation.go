package proxy

import (
	"bytes"

	"github.com/capbench/capbench/capture/lineage"
)

// conversationMemo is what a rollout's latest large chat request leaves for
// the next (docs/capture-path.md#parent-resolution): its messages list up to
// the end of the last element, those elements decoded, and the lineage
// hash state after them. An agent's next request repeats the conversation
// and adds a turn or two; when its list begins with the same bytes, only
// the new elements are decoded and hashed, and a call's resolution no
// longer grows with the number of earlier calls. It is never changed once
// made.
type conversationMemo struct {
	head  []byte // the list's bytes up to the end of its last element
	elems []any  // the list's elements, decoded
	cp    *lineage.Checkpoint
	bytes int64 // what it holds, counted in the rollout's handed bytes
}

// listAfter decodes the JSON array raw (a checked lazyValue's bytes) when
// it continues prev's list: prev's elements are reused and only the ones
// after them are decoded. ok is false when raw does not begin with prev's
// elements, and the caller decodes the whole list.
func listAfter(raw []byte, prev *conversationMemo) (list []any, ok bool) {
	if prev == nil || !bytes.HasPrefix(raw, prev.head) {
		return nil, false
	}
	rest := raw[len(prev.head):]
	i := 0
	for i < len(rest) && isJSONSpace(rest[i]) {
		i++
	}
	if i == len(rest) {
		return nil, false
	}
	switch rest[i] {
	case ']': // the same list
		return prev.elems[:len(prev.elems):len(prev.elems)], true
	case ',': // the same elements first, and more after them
	default: // the last shared element goes on (a longer number): not a prefix
		return nil, false
	}
	tail := make([]byte, 0, len(rest)-i)
	tail = append(append(tail, '['), rest[i+1:]...)
	v, err := decodeAny(tail)
	more, isList := v.([]any)
	if err != nil || !isList {
		return nil, false
	}
	list = make([]any, 0, len(prev.elems)+len(more))
	return append(append(list, prev.elems...), more...), true
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

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// readLazyItems reads the request items of a chat body whose messages were
// left undecoded (requestItemsOf), after the rollout's previous request
// where its list continues that one's; cc.resume is then the checkpoint
// the lineage hashes resume from.
func (p *Proxy) readLazyItems(cc *callCtx, d lineage.Dialect, body map[string]any, prev *conversationMemo) {
	lv, _ := body["messages"].(*lazyValue)
	if lv == nil {
		p.requestItems(cc, d, decoded(body))
		return
	}
	list, reused := listAfter(lv.raw, prev)
	if reused {
		with := cloneMap(body)
		with["messages"] = list
		p.requestItems(cc, d, decoded(with))
	} else {
		p.requestItems(cc, d, decoded(body))
		list, _ = lv.value().([]any)
	}
	if cc.itemsErr || list == nil {
		return
	}
	cc.list, cc.listRaw = list, lv.raw
	if reused {
		cc.resume = prev.cp
	}
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
	if cc.listRaw == nil || cc.prep == nil || cc.rl == nil {
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
	m := &conversationMemo{head: head, elems: cc.list, cp: cp, bytes: int64(len(cc.raw) + 2*len(cc.listRaw))}
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
