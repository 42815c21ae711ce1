package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// reply is one model reply, dialect-neutral.
type reply struct {
	ID         string
	Text       string
	Reasoning  string
	ToolCalls  []toolCall
	StopReason string
	// GenTokenIDs and GenLogProbs are the reply's own token ids, read from
	// the log-probs a NativeTokens agent asked for.
	GenTokenIDs []int
	GenLogProbs []float64
}

type toolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text
}

// CallError is a model call answered with a non-2xx status or a broken body.
type CallError struct {
	Status int
	Body   string
}

func (e *CallError) Error() string {
	if e.Status == 0 {
		return "model call failed: " + e.Body
	}
	return fmt.Sprintf("model call failed with HTTP %d: %s", e.Status, e.Body)
}

// Unwrap lets callers test with errors.Is(err, ErrModelCall).
func (e *CallError) Unwrap() error { return ErrModelCall }

// convState is one conversation's running history in the dialect's shape.
type convState struct {
	name     string
	conv     Conversation
	script   string
	tools    []Tool
	messages []map[string]any
	calls    int // calls sent in this conversation (for dialect quirks)
	subagent bool
}

// dialect is the wire format of one agent kind.
type dialect interface {
	url(base, rolloutID string) string
	headers(h http.Header, s *convState, sessionID string)
	body(s *convState, p *Plan) ([]byte, error)
	read(resp *http.Response, stream bool) (*reply, error)
	start(s *convState)
	assistant(r *reply, echoReasoning bool) map[string]any
	toolResults(calls []toolCall, outputs []string) []map[string]any
	user(text string) map[string]any
	defaultTools() []Tool
	stream(p *Plan) bool
}

type runner struct {
	kind      Kind
	target    Target
	plan      Plan
	d         dialect
	client    *http.Client
	sessionID string
	calls     []Call
}

func newRunner(k Kind, t Target, p Plan) *runner {
	var d dialect
	switch k {
	case ClaudeCode:
		d = &anthropicDialect{}
	case Custom:
		d = &chatDialect{omitTrainingSegment: true}
	default:
		d = &chatDialect{}
	}
	c := t.Client
	if c == nil {
		c = &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}}
	}
	sum := sha256.Sum256([]byte(t.CaptureKey()))
	h := hex.EncodeToString(sum[:16])
	session := h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
	return &runner{kind: k, target: t, plan: p, d: d, client: c, sessionID: session}
}

// transcript collects the record's Responses-shaped output items.
type transcript struct {
	items  []map[string]any
	lastID string
}

func (r *runner) run(ctx context.Context) *Result {
	res := &Result{}
	if r.plan.Probe {
		r.probe(ctx)
	}
	if r.plan.Title != nil {
		title := &convState{name: "title", conv: *r.plan.Title, script: r.plan.Title.Script, tools: []Tool{}}
		if _, err := r.converse(ctx, title, false, nil); err != nil {
			res.Err = fmt.Errorf("title call: %w", err)
		}
	}
	tools := r.plan.Tools
	if tools == nil {
		tools = r.d.defaultTools()
	}
	main := &convState{name: "main", conv: r.plan.Main, script: r.plan.Main.Script, tools: tools}
	tr := &transcript{items: []map[string]any{{
		"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": r.plan.Main.Task}},
	}}}
	if _, err := r.converse(ctx, main, true, tr); err != nil && res.Err == nil {
		res.Err = err
	}
	rec, err := plainJSON(r.record(tr))
	if err != nil && res.Err == nil {
		res.Err = err
	}
	res.Record = rec
	res.Calls = r.calls
	return res
}

// probe sends a HEAD request under the capture prefix, as the Claude Code
// CLI does; its answer (404/405 are normal) does not matter to the agent.
func (r *runner) probe(ctx context.Context) {
	u := strings.TrimRight(r.target.BaseURL, "/") + "/ng-rollout/" + r.target.CaptureKey() + "/training-token-capture/api/hello"
	call := Call{Conversation: "probe", URL: u, Attempt: 1}
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err == nil {
		req.Header.Set("User-Agent", "Bun/1.4.4")
		var resp *http.Response
		if resp, err = r.client.Do(req); err == nil {
			call.Status = resp.StatusCode
			resp.Body.Close()
		}
	}
	if err != nil {
		call.Error = err.Error()
	}
	call.Duration = time.Since(start)
	r.calls = append(r.calls, call)
}

func (r *runner) maxTurns() int {
	if r.plan.MaxTurns > 0 {
		return r.plan.MaxTurns
	}
	return 16
}

// converse runs one conversation until a reply without tool calls. It returns
// the final reply's text.
func (r *runner) converse(ctx context.Context, s *convState, isMain bool, tr *transcript) (string, error) {
	r.d.start(s)
	s.messages = append(s.messages, r.d.user(s.conv.Task))
	inline := r.plan.InlineSystem
	if !isMain {
		inline = nil
	}
	if inline != nil && inline.FromFirstCall {
		s.messages = append(s.messages, inlineSystemMessage(inline.Text))
		inline = nil
	}
	followUp := 0
	for turn := 0; ; turn++ {
		if turn >= r.maxTurns() {
			return "", fmt.Errorf("%w (%d calls)", ErrMaxTurns, turn)
		}
		rep, err := r.turn(ctx, s, turn, isMain)
		if err != nil {
			return "", err
		}
		s.messages = append(s.messages, r.d.assistant(r.echoed(rep), r.plan.EchoReasoning))
		if tr != nil {
			tr.addReply(rep)
		}
		if len(rep.ToolCalls) == 0 {
			if isMain && followUp < len(r.plan.FollowUps) {
				// A chat harness with another user question continues the
				// same conversation.
				q := r.plan.FollowUps[followUp]
				followUp++
				s.messages = append(s.messages, r.d.user(q))
				if tr != nil {
					tr.addUser(q)
				}
				continue
			}
			return rep.Text, nil
		}
		outputs := make([]string, len(rep.ToolCalls))
		for i, tc := range rep.ToolCalls {
			out, err := r.execute(ctx, tc, s)
			if err != nil {
				return "", err
			}
			outputs[i] = out
		}
		s.messages = append(s.messages, r.d.toolResults(rep.ToolCalls, outputs)...)
		if tr != nil {
			tr.addOutputs(rep.ToolCalls, outputs)
		}
		if inline != nil {
			// New from the next call on, and kept in the history after it.
			s.messages = append(s.messages, inlineSystemMessage(inline.Text))
			inline = nil
		}
		if isMain && r.plan.Compaction != nil && r.plan.Compaction.AfterTurn == turn {
			r.compact(s)
		}
	}
}

// compact rewrites the history: a summary user message replaces everything,
// optionally followed by the last assistant turn and its tool results.
func (r *runner) compact(s *convState) {
	c := r.plan.Compaction
	var kept []map[string]any
	if c.KeepLastAssistant {
		for i := len(s.messages) - 1; i >= 0; i-- {
			if s.messages[i]["role"] == "assistant" {
				kept = append(kept, s.messages[i:]...)
				break
			}
		}
	}
	r.d.start(s)
	s.messages = append(s.messages, r.d.user(c.Summary))
	s.messages = append(s.messages, kept...)
	if c.Script != "" {
		s.script = c.Script
	}
}

func (r *runner) execute(ctx context.Context, tc toolCall, parent *convState) (string, error) {
	if sa := r.plan.SubAgent; sa != nil && tc.Name == sa.Tool && !parent.subagent {
		sub := &convState{name: "subagent", conv: sa.Conversation, script: sa.Conversation.Script, subagent: true}
		sub.tools = subagentTools(parent.tools, sa.Tool)
		text, err := r.converse(ctx, sub, false, nil)
		if err != nil {
			return "", fmt.Errorf("sub-agent: %w", err)
		}
		return text, nil
	}
	if out, ok := r.plan.ToolResults[tc.Name]; ok {
		return out, nil
	}
	return "ok", nil
}

func subagentTools(tools []Tool, spawn string) []Tool {
	out := make([]Tool, 0, len(tools))
	for _, t := range tools {
		if t.Name != spawn {
			out = append(out, t)
		}
	}
	return out
}

// turn sends one call (with its scripted retry or fault) and returns the
// reply the agent keeps.
func (r *runner) turn(ctx context.Context, s *convState, turn int, isMain bool) (*reply, error) {
	body, err := r.d.body(s, &r.plan)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	s.calls++
	if isMain {
		for _, rt := range r.plan.Retries {
			if rt.Turn != turn {
				continue
			}
			// The first attempt's reply (if any) is abandoned, as a harness
			// does when it times out and resends the identical body.
			_, _ = r.send(ctx, s, turn, 1, body, rt.Fault, rt.Cut)
			return r.send(ctx, s, turn, 2, body, "", false)
		}
		if f, ok := r.plan.Faults[turn]; ok {
			return r.send(ctx, s, turn, 1, body, f, false)
		}
	}
	return r.send(ctx, s, turn, 1, body, "", false)
}

func (r *runner) send(ctx context.Context, s *convState, turn, attempt int, body []byte, fault string, cut bool) (*reply, error) {
	u := r.d.url(strings.TrimRight(r.target.BaseURL, "/"), r.target.CaptureKey())
	call := Call{Conversation: s.name, Turn: turn, Attempt: attempt, URL: u, Fault: fault, Cut: cut}
	start := time.Now()
	rep, status, err := r.do(ctx, s, u, body, fault, cut)
	call.Duration = time.Since(start)
	call.Status = status
	if rep != nil {
		call.ServedID = rep.ID
	}
	if err != nil {
		call.Error = err.Error()
	}
	r.calls = append(r.calls, call)
	return rep, err
}

func (r *runner) do(ctx context.Context, s *convState, u string, body []byte, fault string, cut bool) (*reply, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrModelCall, err)
	}
	r.d.headers(req.Header, s, r.sessionID)
	if s.script != "" {
		req.Header.Set(ScriptHeader, s.script)
	}
	if fault != "" {
		req.Header.Set(FaultHeader, fault)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, 0, &CallError{Body: err.Error()}
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, resp.StatusCode, &CallError{Status: resp.StatusCode, Body: err.Error()}
		}
		defer zr.Close()
		resp.Body = io.NopCloser(zr)
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, resp.StatusCode, &CallError{Status: resp.StatusCode, Body: errorMessage(b)}
	}
	if cut {
		return nil, resp.StatusCode, cutStream(resp.Body)
	}
	rep, err := r.d.read(resp, r.d.stream(&r.plan))
	if err != nil {
		var ce *CallError
		if errors.As(err, &ce) {
			return nil, resp.StatusCode, err
		}
		return nil, resp.StatusCode, &CallError{Status: resp.StatusCode, Body: err.Error()}
	}
	if r.plan.NativeTokens && len(rep.GenTokenIDs) == 0 {
		return nil, resp.StatusCode, &CallError{Status: resp.StatusCode,
			Body: "native token capture: the reply carries no log-probs to read token ids from"}
	}
	return rep, resp.StatusCode, nil
}

// ErrStreamCut is the error of an attempt whose stream the agent cut.
var ErrStreamCut = errors.New("stream cut before its end")

// cutStream reads a streamed reply up to its last event but one (Messages'
// message_delta, Chat's finish_reason chunk) and drops the connection, as a
// client does when the network breaks or its stream watchdog fires: by then
// the server has generated the whole reply, but the client never sees the
// stream end and retries.
func cutStream(body io.ReadCloser) error {
	err := readSSE(body, func(ev sseEvent) (bool, error) {
		last := ev.Event == "message_delta" || strings.Contains(ev.Data, `"finish_reason":"`)
		return !last, nil
	})
	// Closing an unfinished body closes the connection (no keep-alive reuse).
	_ = body.Close()
	if err != nil {
		return &CallError{Body: fmt.Sprintf("%v: %v", ErrStreamCut, err)}
	}
	return &CallError{Body: ErrStreamCut.Error()}
}

func (tr *transcript) addReply(rep *reply) {
	tr.lastID = rep.ID
	first := len(tr.items)
	if rep.Text != "" {
		tr.items = append(tr.items, map[string]any{
			"type": "message", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": rep.Text}},
		})
	}
	for _, tc := range rep.ToolCalls {
		tr.items = append(tr.items, map[string]any{
			"type": "function_call", "call_id": tc.ID, "name": tc.Name, "arguments": tc.Arguments,
		})
	}
	if len(rep.GenTokenIDs) > 0 && len(tr.items) > first {
		// A native harness keeps the reply's tokens on the reply's first
		// output item, the way Gym's token-aware agents do.
		tr.items[first]["generation_token_ids"] = rep.GenTokenIDs
		tr.items[first]["generation_log_probs"] = rep.GenLogProbs
	}
}

func (tr *transcript) addUser(text string) {
	tr.items = append(tr.items, map[string]any{
		"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": text}},
	})
}

func (tr *transcript) addOutputs(calls []toolCall, outputs []string) {
	for i, tc := range calls {
		tr.items = append(tr.items, map[string]any{
			"type": "function_call_output", "call_id": tc.ID, "output": outputs[i],
		})
	}
}

// record builds the finished rollout record from the main transcript.
func (r *runner) record(tr *transcript) map[string]any {
	items := tr.items
	id := tr.lastID
	switch r.plan.Attribution {
	case Unattributed:
		id = freshID()
		items = rewriteFinal(items)
	case ContentOnly:
		id = ""
	}
	rec := map[string]any{
		"response": map[string]any{
			"id": id, "object": "response", "model": r.plan.Model, "output": items,
		},
		"reward": r.plan.Reward,
	}
	switch r.plan.Attribution {
	case Declared:
		rec["terminal_response_id"] = tr.lastID
	case DeclaredUnknown:
		rec["terminal_response_id"] = freshID()
	}
	if r.plan.ExplicitCallID != "" {
		rec["_ng_terminal_model_call_id"] = r.plan.ExplicitCallID
	}
	switch {
	case r.plan.RecordKey == KeyOmitted:
	case r.plan.RecordKey == KeyMalformed:
		rec["_ng_rollout_id"] = MalformedRolloutID(r.target.CaptureKey())
	case r.target.RolloutID != "":
		rec["_ng_rollout_id"] = r.target.RolloutID
	default:
		rec["_ng_task_index"] = r.target.TaskIndex
		rec["_ng_rollout_index"] = r.target.RolloutIndex
	}
	return rec
}

// rewriteFinal replaces the last assistant text the way a harness that
// synthesizes its own summary does; without one it appends a summary.
func rewriteFinal(items []map[string]any) []map[string]any {
	out := make([]map[string]any, len(items))
	copy(out, items)
	summary := map[string]any{
		"type": "message", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": "Summary written by the harness: task complete."}},
	}
	if n := len(out); n > 0 && out[n-1]["role"] == "assistant" && out[n-1]["type"] == "message" {
		out[n-1] = summary
		return out
	}
	return append(out, summary)
}

func freshID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "resp_" + hex.EncodeToString(b[:])
}

// plainJSON round-trips the record through JSON, so it holds exactly what a
// /run result decoded from the wire holds ([]any, float64, ...).
func plainJSON(rec map[string]any) (map[string]any, error) {
	b, err := encodeJSON(rec)
	if err != nil {
		return rec, fmt.Errorf("encode record: %w", err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return rec, fmt.Errorf("decode record: %w", err)
	}
	return out, nil
}

// errorMessage pulls the message out of an OpenAI ({"error":{"message"}})
// or Anthropic ({"type":"error","error":{"message"}}) error body.
func errorMessage(body []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && len(e.Error) > 0 {
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &inner) == nil && inner.Message != "" {
			return inner.Message
		}
		var s string
		if json.Unmarshal(e.Error, &s) == nil && s != "" {
			return s
		}
	}
	var d struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &d) == nil && d.Detail != "" {
		return d.Detail
	}
	return strings.TrimSpace(string(body))
}

// encodeJSON encodes without HTML escaping, as JavaScript and Python
// clients do.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// compactJSON re-serialises a JSON text compactly, keeping its key order
// (as JSON.parse then JSON.stringify do); unparsable text is returned
// trimmed.
func compactJSON(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "{}"
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return s
	}
	return buf.String()
}

// withDefaults merges default members (`"k":v,...`) into a JSON object
// text the way JavaScript's {...defaults, ...input} does, as the Claude Code
// CLI does when it echoes an Edit back: the defaults' keys come first (with
// the input's value where it has one), then the input's other keys in order.
func withDefaults(input, defaults string) string {
	dk, dv, err1 := objectMembers("{" + defaults + "}")
	ik, iv, err2 := objectMembers(input)
	if err1 != nil || err2 != nil {
		return input
	}
	var b strings.Builder
	b.WriteByte('{')
	n := 0
	write := func(k string, v json.RawMessage) {
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		key, _ := encodeJSON(k)
		b.Write(key)
		b.WriteByte(':')
		b.Write(v)
	}
	for i, k := range dk {
		v := dv[i]
		if j := slices.Index(ik, k); j >= 0 {
			v = iv[j]
		}
		write(k, v)
	}
	for i, k := range ik {
		if !slices.Contains(dk, k) {
			write(k, iv[i])
		}
	}
	b.WriteByte('}')
	return b.String()
}

// objectMembers splits a JSON object text into its keys and compact values,
// in order.
func objectMembers(object string) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(strings.NewReader(object))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, fmt.Errorf("not a JSON object: %q", object)
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, err
		}
		var c bytes.Buffer
		if err := json.Compact(&c, raw); err != nil {
			return nil, nil, err
		}
		keys, vals = append(keys, k), append(vals, c.Bytes())
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	return keys, vals, nil
}

// echoed is the reply as the agent writes it back into its history: the
// tool calls of Plan.EchoInputDefaults' tools get the defaults merged in.
func (r *runner) echoed(rep *reply) *reply {
	if len(r.plan.EchoInputDefaults) == 0 {
		return rep
	}
	cp := *rep
	cp.ToolCalls = make([]toolCall, len(rep.ToolCalls))
	for i, tc := range rep.ToolCalls {
		if d, ok := r.plan.EchoInputDefaults[tc.Name]; ok {
			tc.Arguments = withDefaults(tc.Arguments, d)
		}
		cp.ToolCalls[i] = tc
	}
	return &cp
}
