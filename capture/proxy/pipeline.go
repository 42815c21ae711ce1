package proxy

import (
	"bufio"
	"net/http"
)

// modelCall is one model call of a dialect once its request has been read:
// the engine request and how the dialect answers. Every generating route
// runs through runCall (begin_call, the engine exchange, streaming or not,
// the failure rules, the commit); the dialects differ only in how they read
// a request into a modelCall and in the reply functions below.
type modelCall struct {
	path     string         // engine route: pathChat or pathCompletions
	out      map[string]any // the engine request
	stream   bool           // the client asked for a stream
	errw     errorWriter
	passBody bool // OpenAI dialects pass upstream error bodies through

	// sink writes a streamed reply as the engine generates it; nil means
	// the dialect always answers from the complete reply.
	sink func(bw *bufio.Writer) streamSink
	// commitStream records the completion rebuilt from a stream.
	commitStream func(resp map[string]any, tok *tokenInfo, tokErr error)
	// reply records (on the capture path) and answers the engine's complete
	// reply, as JSON or as a synthetic stream.
	reply func(w http.ResponseWriter, resp map[string]any, tok *tokenInfo, tokErr error)
}

// runCall runs a model call through the capture pipeline.
func (p *Proxy) runCall(w http.ResponseWriter, r *http.Request, cc *callCtx, mc *modelCall) {
	ctx := r.Context()
	defer cc.resolved() // no resolution outlives its handler
	streamed := mc.stream && mc.sink != nil && !p.opts.BufferedStreams
	if err := p.begin(ctx, cc, streamed); err != nil {
		writeExchangeError(w, err, mc.errw, mc.passBody)
		return
	}
	if cc.intent != nil {
		gate := &intentGate{ResponseWriter: w, cc: cc, errw: mc.errw}
		w = gate
		// A handler that wrote nothing still answers (net/http's empty
		// 200): the intent is settled first.
		defer gate.open()
	}
	if streamed {
		p.streamCall(w, r, cc, streamSpec{out: mc.out, errw: mc.errw, passBody: mc.passBody, sink: mc.sink, commit: mc.commitStream})
		return
	}
	// The buffered path asks the engine for the complete reply.
	delete(mc.out, "stream")
	delete(mc.out, "stream_options")
	resp, tok, tokErr, err := p.exchange(ctx, cc, mc.path, mc.out)
	if err != nil {
		writeExchangeError(w, err, mc.errw, mc.passBody)
		return
	}
	mc.reply(w, resp, tok, tokErr)
}
