package record_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/capbench/capbench/capture/record"
)

// FuzzParseLine checks that no input panics the reader, that errors wrap
// ErrInvalid, that only valid JSON is accepted, and that every accepted line re-encodes to bytes that parse
// back to the same encoding (the canonical form is a fixed point).
func FuzzParseLine(f *testing.F) {
	if root := fixturesDir(); root != "" {
		lines, err := jsonlLines(root, "gym-store/docs-extras/1[1-5]*/files*/*.jsonl", "gym-consumer/0[1-2]*/capture/*.jsonl")
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range lines {
			// Small lines only: big seeds slow every mutation round.
			if len(l.data) <= 8<<10 {
				f.Add(l.data)
			}
		}
	}
	f.Add([]byte(`{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1,2],"generation_token_ids":[3],"generation_log_probs":[-0.5]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := record.ParseLine(line)
		if err != nil {
			if !errors.Is(err, record.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if !json.Valid(line) {
			t.Fatalf("accepted a line that is not JSON: %q", line)
		}
		out, err := e.MarshalCanonical()
		if err != nil {
			// Only values Python could not have written either may fail.
			if !errors.Is(err, record.ErrNotCanonical) && !errors.Is(err, record.ErrInvalid) {
				t.Fatalf("unexpected encode error: %v", err)
			}
			return
		}
		back, err := record.ParseLine(out)
		if err != nil {
			t.Fatalf("canonical output does not parse: %v\n%s", err, out)
		}
		again, err := back.MarshalCanonical()
		if err != nil {
			t.Fatalf("re-encoding failed: %v", err)
		}
		if !bytes.Equal(out, again) {
			t.Fatalf("canonical form is not stable:\n%s\n%s", out, again)
		}
	})
}
