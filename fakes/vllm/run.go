package vllm

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// outcome is a finished generation plus everything derived for the response.
type outcome struct {
	gen generation
	// visible is the tokens' text without special tokens; offsets[i] is
	// where token i's piece of it starts (len n+1), held-back bytes of an
	// incomplete character counting to the token that completes it.
	visible string
	offsets []int
	parsed  parsedOutput
	finish  string // API finish_reason
	// stopReason is the JSON of stop_reason: null, a token id or a string.
	stopReason string
	reasonN    int // tokens inside the reasoning span
	start      time.Time
	queued     time.Duration
	ttft       time.Duration
	itl        time.Duration
	release    release // the scheduler slot, handed back once
	logprobs   bool
}

// serveJob runs a validated job: fault, scheduling, timing, response, ledger.
func (s *Server) serveJob(w http.ResponseWriter, r *http.Request, j *job) {
	ctx := r.Context()
	switch j.fault {
	case Fault500:
		writeAPIError(w, &apiError{Status: http.StatusInternalServerError, Type: "InternalServerError", Message: "Internal server error"})
		return
	case FaultStreamError:
		if !j.stream {
			writeAPIError(w, &apiError{Status: http.StatusInternalServerError, Type: "InternalServerError", Message: "Internal server error"})
			return
		}
	case Fault503:
		writeAPIError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "ServiceUnavailableError", Message: "The server is overloaded or not ready yet."})
		return
	}
	out, err := s.execute(ctx, j)
	if err != nil {
		return // client went away while queued
	}
	defer out.release.do()
	if j.stream {
		s.writeStream(ctx, w, j, out)
	} else {
		s.writeWhole(ctx, w, j, out)
	}
}

// execute generates, waits for a scheduler slot and the prefill delay.
func (s *Server) execute(ctx context.Context, j *job) (*outcome, error) {
	start := time.Now()
	g := s.eng.generate(genInput{promptIDs: j.promptIDs, seed: j.seed, maxTokens: j.maxTokens, turn: j.turn, forcedText: j.forced})
	o := &outcome{gen: g, start: start}
	if err := s.sched.acquire(ctx, len(j.promptIDs)+len(g.ids), &o.release); err != nil {
		return nil, err
	}
	o.queued = time.Since(start)
	o.logprobs = j.logprobs && j.fault != FaultNoLogprobs
	o.ttft, o.itl = s.delays(len(j.promptIDs))
	o.stopReason = "null"
	o.visible, o.offsets = s.tokenPieces(g.ids)
	s.applyStops(j, o)
	o.parsed = parseOutput(o.visible, j.mode)
	o.finish = o.gen.finish
	if j.chat {
		o.finish = s.apiFinish(j, o)
	}
	if o.parsed.hasReasoning {
		for i := range o.gen.ids {
			if o.offsets[i+1] <= o.parsed.reasonEnd {
				o.reasonN++
			}
		}
	}
	if err := s.sleep(ctx, o.ttft); err != nil {
		o.release.do()
		return nil, err
	}
	return o, nil
}

func (s *Server) apiFinish(j *job, o *outcome) string {
	switch j.toolChoice {
	case "required":
		if o.gen.finish == "stop" {
			return "tool_calls"
		}
	case "auto":
		if len(o.parsed.calls) > 0 && (!j.stream || o.gen.finish == "stop") {
			return "tool_calls"
		}
	}
	return o.gen.finish
}

// tokenPieces maps tokens to visible text, holding back bytes of an
// incomplete UTF-8 character until the token that completes it; it returns
// the text and where each token's piece of it starts.
func (s *Server) tokenPieces(ids []int) (string, []int) {
	offsets := make([]int, len(ids)+1)
	var b strings.Builder
	b.Grow(6*len(ids) + 8) // a generated token averages under 6 bytes
	var pending []byte
	for i, id := range ids {
		if id < s.minSpecial || !s.tok.IsSpecial(id) {
			if t := s.tok.TokenString(id); len(pending) == 0 && utf8.ValidString(t) {
				b.WriteString(t)
			} else {
				pending = append(pending, t...)
				if cut := completeUTF8Prefix(pending); cut > 0 {
					b.Write(pending[:cut])
					pending = append(pending[:0], pending[cut:]...)
				}
			}
		}
		offsets[i+1] = b.Len()
	}
	if len(pending) > 0 && len(ids) > 0 { // bytes that never formed a character
		b.Write(pending)
		offsets[len(ids)] = b.Len()
	}
	return b.String(), offsets
}

// completeUTF8Prefix returns the length of the longest prefix of b that
// does not end inside a multi-byte character.
func completeUTF8Prefix(b []byte) int {
	n := len(b)
	for k := 1; k <= 3 && k <= n; k++ {
		c := b[n-k]
		if c < 0x80 {
			return n
		}
		if c >= 0xC0 { // lead byte: is the character complete?
			need := 2
			if c >= 0xF0 {
				need = 4
			} else if c >= 0xE0 {
				need = 3
			}
			if k >= need {
				return n
			}
			return n - k
		}
	}
	return n
}

// delays returns the simulated TTFT and inter-token latency for a request,
// slowed by the current batch size and scaled by TimeScale.
func (s *Server) delays(promptLen int) (ttft, itl time.Duration) {
	t := s.opts.Timing
	ttft = t.TTFT
	if t.PrefillTokensPerSecond > 0 {
		ttft += time.Duration(float64(promptLen) / t.PrefillTokensPerSecond * float64(time.Second))
	}
	itl = t.InterTokenLatency
	if t.DecodeTokensPerSecond > 0 {
		itl = time.Duration(float64(time.Second) / t.DecodeTokensPerSecond)
	}
	if ttft == 0 && itl == 0 {
		return 0, 0
	}
	running, _ := s.sched.counts()
	f := (1 + t.BatchSlowdown*float64(max(running-1, 0))) * t.TimeScale
	return time.Duration(float64(ttft) * f), time.Duration(float64(itl) * f)
}

func (s *Server) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return http.ErrServerClosed
	}
}

// stall holds a request until the stall deadline, the client or the server
// gives up, then aborts the connection.
func (s *Server) stall(ctx context.Context) {
	var deadline <-chan time.Time
	if d := s.opts.Faults.Stall; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		deadline = t.C
	}
	select {
	case <-ctx.Done():
	case <-s.closing:
	case <-deadline:
	}
	panic(http.ErrAbortHandler)
}

// finishRecord updates metrics and appends the ledger entry.
func (s *Server) finishRecord(j *job, o *outcome, finish string) {
	total := time.Since(o.start)
	scale := s.opts.Timing.TimeScale
	simulated := func(d time.Duration) float64 { return d.Seconds() / scale }
	engineFinish := o.gen.finish
	if finish == "abort" {
		engineFinish = "abort"
	}
	s.metrics.observe(requestTimes{
		queue: simulated(o.queued), prefill: simulated(o.ttft), decode: simulated(max(total-o.queued-o.ttft, 0)),
		promptTokens: len(j.promptIDs), genTokens: len(o.gen.ids), maxTokens: j.maxTokensSeen, finish: engineFinish,
	})
	s.ledger.add(LedgerEntry{
		RequestID: j.id, Model: s.model, PromptTokenIDs: j.promptIDs, GeneratedTokenIDs: o.gen.ids,
		LogProbs: o.gen.logprobs, FinishReason: finish, Created: time.Unix(j.created, 0),
	})
}

func appendUsage(b []byte, prompt, completion int) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	return b
}

// applyStops ends the generation at the first stop token id or stop string,
// as vLLM's stop checker does: the tokens up to the match are kept, the
// finish reason becomes "stop" and stop_reason names what matched.
func (s *Server) applyStops(j *job, o *outcome) {
	g := &o.gen
	cut := -1
	for i, id := range g.ids {
		if i == len(g.ids)-1 && id == s.eng.eos {
			break // the primary EOS keeps stop_reason null
		}
		if containsInt(j.stopTokenIDs, id) {
			cut = i + 1
			o.stopReason = strconv.Itoa(id)
			break
		}
	}
	textCut := -1
	if len(j.stops) > 0 {
		for i := range g.ids {
			if cut >= 0 && i >= cut {
				break
			}
			for _, st := range j.stops {
				// Only a match that the newest token completed ends generation here.
				from := max(0, o.offsets[i]-len(st)+1)
				if k := strings.Index(o.visible[from:o.offsets[i+1]], st); k >= 0 {
					cut = i + 1
					textCut = from + k
					if j.includeStop {
						textCut += len(st)
					}
					o.stopReason = string(appendJSONString(nil, st))
					break
				}
			}
			if textCut >= 0 {
				break
			}
		}
	}
	if cut < 0 {
		return
	}
	g.ids = g.ids[:cut]
	g.logprobs = g.logprobs[:cut]
	g.finish = "stop"
	o.offsets = o.offsets[:cut+1]
	if textCut >= 0 { // the text ends at the stop string, within a token's piece
		for i := range o.offsets {
			o.offsets[i] = min(o.offsets[i], textCut)
		}
	}
	o.visible = o.visible[:o.offsets[cut]]
}
