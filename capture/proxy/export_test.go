package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/capbench/capbench/capture/lineage"
)

// DefaultMaxConnectionsFor is the connection cap chosen for a descriptor
// limit (exported for specs).
var DefaultMaxConnectionsFor = defaultMaxConnections

// HeldEntries is how many parsed entries the followers of the tracked
// rollouts hold between calls (specs: none should).
func (p *Proxy) HeldEntries() int {
	n := 0
	p.rollouts.Range(func(_, v any) bool {
		rl := v.(*rolloutLineage)
		rl.mu.Lock()
		if rl.follow != nil {
			n += rl.follow.Holding()
		}
		rl.mu.Unlock()
		return true
	})
	return n
}

// HandedBytes is the bytes of the committed entries the followers hold for
// their rollouts' next calls, as the budget counts them.
func (p *Proxy) HandedBytes() int64 { return p.handed.Load() }

// SetHandedBudget replaces the bound on HandedBytes.
func (p *Proxy) SetHandedBudget(n int64) { p.handedBudget.Store(n) }

// HandedRollouts are the rollouts whose followers hold a handed entry.
func (p *Proxy) HandedRollouts() []string {
	var ids []string
	p.rollouts.Range(func(k, v any) bool {
		if v.(*rolloutLineage).handed.Load() > 0 {
			ids = append(ids, k.(string))
		}
		return true
	})
	return ids
}

// ConversationHeld reports whether the rollout holds a conversation for
// its next request (conversationMemo).
func (p *Proxy) ConversationHeld(rolloutID string) bool {
	v, ok := p.rollouts.Load(rolloutID)
	return ok && v.(*rolloutLineage).conversation() != nil
}

// ListAfter decodes the JSON list after the list prev, as the capture path
// does for a request that follows prev's request; ok is false when it
// decoded nothing because list does not continue prev.
func ListAfter(prev, list []byte) (decoded []any, ok bool) {
	head := listHead(prev)
	if head == nil {
		return nil, false
	}
	elems, err := decodeAny(prev)
	if err != nil {
		return nil, false
	}
	decoded, _, ok = listAfter(list, &conversationMemo{dialect: lineage.DialectChat, head: head, elems: elems.([]any)}, lineage.DialectChat)
	return decoded, ok
}

// DecodeRequestAfter decodes a request body as the capture path does when
// its messages likely continue prev's (a list the path checked before),
// with the messages decoded; ok is false when the body does not decode.
func DecodeRequestAfter(body, prev []byte) (decoded map[string]any, ok bool) {
	m, _, err := decodeObjectMembers(body, "messages", listHead(prev))
	if err != nil {
		return nil, false
	}
	if lv, lazy := m["messages"].(*lazyValue); lazy {
		m["messages"] = lv.value()
	}
	return m, true
}

// MessagesToChatAfter translates the Messages body next into the chat
// body the engine gets, as the capture path does after the rollout's
// previous request prev, and as it does with no previous request; reused
// says whether prev's translation was reused.
func MessagesToChatAfter(prev, next []byte) (after, alone []byte, reused bool, err error) {
	chatOf := func(raw []byte, memo *conversationMemo) ([]byte, *callCtx, error) {
		var head []byte
		if memo != nil {
			head = memo.head
		}
		body, members, err := decodeObjectMembers(raw, "messages", head)
		if err != nil {
			return nil, nil, err
		}
		cc := &callCtx{raw: raw, members: members}
		body = messagesAfter(cc, body, memo, lineage.DialectMessages)
		out, err := (&Proxy{}).messagesToChat(cc, body)
		if err != nil {
			return nil, nil, err
		}
		enc, err := marshalGeneric(out)
		if err != nil {
			return nil, nil, err
		}
		// Encoded again (a stream's fallback, encoding/json): the same bytes.
		again, err := marshalGeneric(out)
		if err != nil {
			return nil, nil, err
		}
		viaJSON, err := json.Marshal(out)
		if err != nil {
			return nil, nil, err
		}
		if !bytes.Equal(again, enc) || !bytes.Equal(viaJSON, enc) {
			return nil, nil, fmt.Errorf("encoded again: %s\nencoding/json: %s\nfirst: %s", again, viaJSON, enc)
		}
		return enc, cc, nil
	}
	_, pc, err := chatOf(prev, nil)
	if err != nil {
		return nil, nil, false, err
	}
	memo := &conversationMemo{dialect: lineage.DialectMessages, head: listHead(pc.listRaw), elems: pc.list, chat: pc.chat}
	after, nc, err := chatOf(next, memo)
	if err != nil {
		return nil, nil, false, err
	}
	alone, _, err = chatOf(next, nil)
	return after, alone, nc.resumedChat != nil, err
}

// DecodeJSON decodes a value as the capture path does (exact numbers).
func DecodeJSON(b []byte) (any, error) { return decodeAny(b) }

// ResumesFrom reports whether a request of dialect d with messages list
// reuses the conversation a request of prevDialect with messages prev left.
func ResumesFrom(prevDialect lineage.Dialect, prev []byte, d lineage.Dialect, list []byte) bool {
	elems, err := decodeAny(prev)
	if err != nil {
		return false
	}
	_, _, ok := listAfter(list, &conversationMemo{dialect: prevDialect, head: listHead(prev), elems: elems.([]any)}, d)
	return ok
}
