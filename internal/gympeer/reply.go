package gympeer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// The driver's operations (driver.py).
const (
	// OpInfo reports the record schema Gym reads.
	OpInfo = "info"
	// OpConsume times trajectories_for_rollout (freeze, build, verdict) on Dir.
	OpConsume = "consume"
	// OpPut times TokenCaptureStore writing every entry of EntriesFile into Dir.
	OpPut = "put"
	// OpRead freezes RolloutIDs in Dir with Gym's store and lists what it read.
	OpRead = "read"
)

// Put modes: Gym's async put on its default thread pool, as its capture path
// calls it, or one thread per rollout calling append directly.
const (
	PutAsync   = "async"
	PutThreads = "threads"
)

// Request is one line to the driver.
type Request struct {
	Op          string `json:"op"`
	Dir         string `json:"dir,omitempty"`
	RolloutID   string `json:"rollout_id,omitempty"`
	Model       string `json:"model,omitempty"`
	EntriesFile string `json:"entries_file,omitempty"`
	Mode        string `json:"mode,omitempty"`
	// Intent makes each put begin_call first, as Gym's capture path does.
	Intent     bool     `json:"intent,omitempty"`
	RolloutIDs []string `json:"rollout_ids,omitempty"`
}

// Reply is the driver's answer; which fields are set depends on the op.
type Reply struct {
	OK    bool   `json:"ok"`
	Op    string `json:"op"`
	Error string `json:"error"`

	// Seconds and CPUSeconds time the Gym call inside Python (consume, put).
	Seconds    *float64 `json:"seconds"`
	CPUSeconds float64  `json:"cpu_seconds"`

	SchemaVersion int `json:"schema_version"`

	// consume: Gym's verdict and metrics; ErrorText is its build error.
	MaskSample               bool   `json:"mask_sample"`
	BuildError               string `json:"-"`
	NCalls                   int    `json:"n_calls"`
	Chains                   int    `json:"chains"`
	GeneratedTokensDelivered int    `json:"generated_tokens_delivered"`

	// put
	Puts int `json:"puts"`

	// read
	Rollouts map[string]ReadRollout `json:"rollouts"`
}

// ReadRollout is what Gym's freeze read of one rollout.
type ReadRollout struct {
	ModelCallIDs []string `json:"model_call_ids"`
	// EntryDigests are SHA-256 of Gym's canonical line of each entry.
	EntryDigests []string `json:"entry_digests"`
	Incomplete   bool     `json:"incomplete"`
}

// ParseReply decodes one driver line answering op. A line that is not the
// driver's JSON, a reply to another op, an error Gym raised, or a timed op
// without a valid time is an error naming what was wrong.
func ParseReply(line []byte, op string) (Reply, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		return Reply{}, fmt.Errorf("gym driver %s: empty reply (did the driver exit early?)", op)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	var rep Reply
	if err := dec.Decode(&rep); err != nil {
		return Reply{}, fmt.Errorf("gym driver %s: reply is not JSON (%w): %q", op, err, clip(line))
	}
	if dec.More() {
		return Reply{}, fmt.Errorf("gym driver %s: more than one JSON value on the reply line: %q", op, clip(line))
	}
	// The build error arrives in "error" too; keep it apart from a failed op.
	if rep.OK {
		rep.BuildError, rep.Error = rep.Error, ""
	}
	switch {
	case rep.Op != op:
		return Reply{}, fmt.Errorf("gym driver: reply is for op %q, want %q: %q", rep.Op, op, clip(line))
	case !rep.OK && rep.Error == "":
		return Reply{}, fmt.Errorf("gym driver %s: failed without saying why: %q", op, clip(line))
	case !rep.OK:
		return Reply{}, fmt.Errorf("gym driver %s: Gym raised %s", op, rep.Error)
	}
	if op == OpConsume || op == OpPut {
		if rep.Seconds == nil {
			return Reply{}, errors.New("gym driver " + op + ": reply has no seconds")
		}
		if s := *rep.Seconds; s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			return Reply{}, fmt.Errorf("gym driver %s: seconds %v is not a duration", op, s)
		}
	}
	if op == OpInfo && rep.SchemaVersion <= 0 {
		return Reply{}, fmt.Errorf("gym driver info: no record schema version in %q", clip(line))
	}
	return rep, nil
}

// Secs is the Python-side time of a timed reply.
func (r Reply) Secs() float64 {
	if r.Seconds == nil {
		return 0
	}
	return *r.Seconds
}

func clip(b []byte) []byte {
	if len(b) > 300 {
		return append(b[:300:300], "…"...)
	}
	return b
}
