package proxy

import (
	"bufio"
	"context"
	"net/http"

	"github.com/capbench/capbench/capture/lineage"
)

// handleChat serves /v1/chat/completions on the capture path. On a long
// request body["messages"] is still undecoded (a *lazyValue, see
// serveDialect): read it through isList and requestItemsOf, or decoded.
func (p *Proxy) handleChat(w http.ResponseWriter, r *http.Request, cc *callCtx, body map[string]any) {
	if !isList(body["messages"]) {
		writeOpenAIError(w, http.StatusBadRequest, "messages must be a list of message objects")
		return
	}
	if cc.capture {
		if err := checkN(body); err != nil {
			writeOpenAIError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	stream := streamRequested(body)
	includeUsage := false
	if so, ok := body["stream_options"].(map[string]any); ok {
		includeUsage, _ = so["include_usage"].(bool)
	}
	clientLogprobs, _ := body["logprobs"].(bool)
	p.requestItemsOf(cc, lineage.DialectChat, body)

	ctx := r.Context()
	p.runCall(w, r, cc, &modelCall{path: pathChat, out: cloneMap(body), stream: stream, errw: writeOpenAIError, passBody: true,
		// The client's stream_options stay on a pass-through stream: the
		// client reads the engine's own chunks.
		sink: func(bw *bufio.Writer) streamSink {
			return &chatSink{bw: bw, keepLogprobs: clientLogprobs, keepUsage: includeUsage}
		},
		commitStream: func(resp map[string]any, tok *tokenInfo, tokErr error) { p.commitChat(ctx, cc, resp, tok, tokErr) },
		reply: func(w http.ResponseWriter, resp map[string]any, tok *tokenInfo, tokErr error) {
			if cc.capture {
				clientLP := p.commitChat(ctx, cc, resp, tok, tokErr)
				// Deviation Q4 from the Python server, as asked: token fields
				// are stripped from every capture-path reply, not only from
				// streams. The record holds them; a client that asked for
				// logprobs itself keeps them (their tokens read
				// token_id:<n>, since the proxy pins
				// return_tokens_as_token_ids).
				stripChatTokens(resp)
				if choice, _, cerr := firstChoice(resp); cerr == nil && clientLogprobs {
					choice["logprobs"] = clientLP
				}
			}
			if stream {
				writeChatStream(w, resp, includeUsage)
				return
			}
			writeJSON(w, http.StatusOK, resp)
		}})
}

// commitChat records a chat completion: the token bundle goes on the
// message, the engine's token fields come off, and the record is put. It
// returns the engine's log-probs (for a client that asked for them).
func (p *Proxy) commitChat(ctx context.Context, cc *callCtx, resp map[string]any, tok *tokenInfo, tokErr error) (clientLP any) {
	choice, msg, cerr := firstChoice(resp)
	if cerr == nil {
		clientLP = choice["logprobs"]
		if tok != nil {
			attachTokens(msg, tok)
		}
		delete(choice, "logprobs")
		delete(choice, "token_ids")
	}
	delete(resp, "prompt_token_ids")
	p.commit(ctx, cc, resp, tokErr)
	return clientLP
}

// attachTokens puts the token bundle on a carrier object (docs/capture-path.md#one-captured-call-in-order, step 3).
func attachTokens(carrier map[string]any, tok *tokenInfo) {
	carrier[keyPromptIDs] = tok.Prompt
	carrier[keyGenerationIDs] = tok.Generation
	carrier[keyLogProbs] = tok.LogProbs
	carrier[keyRoutedExperts] = tok.RoutedExperts
}

// stripChatTokens removes every token field from a chat completion.
func stripChatTokens(resp map[string]any) {
	delete(resp, "prompt_token_ids")
	choices, _ := resp["choices"].([]any)
	for _, c := range choices {
		choice, ok := c.(map[string]any)
		if !ok {
			continue
		}
		delete(choice, "token_ids")
		delete(choice, "logprobs")
		delete(choice, keyRoutedExperts)
		if msg, ok := choice["message"].(map[string]any); ok {
			for _, k := range []string{keyPromptIDs, keyGenerationIDs, keyLogProbs, keyRoutedExperts} {
				delete(msg, k)
			}
		}
	}
}

// writeChatStream replays a complete chat completion as synthetic
// chat.completion.chunk events: role, reasoning, content, tool-call deltas,
// the finish reason, usage when asked, then [DONE].
func writeChatStream(w http.ResponseWriter, resp map[string]any, includeUsage bool) {
	sseHeaders(w)
	bw := bufio.NewWriterSize(w, 16*1024)
	base := func() map[string]any {
		return map[string]any{"id": resp["id"], "object": "chat.completion.chunk", "created": resp["created"], "model": resp["model"]}
	}
	emit := func(v any) {
		b, err := marshalGeneric(v)
		if err != nil {
			return
		}
		_, _ = bw.WriteString("data: ")
		_, _ = bw.Write(b)
		_, _ = bw.WriteString("\n\n")
	}
	choices, _ := resp["choices"].([]any)
	for _, c := range choices {
		choice, ok := c.(map[string]any)
		if !ok {
			continue
		}
		idx := choice["index"]
		if idx == nil {
			idx = 0
		}
		chunk := func(delta map[string]any, finish any) {
			ch := base()
			cd := map[string]any{"index": idx, "delta": delta, "logprobs": nil, "finish_reason": finish}
			ch["choices"] = []any{cd}
			emit(ch)
		}
		msg, _ := choice["message"].(map[string]any)
		chunk(map[string]any{"role": "assistant", "content": ""}, nil)
		if s, ok := nonEmptyString(msg["reasoning"]); ok {
			chunk(map[string]any{"reasoning": s}, nil)
		} else if s, ok := nonEmptyString(msg["reasoning_content"]); ok {
			chunk(map[string]any{"reasoning": s}, nil)
		}
		if s, ok := nonEmptyString(msg["content"]); ok {
			chunk(map[string]any{"content": s}, nil)
		}
		calls, _ := msg["tool_calls"].([]any)
		for i, tc := range calls {
			call, ok := tc.(map[string]any)
			if !ok {
				continue
			}
			fn, _ := call["function"].(map[string]any)
			chunk(map[string]any{"content": nil, "tool_calls": []any{map[string]any{
				"index": i, "id": call["id"], "type": "function",
				"function": map[string]any{"name": fn["name"], "arguments": fn["arguments"]},
			}}}, nil)
		}
		chunk(map[string]any{}, choice["finish_reason"])
	}
	if includeUsage {
		ch := base()
		ch["choices"] = []any{}
		ch["usage"] = resp["usage"]
		emit(ch)
	}
	_, _ = bw.WriteString("data: [DONE]\n\n")
	_ = bw.Flush()
}

// writeDataFrames writes "data: <json>" frames and the closing [DONE].
func writeDataFrames(w http.ResponseWriter, frames []any) {
	bw := bufio.NewWriterSize(w, 16*1024)
	for _, f := range frames {
		b, err := marshalGeneric(f)
		if err != nil {
			continue
		}
		_, _ = bw.WriteString("data: ")
		_, _ = bw.Write(b)
		_, _ = bw.WriteString("\n\n")
	}
	_, _ = bw.WriteString("data: [DONE]\n\n")
	_ = bw.Flush()
}
