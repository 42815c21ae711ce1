// Package harness runs the scenario catalog end to end: it builds an
// environment (fake or real vLLM behind the capture proxy), drives the
// scripted agents, collects and finalizes each rollout with the consumer,
// checks fidelity against the fake's ledger and compares every verdict with
// the scenario's expectation. Results are plain data with a versioned JSON
// form; package reports renders them.
package harness

import (
	"time"

	"github.com/capbench/capbench/scenarios"
	"github.com/capbench/capbench/scenarios/agent"
)

// ResultSchema versions the JSON form of RunResult.
const ResultSchema = "capbench.run/v1"

// Status is a scenario's outcome.
type Status string

// Scenario outcomes.
const (
	StatusPass Status = "pass"
	StatusFail Status = "fail"
	StatusSkip Status = "skip"
)

// RunResult is the result of one `capbench run`.
type RunResult struct {
	Schema       string           `json:"schema"`
	Backend      string           `json:"backend"`
	StartedAt    time.Time        `json:"started_at"`
	FinishedAt   time.Time        `json:"finished_at"`
	WallMS       float64          `json:"wall_ms"`
	OutDir       string           `json:"out_dir,omitempty"`
	RolloutsFile string           `json:"rollouts_file,omitempty"`
	CaptureDir   string           `json:"capture_dir,omitempty"`
	Passed       int              `json:"passed"`
	Failed       int              `json:"failed"`
	Skipped      int              `json:"skipped"`
	Scenarios    []ScenarioResult `json:"scenarios"`
}

// OK reports whether no scenario failed.
func (r *RunResult) OK() bool { return r.Failed == 0 }

// Count recomputes Passed/Failed/Skipped from the scenarios.
func (r *RunResult) Count() {
	r.Passed, r.Failed, r.Skipped = 0, 0, 0
	for _, s := range r.Scenarios {
		switch s.Status {
		case StatusPass:
			r.Passed++
		case StatusFail:
			r.Failed++
		case StatusSkip:
			r.Skipped++
		}
	}
}

// ScenarioResult is one scenario's expected and observed verdicts.
type ScenarioResult struct {
	Name        string           `json:"name"`
	Description string           `json:"description"`
	Row         string           `json:"contract_row,omitempty"`
	Agent       string           `json:"agent"`
	Streaming   bool             `json:"streaming"`
	Status      Status           `json:"status"`
	SkipReason  string           `json:"skip_reason,omitempty"`
	Expected    scenarios.Expect `json:"expected"`
	Got         Got              `json:"got"`
	// Mismatches name each metric that disagrees with the expectation.
	Mismatches []string      `json:"mismatches,omitempty"`
	Fidelity   Fidelity      `json:"fidelity"`
	Timings    Timings       `json:"timings"`
	Rollouts   []RolloutNote `json:"rollouts,omitempty"`
}

// Got is the observed verdict of the scenario's (first failing, else first)
// rollout: what the finalized record says.
type Got struct {
	RolloutID  string         `json:"rollout_id"`
	MaskSample bool           `json:"mask_sample"`
	Metrics    map[string]any `json:"metrics"`
	Error      string         `json:"error,omitempty"`
	AgentError string         `json:"agent_error,omitempty"`
	Calls      []agent.Call   `json:"calls,omitempty"`
	// Redundant: delivery found token ids already on the record (a native
	// agent; docs/consumer.md). Untouched: delivery did not change the record. Retired: the
	// snapshot was retired after the record was written.
	Redundant bool `json:"redundant,omitempty"`
	Untouched bool `json:"untouched,omitempty"`
	Retired   bool `json:"retired,omitempty"`
}

// Timings are wall-clock phases, in milliseconds, summed over rollouts.
type Timings struct {
	AgentMS    float64 `json:"agent_ms"`
	FinalizeMS float64 `json:"finalize_ms"`
	TotalMS    float64 `json:"total_ms"`
}

// RolloutNote is one rollout of a scenario.
type RolloutNote struct {
	RolloutID  string   `json:"rollout_id"`
	MaskSample bool     `json:"mask_sample"`
	Retired    bool     `json:"retired"`
	Mismatches []string `json:"mismatches,omitempty"`
}
