package proxy

import (
	"encoding/json"
	"sync/atomic"

	"github.com/capbench/capbench/capture/proxy/anthropic"
)

// chatTranslation is a Messages request's conversation as the chat request
// the engine gets: the translation (anthropic.Translated) and its chat
// messages as they were encoded. A long conversation's translation and
// encoding were most of what the Messages route added to a call; the
// rollout's next request, whose list continues this one's
// (conversationMemo), translates and encodes only its new messages.
type chatTranslation struct {
	t    *anthropic.Translated
	list *chatMessages
}

// elems is t.Msgs encoded, comma-separated, without brackets; nil until the
// request that made the translation was encoded.
func (c *chatTranslation) elems() []byte {
	if c == nil {
		return nil
	}
	if b := c.list.elems.Load(); b != nil {
		return *b
	}
	return nil
}

// chatMessages is the messages value of a chat body translated from a
// Messages body: the leading system message, the bytes the previous
// request's messages were encoded to, and the new messages. The encoder
// writes them straight into the upstream body and notes where the
// messages after the system one landed (a part of that body, which the
// next request copies), so the encoding is not held twice; prev and more
// are dropped then. Only elems is read from another goroutine.
type chatMessages struct {
	lead  []any
	prev  []byte
	more  []any
	elems atomic.Pointer[[]byte]
}

// appendTo writes the list at depth (the list's own) into dst.
func (c *chatMessages) appendTo(dst []byte, depth int) ([]byte, error) {
	dst = append(dst, '[')
	var err error
	for _, m := range c.lead {
		if dst, err = appendGeneric(dst, m, depth+1); err != nil {
			return nil, err
		}
		dst = append(dst, ',')
	}
	start := len(dst)
	if done := c.elems.Load(); done != nil { // encoded before: the same bytes
		dst = append(dst, *done...)
	} else if dst, err = c.appendElems(dst, start, depth); err != nil {
		return nil, err
	}
	elems := dst[start:len(dst):len(dst)]
	if len(elems) == 0 && len(c.lead) > 0 {
		dst = dst[:start-1] // no comma after the system message
	}
	return append(dst, ']'), nil
}

// appendElems writes the messages after the system one at dst[start:] and
// notes where they landed.
func (c *chatMessages) appendElems(dst []byte, start, depth int) ([]byte, error) {
	dst = append(dst, c.prev...)
	var err error
	for _, m := range c.more {
		if len(dst) > start {
			dst = append(dst, ',')
		}
		if dst, err = appendGeneric(dst, m, depth+1); err != nil {
			return nil, err
		}
	}
	elems := dst[start:len(dst):len(dst)]
	c.elems.Store(&elems)
	c.prev, c.more = nil, nil // in elems now; the previous request's body is let go
	return dst, nil
}

// MarshalJSON is the list as the proxy's encoder writes it, for
// encoding/json.
func (c *chatMessages) MarshalJSON() ([]byte, error) { return c.appendTo(nil, 0) }

var _ json.Marshaler = (*chatMessages)(nil)

// messagesToChat translates a Messages body to the chat body the engine
// gets, after the previous request's translation where the list continues
// that request's (cc.resumedChat), and leaves this request's in cc.chat.
// The chat messages are a *chatMessages.
func (p *Proxy) messagesToChat(cc *callCtx, body map[string]any) (map[string]any, error) {
	prev := cc.resumedChat
	prevElems := prev.elems()
	var raw *anthropic.Raw
	var prevT *anthropic.Translated
	// ToChatAfter starts afresh from a translation of more messages than
	// the list holds; the encoding below must then not reuse prev's either.
	if prevElems != nil && prev.t.Count <= len(cc.list) {
		prevT = prev.t
		raw = messagesRawAfter(cc.members, cc.listRaw[cc.listFrom:], prevT.Count)
	} else {
		prevElems, raw = nil, messagesRaw(cc.raw)
	}
	out, t, err := anthropic.ToChatAfter(body, raw, prevT)
	if err != nil {
		return nil, err
	}
	msgs, _ := out["messages"].([]any)
	from := 0
	if prevT != nil {
		from = len(prevT.Msgs)
	}
	list := &chatMessages{lead: msgs[:len(msgs)-len(t.Msgs)], prev: prevElems, more: t.Msgs[from:]}
	out["messages"] = list
	cc.chat = &chatTranslation{t: t, list: list}
	return out, nil
}
