// Package scenarios is the catalog of capture scenarios: each one names an
// agent harness and its plan, the fake vLLM's scripts, the server settings it
// needs and the verdict the consumer must reach (docs/scenarios.md).
package scenarios

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"github.com/capbench/capbench/scenarios/agent"
)

// DefaultModel is the model the catalog serves (the walkthrough's policy).
const DefaultModel = "Qwen/Qwen3-4B-Thinking-2507"

// ErrUnknownScenario is returned by Lookup for a name not in the catalog.
var ErrUnknownScenario = errors.New("unknown scenario")

// Script is what the fake vLLM generates, turn by turn, for requests that
// carry its name in the X-Fake-Script header. Its JSON form is the fake's.
type Script struct {
	Name  string `json:"name"`
	Turns []Turn `json:"turns"`
}

// Turn is one scripted assistant turn (the turn index is the number of
// assistant messages already in the request; the last turn repeats).
type Turn struct {
	Content      string     `json:"content,omitempty"`
	Reasoning    string     `json:"reasoning,omitempty"`
	ToolCalls    []ToolCall `json:"tool_calls,omitempty"`
	Empty        bool       `json:"empty,omitempty"`
	Tokens       int        `json:"tokens,omitempty"`
	StopByLength bool       `json:"stop_by_length,omitempty"`
	Fault        string     `json:"fault,omitempty"`
}

// ToolCall is a tool call the scripted model emits (hermes format).
type ToolCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Server is the vLLM settings a scenario needs (the `vllm serve` flags).
type Server struct {
	Model                string `json:"model"`
	MaxModelLen          int    `json:"max_model_len,omitempty"`
	EnableAutoToolChoice bool   `json:"enable_auto_tool_choice,omitempty"`
	ToolCallParser       string `json:"tool_call_parser,omitempty"`
	ReasoningParser      string `json:"reasoning_parser,omitempty"`
	// ChatTemplateVariant is "plain" or "thinking" (drops earlier reasoning).
	ChatTemplateVariant string `json:"chat_template_variant,omitempty"`
}

// Key identifies the settings, so environments can be shared between
// scenarios that need the same server.
func (s Server) Key() string {
	return fmt.Sprintf("%s|%d|%t|%s|%s|%s", s.Model, s.MaxModelLen, s.EnableAutoToolChoice,
		s.ToolCallParser, s.ReasoningParser, s.ChatTemplateVariant)
}

// Capture is a fault the harness injects into the capture store.
type Capture struct {
	// FailPut makes the n-th Put (1-based) of each rollout fail; 0 = none.
	FailPut int `json:"fail_put,omitempty"`
}

// Op compares a metric with an expected value.
type Op string

// Comparison operators.
const (
	OpEq      Op = "="
	OpLess    Op = "<"
	OpAtLeast Op = ">="
	OpOneOf   Op = "in"
	OpHas     Op = "contains"
	OpAbsent  Op = "absent"
)

// Check is one expectation on the rollout's `_ng_token_capture` metrics.
// Path is a dotted key path (e.g. "terminal_attribution.chain",
// "parent_link_failures.parent_digest_mismatch").
type Check struct {
	Path  string `json:"path"`
	Op    Op     `json:"op"`
	Value any    `json:"value,omitempty"`
}

// Eq expects metric path to equal v (numbers compare as float64).
func Eq(path string, v any) Check { return Check{Path: path, Op: OpEq, Value: v} }

// Less expects a numeric metric below v.
func Less(path string, v float64) Check { return Check{Path: path, Op: OpLess, Value: v} }

// AtLeast expects a numeric metric of at least v.
func AtLeast(path string, v float64) Check { return Check{Path: path, Op: OpAtLeast, Value: v} }

// OneOf expects the metric to equal one of vs.
func OneOf(path string, vs ...any) Check { return Check{Path: path, Op: OpOneOf, Value: vs} }

// Contains expects a string metric to contain sub.
func Contains(path, sub string) Check { return Check{Path: path, Op: OpHas, Value: sub} }

// Absent expects the metric to be missing.
func Absent(path string) Check { return Check{Path: path, Op: OpAbsent} }

// String renders the check for reports and failure messages.
func (c Check) String() string {
	switch c.Op {
	case OpAbsent:
		return c.Path + " absent"
	case OpOneOf:
		return fmt.Sprintf("%s in %v", c.Path, c.Value)
	default:
		return fmt.Sprintf("%s %s %v", c.Path, c.Op, c.Value)
	}
}

// Evaluate checks the metrics map (as decoded from JSON). It returns the
// value found and whether the check holds.
func (c Check) Evaluate(metrics map[string]any) (any, bool) {
	got, found := MetricAt(metrics, c.Path)
	if c.Op == OpAbsent {
		return got, !found
	}
	if !found {
		return nil, false
	}
	switch c.Op {
	case OpEq:
		return got, equalValue(got, c.Value)
	case OpLess, OpAtLeast:
		g, ok1 := toFloat(got)
		w, ok2 := toFloat(c.Value)
		if !ok1 || !ok2 {
			return got, false
		}
		if c.Op == OpLess {
			return got, g < w
		}
		return got, g >= w
	case OpOneOf:
		vs, _ := c.Value.([]any)
		for _, v := range vs {
			if equalValue(got, v) {
				return got, true
			}
		}
		return got, false
	case OpHas:
		s, ok := got.(string)
		sub, _ := c.Value.(string)
		return got, ok && strings.Contains(s, sub)
	}
	return got, false
}

// MetricAt finds a dotted path in nested maps.
func MetricAt(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, part := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		cur, ok = mm[part]
		if !ok {
			return nil, false
		}
	}
	return cur, true
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case interface{ Float64() (float64, error) }:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func equalValue(got, want any) bool {
	if w, ok := toFloat(want); ok {
		g, ok := toFloat(got)
		return ok && math.Abs(g-w) < 1e-9
	}
	if _, ok := toFloat(got); ok {
		return false
	}
	switch w := want.(type) {
	case string:
		g, ok := got.(string)
		return ok && g == w
	case bool:
		g, ok := got.(bool)
		return ok && g == w
	case nil:
		return got == nil
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, v := range w {
			if gv, ok := g[k]; !ok || !equalValue(gv, v) {
				return false
			}
		}
		return true
	case map[string]int:
		// Catalog literals write counter maps as map[string]int; compare
		// them as the decoded JSON they stand for.
		asAny := make(map[string]any, len(w))
		for k, v := range w {
			asAny[k] = v
		}
		return equalValue(got, asAny)
	}
	return reflect.DeepEqual(got, want)
}

// Expect is the verdict a scenario must reach.
type Expect struct {
	// MaskSample is the expected `mask_sample` (absent counts as false).
	MaskSample bool `json:"mask_sample"`
	// Checks are expectations on `_ng_token_capture`.
	Checks []Check `json:"checks,omitempty"`
	// AgentError, when set, must appear in the agent's own failure (e.g.
	// vLLM's context-length error).
	AgentError string `json:"agent_error,omitempty"`
	// Redundant expects delivery to leave the record exactly as the agent
	// wrote it (no `_ng_token_capture`, no mask) and to hand back a
	// retirable redundant build (docs/consumer.md, row 20 of docs/scenarios.md). Checks are
	// then not evaluated, since there are no metrics.
	Redundant bool `json:"redundant,omitempty"`
	// Explain, when set, is text that `capbench explain` must print for
	// the rollout: the one-line cause of the verdict in its words.
	Explain string `json:"explain,omitempty"`
}

// Seal is a terminal-call seal the harness stamps on the finished record
// before delivery, the way a gate that saw the model calls writes
// `_ng_terminal_model_call_id` (docs/consumer.md, "Terminal attribution").
type Seal string

// Seals.
const (
	// NoSeal leaves the record as the agent wrote it.
	NoSeal Seal = ""
	// SealFirstCall names the rollout's first captured call: the record
	// with the shortest prompt (ties: the smallest call id).
	SealFirstCall Seal = "first-call"
)

// Row is the row of docs/scenarios.md this scenario follows.
type Row string

// Scenario is one catalog entry.
type Scenario struct {
	Name        string     `json:"name"`
	Description string     `json:"description"`
	Row         Row        `json:"contract_row,omitempty"`
	Agent       agent.Kind `json:"agent"`
	Plan        agent.Plan `json:"-"`
	Scripts     []Script   `json:"scripts"`
	Server      Server     `json:"server"`
	Capture     Capture    `json:"capture,omitempty"`
	Seal        Seal       `json:"seal,omitempty"`
	Expect      Expect     `json:"expect"`
	Tags        []string   `json:"tags,omitempty"`
	// Unscripted scenarios install no scripts: the engine answers as it
	// likes (a real vLLM takes none), and the expectations hold for any
	// text it chooses.
	Unscripted bool `json:"unscripted,omitempty"`
}

// Streaming reports whether the scenario's agent streams.
func (s Scenario) Streaming() bool { return s.Agent == agent.ClaudeCode || s.Plan.Stream }

// HasTag reports whether the scenario carries tag t.
func (s Scenario) HasTag(t string) bool {
	for _, x := range s.Tags {
		if x == t {
			return true
		}
	}
	return false
}

// Validate checks that the scenario is self-consistent: every script the plan
// uses is defined and the agent kind is known.
func (s Scenario) Validate() error {
	if s.Name == "" {
		return errors.New("scenario has no name")
	}
	if !s.Agent.Valid() {
		return fmt.Errorf("scenario %s: unknown agent %q", s.Name, s.Agent)
	}
	if s.Seal != NoSeal && s.Seal != SealFirstCall {
		return fmt.Errorf("scenario %s: unknown seal %q", s.Name, s.Seal)
	}
	if s.Unscripted {
		for _, used := range s.usedScripts() {
			if used != "" || len(s.Scripts) > 0 {
				return fmt.Errorf("scenario %s: an unscripted scenario defines and names no script", s.Name)
			}
		}
		return nil
	}
	defined := map[string]bool{}
	for _, sc := range s.Scripts {
		if sc.Name == "" || len(sc.Turns) == 0 {
			return fmt.Errorf("scenario %s: script %q is empty", s.Name, sc.Name)
		}
		defined[sc.Name] = true
	}
	for _, used := range s.usedScripts() {
		if used == "" {
			return fmt.Errorf("scenario %s: a conversation of its plan names no script (set Conversation.Script)", s.Name)
		}
		if !defined[used] {
			return fmt.Errorf("scenario %s: plan uses undefined script %q", s.Name, used)
		}
	}
	return nil
}

func (s Scenario) usedScripts() []string {
	p := s.Plan
	used := []string{p.Main.Script}
	if p.Title != nil {
		used = append(used, p.Title.Script)
	}
	if p.SubAgent != nil {
		used = append(used, p.SubAgent.Conversation.Script)
	}
	if p.Compaction != nil && p.Compaction.Script != "" {
		used = append(used, p.Compaction.Script)
	}
	sort.Strings(used)
	return used
}
