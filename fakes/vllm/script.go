package vllm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// AgentIDHeader is the header Claude Code sends on every call of a
// sub-agent (absent on the main agent's calls). Routes match on it.
const AgentIDHeader = "X-Claude-Code-Agent-Id"

// Script drives generation for requests that name it in X-Fake-Script.
//
// A real harness sends one header value on every call of a session (Claude
// Code's ANTHROPIC_CUSTOM_HEADERS reach the main agent, its sub-agents and
// its title and compaction calls alike), so Routes send some of those calls
// to other scripts: a sub-agent then plays its own script instead of
// replaying the main one.
type Script struct {
	Name  string `json:"name"`
	Turns []Turn `json:"turns"`
	// Routes are tried in order; the first whose conditions all hold names
	// the script that answers the call instead of this one.
	Routes []Route `json:"routes,omitempty"`
}

// Route sends the calls it matches to another script. Every condition that
// is set must hold; a route needs at least one.
type Route struct {
	// SubAgent matches calls that carry the x-claude-code-agent-id header.
	SubAgent bool `json:"sub_agent,omitempty"`
	// AgentID matches calls whose x-claude-code-agent-id is exactly this.
	AgentID string `json:"agent_id,omitempty"`
	// System matches calls whose system messages contain this text (title
	// and compaction calls carry their own system prompt).
	System string `json:"system,omitempty"`
	// User matches calls with a user message that contains this text (a
	// sub-agent's task, a compaction request).
	User string `json:"user,omitempty"`
	// Script names the script that answers matching calls.
	Script string `json:"script"`
}

// Turn is what the model produces for one assistant turn. The turn used is
// the number of assistant messages already in the request; the last turn
// repeats for longer conversations.
type Turn struct {
	Content   string           `json:"content,omitempty"`
	Reasoning string           `json:"reasoning,omitempty"`
	ToolCalls []ScriptToolCall `json:"tool_calls,omitempty"`
	// Empty generates only the EOS token.
	Empty bool `json:"empty,omitempty"`
	// Tokens is the exact generated length including EOS; 0 = natural.
	Tokens int `json:"tokens,omitempty"`
	// StopByLength stops at Tokens (or max_tokens) with finish_reason length.
	StopByLength bool `json:"stop_by_length,omitempty"`
	// Fault forces one of the Fault* kinds for this turn.
	Fault string `json:"fault,omitempty"`
	// FaultTimes limits Fault to the first N attempts of this turn with
	// one prompt; later identical attempts (a client's retry) succeed.
	// 0 faults every attempt.
	FaultTimes int `json:"fault_times,omitempty"`
}

// ScriptToolCall is a hermes tool call the model emits.
type ScriptToolCall struct {
	Name string `json:"name"`
	// Arguments is JSON object text, written into the output verbatim.
	Arguments string `json:"arguments"`
}

func (s Script) validate() error {
	if s.Name == "" {
		return fmt.Errorf("script: name is empty")
	}
	if len(s.Turns) == 0 {
		return fmt.Errorf("script %q: no turns", s.Name)
	}
	for i, t := range s.Turns {
		if t.Fault != "" && !knownFaults[t.Fault] {
			return fmt.Errorf("script %q turn %d: unknown fault %q", s.Name, i, t.Fault)
		}
		if t.Tokens < 0 {
			return fmt.Errorf("script %q turn %d: negative tokens", s.Name, i)
		}
		if t.FaultTimes < 0 {
			return fmt.Errorf("script %q turn %d: negative fault_times", s.Name, i)
		}
		if t.FaultTimes > 0 && t.Fault == "" {
			return fmt.Errorf("script %q turn %d: fault_times without a fault", s.Name, i)
		}
	}
	for i, r := range s.Routes {
		if r.Script == "" {
			return fmt.Errorf("script %q route %d: no script named", s.Name, i)
		}
		if !r.SubAgent && r.AgentID == "" && r.System == "" && r.User == "" {
			return fmt.Errorf("script %q route %d: no condition (set sub_agent, agent_id, system or user)", s.Name, i)
		}
	}
	return nil
}

// callFacts is what routes look at in a request.
type callFacts struct {
	agentID string
	// messages are the chat messages (nil for completions).
	messages []map[string]any
}

func (f callFacts) matches(r Route) bool {
	if r.SubAgent && f.agentID == "" {
		return false
	}
	if r.AgentID != "" && f.agentID != r.AgentID {
		return false
	}
	if r.System != "" && !f.roleContains("system", r.System) {
		return false
	}
	if r.User != "" && !f.roleContains("user", r.User) {
		return false
	}
	return true
}

func (f callFacts) roleContains(role, text string) bool {
	for _, m := range f.messages {
		if m["role"] == role && strings.Contains(contentText(m["content"]), text) {
			return true
		}
	}
	return false
}

// contentText flattens a message content: a string, or a list of text
// parts (left as raw JSON by normalizeMessages).
func contentText(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case json.RawMessage:
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(c, &parts) != nil {
			return ""
		}
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
			b.WriteByte('\n')
		}
		return b.String()
	}
	return ""
}

type scriptBook struct {
	mu      sync.RWMutex
	scripts map[string]Script
	// attempts counts faulted attempts of FaultTimes turns, keyed by script,
	// turn and prompt; bounded by maxAttemptKeys.
	attempts map[attemptKey]int
}

type attemptKey struct {
	script string
	turn   int
	prompt [16]byte
}

// maxAttemptKeys bounds the attempt counters of a long run: past it the
// counters start over (a retry test never holds that many prompts at once).
const maxAttemptKeys = 1 << 16

func (b *scriptBook) put(s Script) {
	b.mu.Lock()
	if b.scripts == nil {
		b.scripts = map[string]Script{}
	}
	b.scripts[s.Name] = s
	b.mu.Unlock()
}

func (b *scriptBook) get(name string) (Script, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, ok := b.scripts[name]
	return s, ok
}

func (b *scriptBook) names() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]string, 0, len(b.scripts))
	for n := range b.scripts {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// faultNow reports whether a FaultTimes turn faults on this attempt.
func (b *scriptBook) faultNow(script string, turn, times int, prompt []int) bool {
	h := sha256.New()
	var buf [8]byte
	for _, id := range prompt {
		binary.LittleEndian.PutUint64(buf[:], uint64(id))
		h.Write(buf[:])
	}
	k := attemptKey{script: script, turn: turn}
	copy(k.prompt[:], h.Sum(nil))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.attempts == nil || len(b.attempts) >= maxAttemptKeys {
		b.attempts = map[attemptKey]int{}
	}
	n := b.attempts[k]
	if n >= times {
		return false
	}
	b.attempts[k] = n + 1
	return true
}

// resolve finds the script that answers a call naming name: the named
// script, or the one its first matching route names (routes are followed
// once, so a loop cannot form).
func (b *scriptBook) resolve(name string, f callFacts) (Script, *apiError) {
	sc, ok := b.get(name)
	if !ok {
		return Script{}, b.missing(name, "")
	}
	for _, r := range sc.Routes {
		if !f.matches(r) {
			continue
		}
		routed, ok := b.get(r.Script)
		if !ok {
			return Script{}, b.missing(r.Script, name)
		}
		return routed, nil
	}
	return sc, nil
}

// missing is the error a client sees for a script that is not installed:
// vLLM's error envelope, naming the script, the scripts that exist and how
// to add one. It is a 400, not the 404 of an unknown model: SDKs retry
// neither, but Claude Code reads every 404 as "the selected model may not
// exist" and hides the message, while it prints a 400's.
func (b *scriptBook) missing(name, routedFrom string) *apiError {
	known := b.names()
	list := "none"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	where := ""
	if routedFrom != "" {
		where = fmt.Sprintf(" (a route of script %q names it)", routedFrom)
	}
	return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Param: strp("X-Fake-Script"),
		Message: fmt.Sprintf("fake script %q does not exist%s; installed scripts: %s. Install it with PUT /fake/scripts/%s or fix the X-Fake-Script header",
			name, where, list, name)}
}

// pickScript sets the job's script turn and fault from X-Fake-Script.
func (s *Server) pickScript(r *http.Request, j *job, assistants int, msgs []map[string]any) *apiError {
	name := headerValue(r.Header, headerScript)
	if name == "" {
		return nil
	}
	sc, ae := s.scripts.resolve(name, callFacts{agentID: headerValue(r.Header, AgentIDHeader), messages: msgs})
	if ae != nil {
		return ae
	}
	idx := min(assistants, len(sc.Turns)-1)
	t := sc.Turns[idx]
	j.turn = &t
	j.fault = t.Fault
	if t.Fault != "" && t.FaultTimes > 0 && !s.scripts.faultNow(sc.Name, idx, t.FaultTimes, j.promptIDs) {
		j.fault = ""
	}
	return nil
}
