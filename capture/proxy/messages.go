package proxy

import (
	"bufio"
	"context"
	"net/http"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/proxy/anthropic"
)

// handleMessages serves the Anthropic Messages API through chat: the capture
// payload is a Responses object (docs/record.md#reading-tokens-from-a-served-reply) whose id is reused as the message id.
func (p *Proxy) handleMessages(w http.ResponseWriter, r *http.Request, cc *callCtx, body map[string]any) {
	body = p.messagesAfterPrevious(cc, body)
	out, err := p.messagesToChat(cc, body)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	stream := streamRequested(body)
	p.requestItems(cc, lineage.DialectMessages, withoutThinking(body))
	ctx := r.Context()
	id := newResponseID()
	stops := anthropic.StopSequences(body)
	p.runCall(w, r, cc, &modelCall{path: pathChat, out: out, stream: stream, errw: writeAnthropicError,
		sink: func(bw *bufio.Writer) streamSink { return &messagesSink{bw: bw, id: id, stopSeqs: stops} },
		commitStream: func(resp map[string]any, tok *tokenInfo, tokErr error) {
			p.commitResponses(ctx, cc, resp, id, tok, tokErr, nil)
		},
		reply: func(w http.ResponseWriter, resp map[string]any, tok *tokenInfo, tokErr error) {
			p.commitResponses(ctx, cc, resp, id, tok, tokErr, nil)
			msg, err := anthropic.FromChat(resp, id, stops)
			if err != nil {
				writeAnthropicError(w, http.StatusBadGateway, "upstream reply cannot be converted: "+err.Error())
				return
			}
			if !stream {
				writeJSON(w, http.StatusOK, msg)
				return
			}
			sseHeaders(w)
			bw := bufio.NewWriterSize(w, 16*1024)
			if err := anthropic.WriteSSE(bw, msg); err != nil {
				cc.log.Warn("writing the event stream failed", "err", err)
				return
			}
			_ = bw.Flush()
		}})
}

// commitResponses records a chat completion as the Responses payload
// (docs/record.md#reading-tokens-from-a-served-reply) with response id id, the item ids a stream announced when ids is
// set.
func (p *Proxy) commitResponses(ctx context.Context, cc *callCtx, resp map[string]any, id string, tok *tokenInfo, tokErr error, ids *itemIDs) {
	if !cc.capture {
		return
	}
	payload, err := responsesFromChat(resp, id, tok, ids)
	if err != nil {
		p.markIncomplete(ctx, cc, "capture_error", err)
		return
	}
	p.commit(ctx, cc, payload, tokErr)
}

// serveCountTokens answers /v1/messages/count_tokens with the upstream
// tokenizer's count of the translated prompt. It is a declared
// non-generating route: nothing is recorded or marked.
func (p *Proxy) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	raw, ok := p.readBody(w, r, writeAnthropicError)
	if !ok {
		return
	}
	body, err := decodeObject(raw)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "request body is not a JSON object: "+err.Error())
		return
	}
	if _, ok := body["messages"]; !ok {
		body["messages"] = []any{}
	}
	chat, err := anthropic.ToChatRaw(body, messagesRaw(raw))
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	p.overrideModel(chat)
	sub := map[string]any{"messages": chat["messages"]}
	for _, k := range []string{"model", "tools", "chat_template_kwargs"} {
		if v, ok := chat[k]; ok {
			sub[k] = v
		}
	}
	ids, err := p.tokenize(r.Context(), sub)
	if err != nil {
		writeExchangeError(w, err, writeAnthropicError, false)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(ids)})
}

// overrideModel replaces the client's model name when Options.Model is set
// (Claude Code asks for claude-* names the engine does not serve).
func (p *Proxy) overrideModel(out map[string]any) {
	if p.opts.Model != "" {
		out["model"] = p.opts.Model
	}
}

// withoutThinking returns body with thinking and redacted_thinking blocks
// removed from assistant turns, for lineage only.
//
// Why: the captured output of a Messages call is a Responses payload whose
// reasoning item is never model-authored, so its continuation fingerprint
// has no reasoning in it (docs/capture-path.md#fingerprints-and-digests).
// Claude Code echoes the reasoning back as a thinking block, which the
// fingerprint would hash as a content part, and the follow-up would never
// resolve (no_match). Dropping the blocks makes the echoed turn hash like the
// recorded output, in line with parent resolution's "reasoning-only
// differences are ignored" (docs/capture-path.md#parent-resolution). Python hashes the blocks; this is
// a deliberate deviation for Messages requests that carry thinking.
func withoutThinking(body map[string]any) map[string]any {
	msgs, ok := body["messages"].([]any)
	if !ok {
		return body
	}
	var out []any
	for i, m := range msgs {
		msg, ok := m.(map[string]any)
		if !ok || msg["role"] != "assistant" {
			continue
		}
		blocks, ok := msg["content"].([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(blocks))
		for _, b := range blocks {
			if blk, ok := b.(map[string]any); ok && (blk["type"] == "thinking" || blk["type"] == "redacted_thinking") {
				continue
			}
			kept = append(kept, b)
		}
		if len(kept) == len(blocks) {
			continue
		}
		if out == nil {
			out = append([]any(nil), msgs...)
		}
		copied := cloneMap(msg)
		copied["content"] = kept
		out[i] = copied
	}
	if out == nil {
		return body
	}
	nb := cloneMap(body)
	nb["messages"] = out
	return nb
}
