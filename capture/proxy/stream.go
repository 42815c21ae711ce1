package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Streaming pass-through (docs/streaming.md): a client that asks for a
// stream gets each engine chunk, translated into its dialect, as the engine
// sends it; the record is committed from the accumulated chunks when the
// stream ends, before the client's stream is closed. Options.BufferedStreams
// keeps NeMo Gym's behaviour instead: one non-streaming engine call, then a
// synthetic stream.

// streamSink is what a dialect does with a streamed generation.
type streamSink interface {
	// chunk writes one engine chunk (raw, decoded) in the dialect.
	chunk(raw []byte, c map[string]any) error
	// end writes the closing events; the record is already committed.
	end(resp map[string]any) error
	// failed writes the dialect's in-stream error for the engine's error
	// frame (raw) with its message.
	failed(raw []byte, message string) error
}

// streamSpec is one streamed call: the upstream request and what to do with
// its chunks and its assembled completion.
type streamSpec struct {
	out      map[string]any // the chat request to send (stream fields are set here)
	errw     errorWriter
	passBody bool // OpenAI dialects pass upstream error bodies through
	sink     func(bw *bufio.Writer) streamSink
	// commit records the assembled completion (capture path only).
	commit func(resp map[string]any, tok *tokenInfo, tokErr error)
}

// streamCall runs one streamed call after begin_call.
func (p *Proxy) streamCall(w http.ResponseWriter, r *http.Request, cc *callCtx, sp streamSpec) {
	ctx := r.Context()
	out := sp.out
	p.prepareUpstream(cc, out, false)
	out["stream"] = true
	if cc.capture {
		out["return_token_ids"] = true
	}
	// The usage chunk tells whether a reasoning parser is on (its
	// reasoning_tokens count), which decides how vLLM answers an empty
	// content; the chat sink hides it from clients that did not ask.
	so := map[string]any{}
	if m, ok := out["stream_options"].(map[string]any); ok {
		for k, v := range m {
			so[k] = v
		}
	}
	so["include_usage"] = true
	out["stream_options"] = so
	body, err := cc.req.encodeSized(out, len(cc.raw)+512)
	if err != nil {
		p.streamFailedEarly(ctx, w, cc, sp, fmt.Errorf("encoding the upstream request: %w", err))
		return
	}
	start := time.Now()
	upCtx, cancelUp := context.WithCancel(ctx)
	defer cancelUp()
	resp, err := p.openStream(upCtx, cc.hdr, body)
	if err != nil {
		p.streamFailedEarly(ctx, w, cc, sp, err)
		return
	}
	resp.Body = newIdleBody(resp.Body, p.opts.Limits.StreamIdleTimeout, cancelUp)
	defer resp.Body.Close()
	rd, err := decodedReader(resp)
	if err != nil {
		p.streamFailedEarly(ctx, w, cc, sp, &transportError{err})
		return
	}
	sseHeaders(w)
	flusher, _ := w.(http.Flusher)
	bw := bufio.NewWriterSize(w, 16*1024)
	sink := sp.sink(bw)
	acc := &chatAccumulator{}
	br := bufio.NewReaderSize(rd, 64*1024)
	cut := func(reason string, cause error) {
		p.metrics.upstreamLatency.Observe(time.Since(start).Seconds())
		if cc.capture {
			p.markIncomplete(ctx, cc, reason, cause)
		}
		cc.log.Warn("engine stream failed; cutting the client's stream", "err", cause)
		if bw.Flush() == nil && flusher != nil {
			flusher.Flush()
		}
		// Ending the handler would close the chunked body cleanly, which a
		// client reads as a complete reply.
		panic(http.ErrAbortHandler)
	}
	for {
		data, err := nextSSEData(br)
		if idle := (*errStreamIdle)(nil); errors.As(err, &idle) {
			// A stalled engine gets the dialect's in-stream error, so an
			// SDK raises it, then the cut, so no client reads a clean end.
			_ = sink.failed(idleErrorFrame(idle), idle.Error())
			cut("upstream_timeout", idle)
		}
		if err != nil {
			cut("upstream_error", fmt.Errorf("reading the engine's stream: %w", err))
		}
		if bytes.Equal(data, doneMarker) {
			break
		}
		var c map[string]any
		if cc.capture { // the chunk that carries the prompt ids hands their text to the record
			c, err = decodeChatReplyText(data, &cc.prompt)
		} else {
			c, err = decodeChatReply(data)
		}
		if err != nil {
			cut("upstream_error", fmt.Errorf("engine chunk is not a JSON object: %w", err))
		}
		if e, ok := c["error"]; ok && e != nil {
			ue := &upstreamError{Status: http.StatusOK, Body: data}
			if cc.capture {
				p.markIncomplete(ctx, cc, "upstream_error", ue)
			}
			cc.log.Warn("engine failed the stream", "err", ue)
			_ = sink.failed(data, ue.message())
			_ = bw.Flush()
			return
		}
		acc.add(c)
		if err := sink.chunk(data, c); err != nil {
			cut("capture_error", err)
		}
		if br.Buffered() == 0 {
			// Nothing more is waiting: hand what we have to the client now.
			if bw.Flush() != nil {
				cut("client_gone", errors.New("the client went away"))
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
	p.metrics.upstreamLatency.Observe(time.Since(start).Seconds())
	assembled := acc.completion(out)
	if cc.capture && sp.commit != nil {
		tokenize := func(ctx context.Context, sub map[string]any) ([]int, error) { return p.tokenizeReq(ctx, cc.req, sub) }
		tok, tokErr := readChatTokens(ctx, assembled, out, tokenize)
		sp.commit(assembled, tok, tokErr)
	}
	if err := sink.end(assembled); err != nil {
		cc.log.Warn("writing the end of the stream failed", "err", err)
	}
	_ = bw.Flush()
}

// streamFailedEarly answers a stream that failed before its first byte the
// way the buffered path answers a failed exchange.
func (p *Proxy) streamFailedEarly(ctx context.Context, w http.ResponseWriter, cc *callCtx, sp streamSpec, err error) {
	if cc.capture {
		p.markIncomplete(ctx, cc, "upstream_error", err)
	}
	cc.log.Warn("upstream call failed", "err", err)
	writeExchangeError(w, err, sp.errw, sp.passBody)
}

// openStream posts a streaming chat request; a non-2xx answer is an
// *upstreamError, a failure to connect a *transportError.
func (p *Proxy) openStream(ctx context.Context, hdr http.Header, body []byte) (*http.Response, error) {
	req, err := p.upstreamPost(ctx, pathChat, hdr, body, "text/event-stream")
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, &transportError{err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		raw, rerr := readDecoded(resp)
		if rerr != nil {
			return nil, &transportError{fmt.Errorf("reading upstream reply: %w", rerr)}
		}
		return nil, &upstreamError{Status: resp.StatusCode, Body: raw, ContentType: resp.Header.Get("Content-Type")}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, &transportError{fmt.Errorf("the engine answered a streaming request with %q, not an event stream", ct)}
	}
	return resp, nil
}

var doneMarker = []byte("[DONE]")

// idleErrorFrame is vLLM's in-stream error shape carrying a stall's message.
func idleErrorFrame(e *errStreamIdle) []byte {
	msg, _ := json.Marshal(e.Error()) // a string always marshals
	b := append([]byte(`{"error": {"message": `), msg...)
	return append(b, `, "type": "GatewayTimeout", "param": null, "code": 504}}`...)
}

// maxSSELine bounds one engine event (a chunk with thousands of prompt ids
// fits easily).
const maxSSELine = 64 << 20

// nextSSEData returns the data of the next SSE event (lines joined with
// "\n", as the SSE format says); io.ErrUnexpectedEOF when the stream ends
// without [DONE].
func nextSSEData(br *bufio.Reader) ([]byte, error) {
	var data []byte
	have := false
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(line) == 0 {
			if have {
				return data, nil
			}
			continue
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if have {
				data = append(data, '\n')
			}
			data = append(data, v...)
			have = true
		}
		// event:, id:, retry: and comments carry nothing the proxy needs.
	}
}

// readLine reads one line without its line ending.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		buf := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = br.ReadSlice('\n')
			buf = append(buf, line...)
			if len(buf) > maxSSELine {
				return nil, fmt.Errorf("an engine event exceeds %d bytes", maxSSELine)
			}
		}
		line = buf
	}
	if err != nil {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}
