package vllm

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// sseWriter batches SSE frames: with zero latency everything goes out in
// large writes; with a timing model each event is flushed on its own.
type sseWriter struct {
	w     http.ResponseWriter
	f     http.Flusher
	buf   []byte
	eager bool
}

func (s *sseWriter) frame(payload []byte) {
	s.buf = append(s.buf, "data: "...)
	s.buf = append(s.buf, payload...)
	s.buf = append(s.buf, "\n\n"...)
	if s.eager || len(s.buf) >= 32<<10 {
		s.flush()
	}
}

func (s *sseWriter) flush() {
	if len(s.buf) == 0 {
		return
	}
	_, _ = s.w.Write(s.buf)
	if s.f != nil {
		s.f.Flush()
	}
	s.buf = s.buf[:0]
}

func startSSE(w http.ResponseWriter, buf []byte, eager bool) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sseWriter{w: w, f: f, buf: buf, eager: eager}
}

// writeStream streams a job's tokens as chat or completion chunks.
func (s *Server) writeStream(ctx context.Context, w http.ResponseWriter, j *job, o *outcome) {
	bp := s.getBuf()
	cb := s.getBuf()
	defer s.putBuf(bp)
	defer s.putBuf(cb)
	sse := startSSE(w, (*bp)[:0], o.itl > 0)
	defer func() { *bp = sse.buf[:0] }()
	n := len(o.gen.ids)
	chunk := (*cb)[:0]
	if j.chat {
		chunk = s.appendChatHead(chunk[:0], j)
		chunk = append(chunk, `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
		if j.continuousUsage {
			chunk = append(chunk, `,"usage":`...)
			chunk = appendUsage(chunk, len(j.promptIDs), 0)
			chunk = append(chunk, '}')
		}
		chunk = append(chunk, `,"prompt_token_ids":`...)
		if j.returnTokenIDs {
			chunk = appendInts(chunk, j.promptIDs)
		} else {
			chunk = append(chunk, "null"...)
		}
		chunk = append(chunk, `,"prompt_text":null}`...)
		sse.frame(chunk)
	}
	dropAt, stallAt, truncAt, errAt := -1, -1, -1, -1
	switch j.fault {
	case FaultStreamError:
		errAt = n / 2
	case FaultDropMidStream:
		dropAt = n / 2
	case FaultStall:
		stallAt = n / 2
	case FaultTruncatedJSON:
		truncAt = n / 2
	}
	pendingFrom := 0 // first token not yet reported in a chunk
	callNamed := make([]bool, len(o.parsed.calls))
	// Token i is due at first + i×ITL: sleeping to deadlines rather than
	// for ITL each keeps a loaded machine's timer overshoot from adding up,
	// so a stream takes as long as the non-streamed reply's one sleep.
	first := time.Now()
	for i := 0; i < n; i++ {
		if i > 0 && o.itl > 0 {
			sse.flush()
			if err := s.sleep(ctx, time.Until(first.Add(time.Duration(i)*o.itl))); err != nil {
				s.finishRecord(j, o, "abort")
				return
			}
		}
		if i == dropAt {
			sse.flush()
			s.finishRecord(j, o, "abort")
			panic(http.ErrAbortHandler)
		}
		if i == errAt {
			// vLLM's in-stream error: Python json.dumps spacing, then [DONE].
			sse.frame([]byte(`{"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}`))
			sse.frame([]byte("[DONE]"))
			sse.flush()
			s.finishRecord(j, o, "abort")
			return
		}
		if i == stallAt {
			sse.flush()
			s.finishRecord(j, o, "abort")
			s.stall(ctx)
		}
		last := i == n-1
		var ok bool
		if j.chat {
			chunk, ok = s.appendChatChunk(chunk[:0], j, o, pendingFrom, i, last, callNamed)
		} else {
			chunk, ok = s.appendCompletionChunk(chunk[:0], j, o, pendingFrom, i, last)
		}
		if !ok {
			continue
		}
		pendingFrom = i + 1
		if i == truncAt {
			chunk = chunk[:len(chunk)/2]
		}
		sse.frame(chunk)
	}
	if j.includeUsage {
		chunk = chunk[:0]
		if j.chat {
			chunk = s.appendChatHead(chunk, j)
		} else {
			chunk = s.appendCompletionHead(chunk, j)
		}
		chunk = append(chunk, `"choices":[],"usage":`...)
		chunk = appendUsage(chunk, len(j.promptIDs), n)
		if j.mode.reasoning {
			chunk = append(chunk, `,"completion_tokens_details":{"reasoning_tokens":`...)
			chunk = strconv.AppendInt(chunk, int64(o.reasonN), 10)
			chunk = append(chunk, '}')
		}
		chunk = append(chunk, `},"system_fingerprint":`...)
		chunk = appendJSONString(chunk, s.fingerprint)
		chunk = append(chunk, '}')
		sse.frame(chunk)
	}
	// The ground truth is in the ledger before the stream's last byte, as a
	// whole reply's is before it is written: a client that reads [DONE] and
	// asks for the ledger at once must find the generation.
	s.finishRecord(j, o, o.finish)
	sse.frame([]byte("[DONE]"))
	sse.flush()
	*cb = chunk[:0]
}

func (s *Server) appendChatHead(b []byte, j *job) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, j.id)
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, j.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, s.model)
	return append(b, ',')
}

func overlap(a, b, lo, hi int) (int, int, bool) {
	x, y := max(a, lo), min(b, hi)
	return x, y, x < y
}

// appendChatChunk builds the chunk for token i (carrying tokens from
// pendingFrom that produced no chunk). ok is false when vLLM would send
// nothing for this token.
func (s *Server) appendChatChunk(b []byte, j *job, o *outcome, pendingFrom, i int, last bool, callNamed []bool) ([]byte, bool) {
	p := &o.parsed
	a, e := o.offsets[i], o.offsets[i+1]
	var delta []byte
	delta = append(delta, '{')
	hasAny := false
	forced := j.toolChoice == "named" || j.toolChoice == "required"
	if !forced {
		if x, y, ok := overlap(a, e, p.contentStart, p.contentEnd); ok {
			delta = append(delta, `"content":`...)
			delta = appendJSONString(delta, p.visible[x:y])
			hasAny = true
		}
		if p.hasReasoning && j.includeReasoning {
			if x, y, ok := overlap(a, e, p.reasonStart, p.reasonEnd); ok {
				if hasAny {
					delta = append(delta, ',')
				}
				delta = append(delta, `"reasoning":`...)
				delta = appendJSONString(delta, p.visible[x:y])
				hasAny = true
			}
		}
	}
	var tools []byte
	if forced {
		if last {
			tools = s.appendForcedToolDeltas(tools, j, o)
		}
	} else {
		for ci, c := range p.calls {
			if !callNamed[ci] && c.nameEnd > a && c.nameEnd <= e {
				callNamed[ci] = true
				if len(tools) > 0 {
					tools = append(tools, ',')
				}
				tools = append(tools, `{"id":`...)
				tools = appendJSONString(tools, c.id)
				tools = append(tools, `,"type":"function","index":`...)
				tools = strconv.AppendInt(tools, int64(ci), 10)
				tools = append(tools, `,"function":{"name":`...)
				tools = appendJSONString(tools, c.name)
				tools = append(tools, "}}"...)
			}
			if x, y, ok := overlap(a, e, c.argStart, c.argEnd); ok && callNamed[ci] {
				if len(tools) > 0 {
					tools = append(tools, ',')
				}
				tools = append(tools, `{"index":`...)
				tools = strconv.AppendInt(tools, int64(ci), 10)
				tools = append(tools, `,"function":{"arguments":`...)
				tools = appendJSONString(tools, p.visible[x:y])
				tools = append(tools, "}}"...)
			}
		}
	}
	if len(tools) > 0 {
		if !hasAny {
			delta = append(delta, `"content":null,`...)
		} else {
			delta = append(delta, ',')
		}
		delta = append(delta, `"tool_calls":[`...)
		delta = append(delta, tools...)
		delta = append(delta, ']')
		hasAny = true
	}
	if !hasAny && last && len(p.calls) == 0 && !forced {
		delta = append(delta, `"content":""`...)
		hasAny = true
	}
	delta = append(delta, '}')
	if !hasAny && !last && !j.returnTokenIDs {
		return b, false
	}
	b = s.appendChatHead(b, j)
	b = append(b, `"choices":[{"index":0,"delta":`...)
	b = append(b, delta...)
	b = append(b, `,"logprobs":`...)
	if o.logprobs {
		b = append(b, `{"content":[`...)
		b = s.appendChatLogprobs(b, j, o, pendingFrom, i+1)
		b = append(b, "]}"...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"finish_reason":`...)
	if last {
		b = appendJSONString(b, o.finish)
		b = append(b, `,"stop_reason":`...)
		b = append(b, o.stopReason...)
	} else {
		b = append(b, "null"...)
	}
	return s.appendChunkTail(b, j, o, pendingFrom, i, last), true
}

// appendForcedToolDeltas sends guided-decoding tool calls whole at the end.
func (s *Server) appendForcedToolDeltas(b []byte, j *job, o *outcome) []byte {
	for ci, c := range s.constrainedCalls(j, o) {
		if ci > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, c.id)
		b = append(b, `,"type":"function","index":`...)
		b = strconv.AppendInt(b, int64(ci), 10)
		b = append(b, `,"function":{"name":`...)
		b = appendJSONString(b, c.name)
		b = append(b, `,"arguments":`...)
		b = appendJSONString(b, c.arguments)
		b = append(b, "}}"...)
	}
	return b
}

// appendChunkTail closes a streamed chunk's choice with its token ids, then
// adds the per-chunk usage and, on the last chunk without a usage chunk to
// follow, the system fingerprint. Chat and completions chunks end alike.
func (s *Server) appendChunkTail(b []byte, j *job, o *outcome, pendingFrom, i int, last bool) []byte {
	b = append(b, `,"token_ids":`...)
	if j.returnTokenIDs {
		b = appendInts(b, o.gen.ids[pendingFrom:i+1])
	} else {
		b = append(b, "null"...)
	}
	b = append(b, "}]"...)
	if j.continuousUsage {
		b = append(b, `,"usage":`...)
		b = appendUsage(b, len(j.promptIDs), i+1)
		b = append(b, '}')
	}
	if last && !j.includeUsage {
		b = append(b, `,"system_fingerprint":`...)
		b = appendJSONString(b, s.fingerprint)
	}
	return append(b, '}')
}
