package consumer

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/capbench/capbench/internal/pyfmt"
)

// Metrics are the capture metrics of one build (docs/consumer.md, "Metrics"), attached to the
// rollout record as `_ng_token_capture`.
type Metrics struct {
	NCalls                   int            `json:"n_calls"`
	TerminalAttribution      *Attribution   `json:"terminal_attribution,omitempty"`
	Chains                   int            `json:"chains"`
	Roots                    int            `json:"roots"`
	QuarantinedCalls         int            `json:"quarantined_calls"`
	QuarantinedFraction      float64        `json:"quarantined_fraction"`
	DeliveredFraction        float64        `json:"delivered_fraction"`
	GeneratedTokensCaptured  int            `json:"generated_tokens_captured"`
	GeneratedTokensDelivered int            `json:"generated_tokens_delivered"`
	ParentLinkFailures       map[string]int `json:"parent_link_failures"`
	UnresolvedParentCalls    int            `json:"unresolved_parent_calls"`
	EmptyGenerationCalls     int            `json:"empty_generation_calls"`
	CaptureIncomplete        bool           `json:"capture_incomplete,omitempty"`
	// Error is only set on the copy attached to the rollout record.
	Error string `json:"error,omitempty"`
	// Failed selects the failed-build shape (docs/consumer.md): only n_calls,
	// terminal_attribution (when attribution ran), capture_incomplete and
	// error are emitted.
	Failed bool `json:"-"`
}

// MarshalJSON emits Gym's key order and Python float forms (1.0, 0.0).
func (m Metrics) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"n_calls":`)
	b.WriteString(strconv.Itoa(m.NCalls))
	if m.TerminalAttribution != nil {
		ta, err := json.Marshal(m.TerminalAttribution)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"terminal_attribution":`)
		b.Write(ta)
	}
	if !m.Failed {
		writeInt(&b, "chains", m.Chains)
		writeInt(&b, "roots", m.Roots)
		writeInt(&b, "quarantined_calls", m.QuarantinedCalls)
		b.WriteString(`,"quarantined_fraction":`)
		b.WriteString(PyFloat(m.QuarantinedFraction))
		b.WriteString(`,"delivered_fraction":`)
		b.WriteString(PyFloat(m.DeliveredFraction))
		writeInt(&b, "generated_tokens_captured", m.GeneratedTokensCaptured)
		writeInt(&b, "generated_tokens_delivered", m.GeneratedTokensDelivered)
		b.WriteString(`,"parent_link_failures":{`)
		keys := make([]string, 0, len(m.ParentLinkFailures))
		for k := range m.ParentLinkFailures {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(m.ParentLinkFailures[k]))
		}
		b.WriteByte('}')
		writeInt(&b, "unresolved_parent_calls", m.UnresolvedParentCalls)
		writeInt(&b, "empty_generation_calls", m.EmptyGenerationCalls)
	}
	if m.CaptureIncomplete {
		b.WriteString(`,"capture_incomplete":true`)
	}
	if m.Error != "" {
		eb, err := json.Marshal(m.Error)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"error":`)
		b.Write(eb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads either shape; metrics without a "chains" key are the
// failed-build shape.
func (m *Metrics) UnmarshalJSON(b []byte) error {
	type plain Metrics
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	_, hasChains := keys["chains"]
	*m = Metrics(p)
	m.Failed = !hasChains
	return nil
}

func writeInt(b *bytes.Buffer, key string, v int) {
	b.WriteString(`,"`)
	b.WriteString(key)
	b.WriteString(`":`)
	b.WriteString(strconv.Itoa(v))
}

// PyFloat formats a float as Python's repr does: shortest round-trip
// digits, fixed notation with a decimal point for 1e-4 <= |f| < 1e16
// (1.0, 0.0, 0.8065), else exponent notation with at least two exponent
// digits (-3.2e-05, 1e+16).
func PyFloat(f float64) string { return pyfmt.Float(f) }

// MarshalJSON emits the shape Gym's built dict has for this kind of result.
func (r *Result) MarshalJSON() ([]byte, error) {
	type kv struct {
		k string
		v any
	}
	var fields []kv
	snapshot := func() {
		if r.Snapshot != nil {
			fields = append(fields, kv{"_capture_snapshot", r.Snapshot})
		}
	}
	switch {
	case r.Redundant:
		fields = append(fields, kv{"rebuilt_response", nil}, kv{"mask_sample", false}, kv{"_redundant_capture", true})
		snapshot()
	case r.Unusable:
		fields = append(fields, kv{"rebuilt_response", nil}, kv{"mask_sample", true}, kv{"error", r.Error}, kv{"metrics", r.Metrics})
	case r.Error != "":
		fields = append(fields, kv{"rollout_id", r.RolloutID}, kv{"builder", r.Builder}, kv{"rebuilt_response", nil},
			kv{"mask_sample", true}, kv{"error", r.Error}, kv{"metrics", r.Metrics})
		snapshot()
	default:
		fields = append(fields, kv{"rollout_id", r.RolloutID}, kv{"builder", r.Builder},
			kv{"rebuilt_response", r.RebuiltResponse}, kv{"metrics", r.Metrics}, kv{"mask_sample", r.MaskSample},
			kv{"unresolved_retries", nonNil(r.UnresolvedRetries)},
			kv{"unresolved_parent_calls", nonNil(r.UnresolvedParentCalls)})
		snapshot()
	}
	// One encoder for the whole line: the rebuilt output of a long rollout
	// is tens of megabytes, so it is written once, into one buffer.
	e := newJSONEncoder(nil)
	e.buf = append(e.buf, '{')
	for i, f := range fields {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		if err := e.str(f.k); err != nil {
			return nil, err
		}
		e.buf = append(e.buf, ':')
		if err := e.value(f.v); err != nil {
			return nil, err
		}
	}
	e.buf = append(e.buf, '}')
	return e.buf, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// marshalNoEscape encodes v as encoding/json does without HTML escaping
// (Python does not escape <, > or &).
func marshalNoEscape(v any) ([]byte, error) {
	e := newJSONEncoder(nil)
	if err := e.value(v); err != nil {
		return nil, err
	}
	return e.buf, nil
}
