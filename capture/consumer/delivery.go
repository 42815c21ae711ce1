package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/capbench/capbench/capture/consumer/builder"
	"github.com/capbench/capbench/capture/store"
)

// Rollout is one finished rollout record (a JSON object of the rollouts
// JSONL). Decode it with json.Decoder.UseNumber so numbers survive a rewrite.
type Rollout = map[string]any

// Record keys delivery reads and writes.
const (
	KeyRolloutID      = "_ng_rollout_id"
	KeyTaskIndex      = "_ng_task_index"
	KeyRolloutIndex   = "_ng_rollout_index"
	KeyAttemptIndex   = "_ng_attempt_index"
	KeyTerminalCallID = "_ng_terminal_model_call_id"
	KeyDeclaredID     = "terminal_response_id"
	KeyResponse       = "response"
	KeyMaskSample     = "mask_sample"
	KeyTokenCapture   = "_ng_token_capture"
)

// ErrMalformedRolloutID is wrapped by RolloutID errors.
var ErrMalformedRolloutID = errors.New("malformed rollout id")

var rolloutIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// RolloutID derives the capture key of a record (docs/consumer.md, "The rollouts
// record format"): the explicit
// `_ng_rollout_id`, else `<task>-<rollout>`, plus `-a<n>` for an attempt
// index above zero. present is false when the record names no id; err is set
// for a malformed explicit id or attempt index. Unlike Python, the whole
// string must match (an id ending in a newline is malformed).
func RolloutID(rec Rollout) (id string, present bool, err error) {
	if v, ok := rec[KeyRolloutID]; ok && v != nil {
		s, isString := v.(string)
		if !isString || !rolloutIDPattern.MatchString(s) {
			return "", false, fmt.Errorf("%w: explicit %s %s is not a valid rollout id", ErrMalformedRolloutID, KeyRolloutID, pyRepr(v))
		}
		id = s
	} else {
		task, okTask := rec[KeyTaskIndex]
		roll, okRoll := rec[KeyRolloutIndex]
		if !okTask || !okRoll || task == nil || roll == nil {
			return "", false, nil
		}
		id = pyStr(task) + "-" + pyStr(roll)
	}
	if v, ok := rec[KeyAttemptIndex]; ok && v != nil {
		n, ok := attemptInt(v)
		if !ok {
			return "", false, fmt.Errorf("%w: %s %s is not an integer", ErrMalformedRolloutID, KeyAttemptIndex, pyRepr(v))
		}
		if n > 0 {
			id += "-a" + strconv.FormatInt(n, 10)
		}
	}
	return id, true, nil
}

func attemptInt(v any) (int64, bool) {
	switch t := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(t.String(), 10, 64)
		return n, err == nil
	case float64:
		if t == float64(int64(t)) {
			return int64(t), true
		}
	case int:
		return int64(t), true
	case int64:
		return t, true
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// pyStr renders a scalar as Python's str() would.
func pyStr(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case json.Number:
		return t.String()
	case float64:
		if t == float64(int64(t)) {
			return strconv.FormatInt(int64(t), 10)
		}
		return strconv.FormatFloat(t, 'g', -1, 64)
	case bool:
		if t {
			return "True"
		}
		return "False"
	case nil:
		return "None"
	}
	return fmt.Sprint(v)
}

// pyRepr renders a value as Python's repr() would, for error texts.
func pyRepr(v any) string {
	if s, ok := v.(string); ok {
		return builder.PyRepr(s)
	}
	return pyStr(v)
}

// carriesTokenIDs reports whether the record's response already holds token
// ids (a native agent): any output item with non-empty generation ids.
func carriesTokenIDs(rec Rollout) bool {
	resp, ok := rec[KeyResponse].(map[string]any)
	if !ok {
		return false
	}
	output, _ := resp["output"].([]any)
	for _, raw := range output {
		item, ok := raw.(map[string]any)
		if !ok {
			continue
		}
		if ids, ok := item["generation_token_ids"].([]any); ok && len(ids) > 0 {
			return true
		}
		if ids, ok := item["generation_token_ids"].([]int); ok && len(ids) > 0 {
			return true
		}
	}
	return false
}

// unusable marks rec masked with an error and returns Gym's unusable build.
func unusable(rec Rollout, text string) *Result {
	m := Metrics{Failed: true, NCalls: 0, Error: text}
	rec[KeyMaskSample] = true
	rec[KeyTokenCapture] = m
	return &Result{Unusable: true, MaskSample: true, Error: text, Metrics: m}
}

func truthyString(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case bool:
		if !t {
			return ""
		}
	case json.Number:
		if f, err := t.Float64(); err == nil && f == 0 {
			return ""
		}
	}
	return pyStr(v)
}

// InputFromRollout takes attribution's evidence from a finished record: the
// model and the verified response (a non-empty `response` object), the
// explicit terminal call id and the declared terminal response id.
func InputFromRollout(rec Rollout) Input {
	in := Input{
		ExplicitCallID:     truthyString(rec[KeyTerminalCallID]),
		DeclaredResponseID: truthyString(rec[KeyDeclaredID]),
	}
	if resp, ok := rec[KeyResponse].(map[string]any); ok {
		in.Model, _ = resp["model"].(string)
		if len(resp) > 0 {
			in.Response = resp
		}
	}
	return in
}

// Finalize rebuilds one finished rollout record in place (docs/consumer.md, "Delivery and
// retirement"): it replaces
// `response.output` with the projection, attaches `_ng_token_capture` and
// sets `mask_sample` when masked. It never fails; it returns nil when src is
// nil or a record that already carries token ids cannot be frozen.
func Finalize(ctx context.Context, rec Rollout, src store.Source, opts Options) *Result {
	if src == nil || rec == nil {
		return nil
	}
	id, present, err := RolloutID(rec)
	if err != nil {
		return unusable(rec, err.Error())
	}
	if carriesTokenIDs(rec) {
		if !present {
			return nil
		}
		snap, err := src.Freeze(ctx, id)
		if err != nil || snap == nil {
			opts.logger().Warn("token capture: cannot freeze the redundant capture of a native agent", "rollout_id", id, "error", err)
			return nil
		}
		return &Result{RolloutID: id, Redundant: true,
			Snapshot: &SnapshotRef{SnapshotID: snap.SnapshotID, Version: snap.Version}}
	}
	if !present {
		return unusable(rec, ErrTextNoKey)
	}
	respObj, respIsObject := rec[KeyResponse].(map[string]any)
	res, err := Consume(ctx, src, id, InputFromRollout(rec), opts)
	if err != nil {
		return unusable(rec, PythonErrorText(err))
	}
	if res == nil {
		return unusable(rec, ErrTextNothing)
	}
	if res.RebuiltResponse != nil {
		if respIsObject {
			respObj["output"] = res.RebuiltResponse["output"]
		} else {
			rec[KeyResponse] = res.RebuiltResponse
		}
	}
	m := res.Metrics
	m.Error = res.Error
	if res.MaskSample {
		opts.logger().Warn("token capture: rollout masked", "rollout_id", id, "error", res.Error)
		rec[KeyMaskSample] = true
	}
	rec[KeyTokenCapture] = m
	return res
}

// CanRetire reports whether a build may have its snapshot retired once its
// record is durable: present, not masked, and rebuilt or redundant.
func CanRetire(r *Result) bool {
	return r != nil && !r.MaskSample && (r.RebuiltResponse != nil || r.Redundant)
}

// Retire drops the consumed snapshot (conditional on its id and version).
// Call it only after the record is durably written. Masked and failed builds
// are never retired, so their evidence stays for diagnosis.
func Retire(ctx context.Context, rolloutID string, src store.Source, r *Result) bool {
	if src == nil || !CanRetire(r) {
		return false
	}
	if r.Snapshot == nil {
		slog.Warn("token capture: build has no snapshot identity; not retiring", "rollout_id", rolloutID)
		return false
	}
	dropped, err := src.Drop(ctx, rolloutID, r.Snapshot.SnapshotID, r.Snapshot.Version)
	if err != nil {
		slog.Warn("token capture: retiring the snapshot failed", "rollout_id", rolloutID, "error", err)
		return false
	}
	return dropped
}
