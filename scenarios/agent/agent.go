// Package agent holds scripted agent harnesses that talk to a model server the
// way real harnesses do: a Claude-Code-like client speaking Anthropic Messages,
// an OpenAI Chat Completions client with tools, and a custom client that builds
// its URLs itself. Each runs a real multi-turn loop over HTTP and returns a
// finished rollout record shaped like a NeMo Gym /run result.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"
)

// Kind names an agent harness.
type Kind string

// The agent harnesses this package provides.
const (
	// ClaudeCode speaks Anthropic Messages exactly like the Claude Code CLI
	// (always streaming, `?beta=true`, system blocks, its tool list).
	ClaudeCode Kind = "claude-code"
	// OpenAIChat speaks OpenAI Chat Completions with tools.
	OpenAIChat Kind = "openai-chat"
	// Custom speaks Chat Completions but builds its URLs itself and omits the
	// training-capture segment (evaluation correlation only).
	Custom Kind = "custom"
)

// Kinds lists every agent kind, for flag validation and docs.
func Kinds() []Kind { return []Kind{ClaudeCode, OpenAIChat, Custom} }

// Valid reports whether k names a known agent.
func (k Kind) Valid() bool {
	for _, known := range Kinds() {
		if k == known {
			return true
		}
	}
	return false
}

// ScriptHeader selects the fake vLLM's script for a request; a real vLLM
// ignores it.
const ScriptHeader = "X-Fake-Script"

// FaultHeader asks the fake vLLM to inject a fault into one request.
const FaultHeader = "X-Fake-Fault"

// Errors callers test with errors.Is.
var (
	ErrInvalidTarget = errors.New("invalid agent target")
	ErrInvalidPlan   = errors.New("invalid agent plan")
	ErrModelCall     = errors.New("model call failed")
	ErrMaxTurns      = errors.New("agent reached its turn limit")
)

// Target says where the agent sends its model calls and which rollout it
// belongs to.
type Target struct {
	// BaseURL is the model server's root, e.g. http://127.0.0.1:8000 (the
	// capture proxy, or a plain vLLM).
	BaseURL string
	// RolloutID is an explicit rollout id (written as `_ng_rollout_id`).
	// When empty, TaskIndex and RolloutIndex name the rollout instead.
	RolloutID    string
	TaskIndex    int
	RolloutIndex int
	// Client sends the requests; nil uses a private client without
	// transparent compression.
	Client *http.Client
}

var rolloutIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CaptureKey is the rollout id the record derives to
// (docs/consumer.md#the-rollouts-record-format).
func (t Target) CaptureKey() string {
	if t.RolloutID != "" {
		return t.RolloutID
	}
	return strconv.Itoa(t.TaskIndex) + "-" + strconv.Itoa(t.RolloutIndex)
}

func (t Target) validate() error {
	if t.BaseURL == "" {
		return fmt.Errorf("%w: BaseURL is empty", ErrInvalidTarget)
	}
	if t.RolloutID != "" && !rolloutIDPattern.MatchString(t.RolloutID) {
		return fmt.Errorf("%w: RolloutID %q is not a valid rollout id", ErrInvalidTarget, t.RolloutID)
	}
	if t.RolloutID == "" && (t.TaskIndex < 0 || t.RolloutIndex < 0) {
		return fmt.Errorf("%w: TaskIndex and RolloutIndex must be >= 0", ErrInvalidTarget)
	}
	return nil
}

// Attribution says how the finished record names its terminal response.
type Attribution string

// Attribution modes (docs/consumer.md#terminal-attribution).
const (
	// Delivered: response.id is the last served reply's id (response_id witness).
	Delivered Attribution = "delivered"
	// Unattributed: a fresh response id and rewritten final text, so no
	// witness names a call (a synthesized transcript).
	Unattributed Attribution = "unattributed"
	// ContentOnly: the faithful transcript with an empty id (content witness).
	ContentOnly Attribution = "content"
	// Declared: like Delivered, plus `terminal_response_id` = the served id.
	Declared Attribution = "declared"
	// DeclaredUnknown: `terminal_response_id` names an id nobody served.
	DeclaredUnknown Attribution = "declared-unknown"
)

// Tool is one tool offered to the model.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments.
	Parameters map[string]any
}

// Conversation is one model conversation inside a rollout (the main task, a
// sub-agent, an auxiliary title call).
type Conversation struct {
	// Script is sent as X-Fake-Script on every call of this conversation.
	Script string
	// System is the system prompt; empty uses the agent's default.
	System string
	// Task is the first user message.
	Task string
	// MaxTokens overrides the agent's default max_tokens (0 = default).
	MaxTokens int
}

// Retry resends a call of the main conversation with an identical body.
type Retry struct {
	// Turn is the 0-based index of the main conversation's call to retry.
	Turn int
	// Fault, when set, is sent as X-Fake-Fault on the first attempt only (e.g.
	// "503" or "500": the first attempt fails upstream and leaves a dangling
	// intent). Empty: both attempts succeed and the agent keeps the second.
	Fault string
	// Cut makes the agent cut the first attempt's stream just before its
	// end (after Messages' message_delta or Chat's finish_reason chunk) and
	// resend: the server generated and served the whole reply, the client
	// never saw it end. Needs a streaming plan.
	Cut bool
}

// Compaction replaces the main conversation's history after a turn, as
// harnesses do when the context fills up.
type Compaction struct {
	// AfterTurn is the 0-based call after whose tool results history is
	// rewritten.
	AfterTurn int
	// KeepLastAssistant keeps the last assistant turn and its tool results
	// after a rewritten summary (an UNRESOLVED boundary). False drops every
	// assistant turn (a new ROOT).
	KeepLastAssistant bool
	// Script is the fake script used after compaction.
	Script string
	// Summary is the user message that replaces the history.
	Summary string
}

// InlineSystem is an extra role:"system" entry inside the Messages history.
// The capture proxy, like vLLM, merges every inline system message into the
// one leading system message a Qwen-style template needs, so where it first
// appears decides whether the rendered prompt of the next call still extends
// the previous one.
type InlineSystem struct {
	// Text is the message's text (sent as one text block).
	Text string
	// FromFirstCall sends the message on every call, right after the first
	// user message (and the CLI's environment message). False appends it
	// once, after the tool results of the main conversation's first tool
	// turn, so it is new in the call that follows (the CLI's behaviour in
	// the recorded subagent run, calls 5 and 6).
	FromFirstCall bool
}

// SubAgent runs a second conversation when the main conversation calls Tool.
type SubAgent struct {
	// Tool is the tool name that spawns the sub-agent (Claude Code: "Agent").
	Tool         string
	Conversation Conversation
}

// Plan is everything an agent does in one rollout.
type Plan struct {
	// Model is the model name sent in every request.
	Model string
	// Main is the main conversation.
	Main Conversation
	// Stream asks for streamed replies (Claude Code always streams).
	Stream bool
	// Tools overrides the agent's default tool list (nil = default; an
	// empty non-nil slice offers no tools).
	Tools []Tool
	// ToolChoice is sent as tool_choice by the Chat agents when tools are
	// offered ("" = "auto"; "none" renders tools but never parses calls).
	ToolChoice string
	// ToolResults maps a tool name to its scripted output (default "ok").
	ToolResults map[string]string
	// MaxTurns bounds the main conversation's calls (0 = 16).
	MaxTurns int
	// Retries resend calls of the main conversation.
	Retries []Retry
	// Faults maps a 0-based main-conversation call to an X-Fake-Fault value
	// sent on that call only (e.g. "no-logprobs").
	Faults map[int]string
	// FollowUps are further user questions asked, in order, each time the
	// main conversation ends without a tool call.
	FollowUps []string
	// Compaction rewrites history once.
	Compaction *Compaction
	// SubAgent spawns a second conversation from a tool call.
	SubAgent *SubAgent
	// Probe sends the CLI's HEAD probe (`HEAD {base}/api/hello`, seen with
	// nonessential traffic on) before the first model call.
	Probe bool
	// Title runs a short auxiliary call before the main conversation.
	Title *Conversation
	// InlineSystem adds one more role:"system" message to the main
	// conversation's messages, as the Claude Code CLI does (e.g. its agent
	// list after a tool result). Only the Claude Code agent supports it.
	InlineSystem *InlineSystem
	// Attribution shapes the record's response id.
	Attribution Attribution
	// EchoReasoning sends earlier reasoning back in assistant turns.
	EchoReasoning bool
	// EchoInputDefaults maps a tool name to raw JSON members (`"k":v,...`)
	// the agent merges into that tool's arguments when it echoes the call
	// back, as JavaScript's {...defaults, ...input}: the Claude Code CLI
	// echoes an Edit as {"replace_all":false, ...the model's input}. The
	// record's transcript keeps the model's arguments.
	EchoInputDefaults map[string]string
	// Reward is copied onto the record.
	Reward float64
	// ExplicitCallID is written as `_ng_terminal_model_call_id`: the agent
	// declares which model call produced its answer. Empty writes none.
	ExplicitCallID string
	// RecordKey says how the record carries its rollout key.
	RecordKey RecordKey
	// NativeTokens makes the agent collect its own training tokens, as a
	// native token-aware harness does: it asks for log-probs and writes each
	// reply's generated token ids and log-probs onto its output items.
	// Only the Chat Completions agents support it.
	NativeTokens bool
}

// RecordKey is how a finished record names its rollout
// (docs/consumer.md#the-rollouts-record-format).
type RecordKey string

// Record key modes.
const (
	// KeyFromTarget copies the target's key (`_ng_rollout_id`, or the task
	// and rollout indices): what a correct harness does.
	KeyFromTarget RecordKey = ""
	// KeyOmitted writes no rollout key at all, like a harness that forgets
	// to copy the row's ids onto its result.
	KeyOmitted RecordKey = "omitted"
	// KeyMalformed writes an `_ng_rollout_id` that breaks the id pattern
	// (the URL still uses the valid id).
	KeyMalformed RecordKey = "malformed"
)

// MalformedRolloutID is the id a KeyMalformed record carries: a slash is
// outside the rollout id pattern.
func MalformedRolloutID(key string) string { return "bad/" + key }

func (p Plan) validate() error {
	if p.Model == "" {
		return fmt.Errorf("%w: Model is empty", ErrInvalidPlan)
	}
	if p.Main.Task == "" {
		return fmt.Errorf("%w: Main.Task is empty", ErrInvalidPlan)
	}
	if p.MaxTurns < 0 {
		return fmt.Errorf("%w: MaxTurns %d is negative", ErrInvalidPlan, p.MaxTurns)
	}
	switch p.Attribution {
	case "", Delivered, Unattributed, ContentOnly, Declared, DeclaredUnknown:
	default:
		return fmt.Errorf("%w: unknown Attribution %q", ErrInvalidPlan, p.Attribution)
	}
	if p.SubAgent != nil && p.SubAgent.Tool == "" {
		return fmt.Errorf("%w: SubAgent.Tool is empty", ErrInvalidPlan)
	}
	switch p.RecordKey {
	case KeyFromTarget, KeyOmitted, KeyMalformed:
	default:
		return fmt.Errorf("%w: unknown RecordKey %q", ErrInvalidPlan, p.RecordKey)
	}
	if p.InlineSystem != nil && p.InlineSystem.Text == "" {
		return fmt.Errorf("%w: InlineSystem.Text is empty", ErrInvalidPlan)
	}
	for _, rt := range p.Retries {
		if rt.Cut && rt.Fault != "" {
			return fmt.Errorf("%w: Retry of turn %d sets both Cut and Fault (a faulted attempt has no stream to cut)", ErrInvalidPlan, rt.Turn)
		}
	}
	for tool, m := range p.EchoInputDefaults {
		var probe map[string]json.RawMessage
		if json.Unmarshal([]byte("{"+m+"}"), &probe) != nil || len(probe) == 0 {
			return fmt.Errorf("%w: EchoInputDefaults[%q] = %q is not a list of JSON object members", ErrInvalidPlan, tool, m)
		}
	}
	if p.Compaction != nil && p.Compaction.Summary == "" {
		return fmt.Errorf("%w: Compaction.Summary is empty", ErrInvalidPlan)
	}
	return nil
}

// Call describes one HTTP model call the agent made, for diagnostics.
type Call struct {
	Conversation string        `json:"conversation"`
	Turn         int           `json:"turn"`
	Attempt      int           `json:"attempt"`
	URL          string        `json:"url"`
	Status       int           `json:"status"`
	ServedID     string        `json:"served_id,omitempty"`
	Fault        string        `json:"fault,omitempty"`
	Cut          bool          `json:"cut,omitempty"`
	Error        string        `json:"error,omitempty"`
	Duration     time.Duration `json:"duration_ns"`
}

// Result is what an agent hands back: the finished record and the calls made.
type Result struct {
	// Record is the finished rollout record (a NeMo Gym /run result).
	Record map[string]any
	// Calls lists every HTTP model call in order.
	Calls []Call
	// Err is the agent's own failure (a model call that could not be
	// recovered); the record is still returned, like a failed rollout.
	Err error
}

// Run runs one rollout with the agent kind k.
func Run(ctx context.Context, k Kind, t Target, p Plan) (*Result, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("%w: unknown agent kind %q", ErrInvalidPlan, k)
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	if p.NativeTokens && k == ClaudeCode {
		return nil, fmt.Errorf("%w: NativeTokens needs a Chat Completions agent, not %s", ErrInvalidPlan, k)
	}
	for _, rt := range p.Retries {
		if rt.Cut && k != ClaudeCode && !p.Stream {
			return nil, fmt.Errorf("%w: Retry of turn %d cuts a stream, but the plan does not stream", ErrInvalidPlan, rt.Turn)
		}
	}
	if p.InlineSystem != nil && k != ClaudeCode {
		return nil, fmt.Errorf("%w: InlineSystem needs the Claude Code agent, not %s", ErrInvalidPlan, k)
	}
	r := newRunner(k, t, p)
	if t.Client == nil {
		// The private client is this run's alone: without this its idle
		// keep-alive connections (and their goroutines) would outlive the
		// run, one set per rollout, for as long as the server keeps them.
		defer r.client.CloseIdleConnections()
	}
	return r.run(ctx), nil
}
