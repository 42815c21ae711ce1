package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
)

// apiName is the metrics label of an API path.
func apiName(path string) string {
	switch path {
	case pathChat:
		return "chat"
	case pathCompletions:
		return "completions"
	case pathResponses:
		return "responses"
	case pathMessages:
		return "messages"
	default:
		return "other"
	}
}

// readBody reads a bounded request body, answering 413 when it is too large.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, errw errorWriter) ([]byte, bool) {
	raw, err := readAllSized(http.MaxBytesReader(w, r.Body, p.opts.MaxBodyBytes), r.ContentLength, p.opts.MaxBodyBytes)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		errw(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body exceeds the proxy's limit of %d bytes", p.opts.MaxBodyBytes))
		return nil, false
	}
	if err != nil {
		errw(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return nil, false
	}
	return raw, true
}

// serveDialect handles the four generating routes.
func (p *Proxy) serveDialect(w http.ResponseWriter, r *http.Request, rt route) {
	api := apiName(rt.APIPath)
	errw := errorWriter(writeOpenAIError)
	if rt.APIPath == pathMessages {
		errw = writeAnthropicError
	}
	mode := modePlain
	switch {
	case rt.Training && p.opts.Store != nil:
		mode = modeTraining
	case rt.RolloutID != "":
		mode = modeSummary
	}
	p.metrics.calls.WithLabelValues(api, mode).Inc()
	cc := &callCtx{rt: rt, api: api, capture: mode == modeTraining, hdr: r.Header}
	if rt.RolloutID != "" {
		cc.callID = newCallID()
	}
	cc.log = p.log
	if logsAnything(r.Context(), p.log) { // With copies the attributes: a logger that logs nothing needs none
		cc.log = p.log.With("api", api, "mode", mode, "rollout_id", rt.RolloutID, "model_call_id", cc.callID)
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		cc.log.Info("call done", "status", sw.status, "duration_ms", float64(time.Since(start).Microseconds())/1000)
	}()

	if !jsonContentType(r) {
		writeValidationError(sw, rt.APIPath == pathMessages, mediaTypeMessage, "")
		return
	}
	raw, ok := p.readBody(sw, r, errw)
	if !ok {
		return
	}
	// Chat and completions outside training capture are relayed as they
	// are (streaming included); only the sampling pin is applied.
	if !cc.capture && (rt.APIPath == pathChat || rt.APIPath == pathCompletions) {
		if len(p.opts.SamplingOverrides) > 0 || p.opts.Model != "" {
			body, err := decodeObject(raw)
			if err != nil {
				errw(sw, http.StatusBadRequest, "request body is not a JSON object: "+err.Error())
				return
			}
			req := newRawObject(raw, body)
			p.applyOverrides(body, rt.APIPath == pathCompletions)
			p.overrideModel(body)
			if raw, err = req.encode(body); err != nil {
				errw(sw, http.StatusInternalServerError, err.Error())
				return
			}
		}
		p.forward(sw, r, rt.APIPath, bytes.NewReader(raw))
		return
	}
	lazy := ""
	var head []byte
	if cc.capture && len(raw) >= resolveAheadBytes {
		switch rt.APIPath {
		case pathChat:
			lazy = "messages" // read by the resolution beside the engine call (requestItemsOf)
		case pathMessages:
			lazy = "messages" // decoded after the rollout's previous request (messagesAfter)
		}
		head = p.previousList(rt.RolloutID)
	}
	body, members, err := decodeObjectMembers(raw, lazy, head)
	if err != nil {
		errw(sw, http.StatusBadRequest, "request body is not a JSON object: "+err.Error())
		return
	}
	if _, err := streamFlag(body["stream"]); err != nil {
		writeValidationError(sw, rt.APIPath == pathMessages, streamValidationMessage(body["stream"]), "body.stream")
		return
	}
	cc.raw = raw
	cc.members = members
	if rt.APIPath == pathChat || rt.APIPath == pathCompletions {
		if members != nil {
			cc.req = rawObjectOf(body, members)
		} else { // encoding/json decoded it: split the members out
			cc.req = newRawObject(raw, body)
		}
	}
	switch rt.APIPath {
	case pathChat:
		p.handleChat(sw, r, cc, body)
	case pathCompletions:
		p.handleCompletions(sw, r, cc, body)
	case pathResponses:
		p.handleResponses(sw, r, cc, body)
	case pathMessages:
		p.handleMessages(sw, r, cc, body)
	}
}

// statusWriter remembers the status for the call log line.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// requestItems computes the lineage request items; a body lineage cannot
// read leaves no items and an UNRESOLVED lookup_error decision.
func (p *Proxy) requestItems(cc *callCtx, d lineage.Dialect, body map[string]any) {
	if !cc.capture {
		return
	}
	items, err := lineage.RequestItems(d, body)
	if err != nil {
		cc.log.Warn("request items could not be read for lineage", "err", err)
		cc.items = nil
		cc.itemsErr = true
		cc.decision = lineage.Decision{Resolution: record.ResolutionUnresolved, Reason: lineage.ReasonLookupError}
		return
	}
	cc.items = items
}

// requestItemsOf is requestItems, which waits for the parent resolution
// when body holds undecoded members: the items are then read where the
// resolution runs, beside the engine call.
func (p *Proxy) requestItemsOf(cc *callCtx, d lineage.Dialect, body map[string]any) {
	if !cc.capture {
		return
	}
	for _, v := range body {
		if _, ok := v.(*lazyValue); ok {
			cc.readItems = func(prev *conversationMemo) { p.readLazyItems(cc, d, body, prev) }
			return
		}
	}
	p.requestItems(cc, d, body)
}

// checkN rejects n > 1 on the capture path (docs/capture-path.md#one-captured-call-in-order).
func checkN(body map[string]any) error {
	v, ok := body["n"]
	if !ok || v == nil {
		return nil
	}
	n, err := asInt(v)
	if err != nil || n != 1 {
		return fmt.Errorf("n must be absent or 1 when capturing training tokens, got %v", v)
	}
	return nil
}

// streamRequested reads the client's stream flag (validated by
// serveDialect, with vLLM's lax boolean rules).
func streamRequested(body map[string]any) bool {
	b, _ := streamFlag(body["stream"])
	return b
}

// cloneMap copies the top level of a request before it is rewritten.
func cloneMap(m map[string]any) map[string]any { return maps.Clone(m) }

// sseHeaders prepares an SSE reply.
func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

// nonEmptyString returns v as a string when it is one and not empty.
func nonEmptyString(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok && s != ""
}

// textOf flattens a content value (string or list of text parts) to text.
func textOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var b strings.Builder
		for _, part := range x {
			switch pt := part.(type) {
			case string:
				b.WriteString(pt)
			case map[string]any:
				if s, ok := pt["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	default:
		return ""
	}
}

// logsAnything reports whether l logs at any level a call logs at.
func logsAnything(ctx context.Context, l *slog.Logger) bool {
	for _, lv := range [...]slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if l.Enabled(ctx, lv) {
			return true
		}
	}
	return false
}
