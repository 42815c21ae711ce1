package proxy

import (
	"encoding/json"

	"github.com/capbench/capbench/capture/proxy/anthropic"
)

// chatTranslation is a Messages request's conversation as the chat request
// the engine gets: the translation (anthropic.Translated) and its chat
// messages encoded. A long conversation's translation and encoding were
// most of what the Messages route added to a call; the rollout's next
// request, whose list continues this one's (conversationMemo), translates
// and encodes only its new messages. Never changed once made.
type chatTranslation struct {
	t     *anthropic.Translated
	elems []byte // t.Msgs encoded, comma-separated, without brackets
}

// encodedJSON is a value the generic encoder wrote already; it is written
// out as it is.
type encodedJSON []byte

// MarshalJSON writes the bytes as they are, for encoding/json.
func (e encodedJSON) MarshalJSON() ([]byte, error) { return e, nil }

// messagesToChat translates a Messages body to the chat body the engine
// gets, after the previous request's translation where the list continues
// that request's (cc.resumedChat), and leaves this request's in cc.chat.
// The chat messages go out encoded (encodedJSON).
func (p *Proxy) messagesToChat(cc *callCtx, body map[string]any) (map[string]any, error) {
	prev := cc.resumedChat
	var raw *anthropic.Raw
	var prevT *anthropic.Translated
	if prev != nil {
		prevT = prev.t
		raw = messagesRawAfter(cc.members, cc.listRaw[cc.listFrom:], prevT.Count)
	} else {
		raw = messagesRaw(cc.raw)
	}
	out, t, err := anthropic.ToChatAfter(body, raw, prevT)
	if err != nil {
		return nil, err
	}
	if cc.chat, err = encodeChatMessages(out, t, prev, len(cc.raw)+512); err != nil {
		return nil, err
	}
	return out, nil
}

// encodeChatMessages replaces out's chat messages, t's after a leading
// system message, by their encoding, in one buffer of about size bytes,
// reusing prev's for the messages prev translated, and returns this
// translation with its encoding.
func encodeChatMessages(out map[string]any, t *anthropic.Translated, prev *chatTranslation, size int) (*chatTranslation, error) {
	msgs, _ := out["messages"].([]any)
	lead := msgs[:len(msgs)-len(t.Msgs)] // the system message, when there is one
	from := 0
	if prev != nil {
		from = len(prev.t.Msgs)
		size = max(size, len(prev.elems)+len(prev.elems)/8+4096)
	}
	list := make([]byte, 0, size)
	list = append(list, '[')
	var err error
	for _, m := range lead {
		// Depth 2, as inside a top-level member's list.
		if list, err = appendGeneric(list, m, 2); err != nil {
			return nil, err
		}
		list = append(list, ',')
	}
	start := len(list)
	if prev != nil {
		list = append(list, prev.elems...)
	}
	for _, m := range t.Msgs[from:] {
		if len(list) > start {
			list = append(list, ',')
		}
		if list, err = appendGeneric(list, m, 2); err != nil {
			return nil, err
		}
	}
	elems := list[start:len(list):len(list)]
	if len(elems) == 0 && len(lead) > 0 {
		list = list[:start-1] // no comma after the system message
	}
	list = append(list, ']')
	out["messages"] = encodedJSON(list)
	return &chatTranslation{t: t, elems: elems}, nil
}

var _ json.Marshaler = encodedJSON(nil)
