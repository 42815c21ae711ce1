package proxy

import (
	"net/http"
)

// handleCompletions serves /v1/completions on the capture path.
//
// The record's output_items is one chat-style item
// {"type":"message","role":"assistant","content":<text>} (the payload handed
// to extraction is a one-choice chat shape with the token bundle on that
// message), and response_id is the cmpl- id. The request items are the
// prompt as one user item, so a completions call is always a ROOT: a raw
// prompt has no model-authored turns to link on.
func (p *Proxy) handleCompletions(w http.ResponseWriter, r *http.Request, cc *callCtx, body map[string]any) {
	prompt, ok := body["prompt"].(string)
	if !ok {
		writeOpenAIError(w, http.StatusBadRequest, "prompt must be a single string when capturing training tokens")
		return
	}
	if err := checkN(body); err != nil {
		writeOpenAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	stream := streamRequested(body)
	clientLogprobs := body["logprobs"] != nil
	cc.items = []any{map[string]any{"role": "user", "content": prompt}}
	ctx := r.Context()
	// Completions have no pass-through stream: streaming clients get the
	// complete reply as a synthetic stream.
	p.runCall(w, r, cc, &modelCall{path: pathCompletions, out: cloneMap(body), stream: stream, errw: writeOpenAIError, passBody: true,
		reply: func(w http.ResponseWriter, resp map[string]any, tok *tokenInfo, tokErr error) {
			choices, _ := resp["choices"].([]any)
			var choice map[string]any
			if len(choices) > 0 {
				choice, _ = choices[0].(map[string]any)
			}
			text, _ := choice["text"].(string)
			msg := map[string]any{"type": "message", "role": "assistant", "content": text}
			if tok != nil {
				attachTokens(msg, tok)
			}
			payload := map[string]any{"id": resp["id"], "model": resp["model"], "choices": []any{map[string]any{"index": 0, "message": msg}}}
			p.commit(ctx, cc, payload, tokErr)
			for _, c := range choices {
				if ch, ok := c.(map[string]any); ok {
					delete(ch, "token_ids")
					delete(ch, "prompt_token_ids")
					delete(ch, keyRoutedExperts)
					if !clientLogprobs {
						delete(ch, "logprobs")
					}
				}
			}
			if stream {
				writeCompletionStream(w, resp)
				return
			}
			writeJSON(w, http.StatusOK, resp)
		}})
}

// writeCompletionStream replays a text completion as one text chunk per
// choice, a finish chunk, the usage chunk and [DONE].
func writeCompletionStream(w http.ResponseWriter, resp map[string]any) {
	sseHeaders(w)
	choices, _ := resp["choices"].([]any)
	var frames []any
	for _, c := range choices {
		ch, _ := c.(map[string]any)
		frames = append(frames, map[string]any{"id": resp["id"], "object": "text_completion", "created": resp["created"], "model": resp["model"],
			"choices": []any{map[string]any{"index": ch["index"], "text": ch["text"], "logprobs": nil, "finish_reason": nil, "stop_reason": nil}}})
		frames = append(frames, map[string]any{"id": resp["id"], "object": "text_completion", "created": resp["created"], "model": resp["model"],
			"choices": []any{map[string]any{"index": ch["index"], "text": "", "logprobs": nil, "finish_reason": ch["finish_reason"], "stop_reason": ch["stop_reason"]}}})
	}
	writeDataFrames(w, frames)
}
