package harness

import (
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/scenarios"
)

// ExplicitCallKey is the record key of an explicit terminal model call id
// (a gate's seal or an agent's declaration; docs/consumer.md, "Terminal attribution").
const ExplicitCallKey = "_ng_terminal_model_call_id"

// Sealer returns the step that stamps seal onto a finished record from its
// frozen capture, or nil for NoSeal. A snapshot without entries leaves the
// record alone: a gate that saw no call has nothing to seal.
func Sealer(seal scenarios.Seal) func(rec map[string]any, snap *store.Snapshot) {
	if seal != scenarios.SealFirstCall {
		return nil
	}
	return func(rec map[string]any, snap *store.Snapshot) {
		if rec == nil || snap == nil {
			return
		}
		if e := firstCall(snap.Entries); e != nil {
			rec[ExplicitCallKey] = e.ModelCallID
		}
	}
}

// firstCall is the entry with the shortest prompt (ties: smallest call id):
// in one conversation, the call every other call extends.
func firstCall(entries []*record.Entry) *record.Entry {
	var first *record.Entry
	for _, e := range entries {
		if e == nil {
			continue
		}
		if first == nil || len(e.PromptTokenIDs) < len(first.PromptTokenIDs) ||
			(len(e.PromptTokenIDs) == len(first.PromptTokenIDs) && e.ModelCallID < first.ModelCallID) {
			first = e
		}
	}
	return first
}
