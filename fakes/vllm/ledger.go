package vllm

import (
	"sync"
	"time"
)

// LedgerEntry is the ground truth of one generation.
type LedgerEntry struct {
	RequestID         string    `json:"request_id"`
	Model             string    `json:"model"`
	PromptTokenIDs    []int     `json:"prompt_token_ids"`
	GeneratedTokenIDs []int     `json:"generated_token_ids"`
	LogProbs          []float64 `json:"log_probs"`
	FinishReason      string    `json:"finish_reason"`
	Text              string    `json:"text"`
	Created           time.Time `json:"created"`
}

// ledger is an append-only, concurrency-safe list of generations. With a
// limit it keeps only the newest entries, so long load runs stay bounded.
type ledger struct {
	mu      sync.Mutex
	limit   int // 0 = unlimited
	entries []LedgerEntry
}

func (l *ledger) add(e LedgerEntry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	if l.limit > 0 && len(l.entries) >= 2*l.limit {
		// Compact rarely (amortised O(1)) instead of shifting on every add.
		l.entries = append(make([]LedgerEntry, 0, 2*l.limit), l.entries[len(l.entries)-l.limit:]...)
	}
	l.mu.Unlock()
}

// snapshot returns a copy so callers never race with later appends.
func (l *ledger) snapshot() []LedgerEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	es := l.entries
	if l.limit > 0 && len(es) > l.limit {
		es = es[len(es)-l.limit:]
	}
	return append([]LedgerEntry(nil), es...)
}

// Script drives generation for requests that name it in X-Fake-Script.
type Script struct {
	Name  string `json:"name"`
	Turns []Turn `json:"turns"`
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
}

// ScriptToolCall is a hermes tool call the model emits.
type ScriptToolCall struct {
	Name string `json:"name"`
	// Arguments is JSON object text, written into the output verbatim.
	Arguments string `json:"arguments"`
}

type scriptBook struct {
	mu      sync.RWMutex
	scripts map[string]Script
}

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

// turnFor picks the turn for a conversation holding assistantMsgs replies.
func (s Script) turnFor(assistantMsgs int) Turn {
	if assistantMsgs >= len(s.Turns) {
		return s.Turns[len(s.Turns)-1]
	}
	return s.Turns[assistantMsgs]
}
