package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"

	"github.com/capbench/capbench/capture/record"
)

// State is a rollout's state object (docs/store.md#the-state-object): the idempotency index
// of the JSONL file plus the lifecycle flags and the change counter.
type State struct {
	Frozen     bool
	Retired    bool
	Incomplete bool
	// SnapshotID is "" until the first freeze, then 32 lowercase hex digits.
	SnapshotID string
	// Version is the change counter whose exact steps docs/store.md#the-state-object fixes (as Gym counts them).
	Version int
	// EntryDigests maps model call id to entry digest for the lines covered
	// by IndexedSize.
	EntryDigests map[string]string
	// IndexedSize is the byte length of the JSONL covered by EntryDigests.
	IndexedSize int64
	// Legacy is set when the stored index was not usable (entry_digests not
	// an object or indexed_size not an integer): the JSONL is re-indexed from
	// byte 0 without counting recovered lines as versions.
	Legacy bool
	// Extra holds keys this store does not interpret (e.g. "refusals" of a
	// newer Gym), written back unchanged.
	Extra map[string]json.RawMessage

	// legacyRaw keeps an unusable index as it was read, so a write that does
	// not re-index (mark_incomplete, drop) preserves it as Python does.
	legacyRaw map[string]json.RawMessage
}

// newState is the state of a rollout without a state file.
func newState() State {
	return State{EntryDigests: map[string]string{}}
}

// Clone returns a deep copy.
func (s State) Clone() State {
	c := s
	c.EntryDigests = maps.Clone(s.EntryDigests)
	if c.EntryDigests == nil {
		c.EntryDigests = map[string]string{}
	}
	c.Extra = cloneRaw(s.Extra)
	c.legacyRaw = cloneRaw(s.legacyRaw)
	return c
}

func cloneRaw(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = bytes.Clone(v)
	}
	return out
}

// ParseState decodes a state file. A document that is not a JSON object, or
// whose flags, version or snapshot id have the wrong type, is ErrCorrupt.
func ParseState(data []byte) (State, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return State{}, fmt.Errorf("%w: state is not a JSON object", ErrCorrupt)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return State{}, fmt.Errorf("%w: state: %w", ErrCorrupt, err)
	}
	st := newState()
	var err error
	if st.Frozen, err = rawBool(raw, "frozen"); err != nil {
		return State{}, err
	}
	if st.Retired, err = rawBool(raw, "retired"); err != nil {
		return State{}, err
	}
	if st.Incomplete, err = rawBool(raw, "incomplete"); err != nil {
		return State{}, err
	}
	if v, ok := raw["snapshot_id"]; ok {
		if err := json.Unmarshal(v, &st.SnapshotID); err != nil {
			return State{}, fmt.Errorf("%w: state snapshot_id: %w", ErrCorrupt, err)
		}
	}
	if v, ok := raw["version"]; ok {
		n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
		if err != nil {
			return State{}, fmt.Errorf("%w: state version %s is not an integer", ErrCorrupt, v)
		}
		st.Version = n
	}
	digestsOK, sizeOK := false, false
	if v, ok := raw["entry_digests"]; ok {
		var m map[string]string
		if bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) && json.Unmarshal(v, &m) == nil {
			st.EntryDigests, digestsOK = m, true
		}
	}
	if v, ok := raw["indexed_size"]; ok {
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
			st.IndexedSize, sizeOK = n, true
		}
	}
	if !digestsOK || !sizeOK {
		st.Legacy = true
		st.EntryDigests = map[string]string{}
		st.IndexedSize = 0
		st.legacyRaw = map[string]json.RawMessage{}
		for _, k := range []string{"entry_digests", "indexed_size"} {
			if v, ok := raw[k]; ok {
				st.legacyRaw[k] = v
			}
		}
	}
	for _, k := range coreStateKeys {
		delete(raw, k)
	}
	if len(raw) > 0 {
		st.Extra = raw
	}
	return st, nil
}

var coreStateKeys = []string{"entry_digests", "frozen", "incomplete", "indexed_size", "retired", "snapshot_id", "version"}

func rawBool(raw map[string]json.RawMessage, key string) (bool, error) {
	v, ok := raw[key]
	if !ok {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return false, fmt.Errorf("%w: state %s is not a boolean", ErrCorrupt, key)
	}
	return b, nil
}

// MarshalCanonical encodes the state as Gym writes it: canonical JSON with
// sorted keys, every core key present, unknown keys preserved; no newline.
func (s State) MarshalCanonical() ([]byte, error) {
	obj := make(map[string]any, len(coreStateKeys)+len(s.Extra))
	for k, v := range s.Extra {
		obj[k] = v
	}
	digests := make(map[string]any, len(s.EntryDigests))
	for k, v := range s.EntryDigests {
		digests[k] = v
	}
	obj["entry_digests"] = digests
	obj["indexed_size"] = s.IndexedSize
	if s.Legacy {
		delete(obj, "entry_digests")
		delete(obj, "indexed_size")
		for k, v := range s.legacyRaw {
			obj[k] = v
		}
	}
	obj["frozen"] = s.Frozen
	obj["incomplete"] = s.Incomplete
	obj["retired"] = s.Retired
	obj["snapshot_id"] = s.SnapshotID
	obj["version"] = s.Version
	b, err := record.Canonical(obj)
	if err != nil {
		return nil, fmt.Errorf("store: encode state: %w", err)
	}
	return b, nil
}
