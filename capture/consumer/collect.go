package consumer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/capbench/capbench/capture/store"
)

// FinalizeSummary counts what FinalizeRollouts did.
type FinalizeSummary struct {
	Records   int // records read and written
	Finalized int // records a build was returned for
	Masked    int
	Retired   int
}

// FinalizeRollouts does what Gym's collector does with a rollouts file:
// every record read from in is finalized against src, appended durably to
// w, and only then is its snapshot retired (when the build allows it). A
// kill switch that trips stops the run after the tripping record is written.
// A line that is not a JSON object stops the run with an error naming it.
func FinalizeRollouts(ctx context.Context, in io.Reader, w *Writer, src store.Source, opts Options, kill *KillSwitch) (FinalizeSummary, error) {
	var sum FinalizeSummary
	r := bufio.NewReader(in)
	for lineNo := 1; ; lineNo++ {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		line, readErr := r.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return sum, fmt.Errorf("read rollouts: %w", readErr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			rec, err := decodeRollout(line)
			if err != nil {
				return sum, fmt.Errorf("rollouts line %d: %w", lineNo, err)
			}
			res := Finalize(ctx, rec, src, opts)
			var tripped error
			if res != nil {
				sum.Finalized++
				if res.MaskSample {
					sum.Masked++
				}
				if kill != nil {
					tripped = kill.Observe(res)
				}
			}
			if err := w.Append(rec); err != nil {
				return sum, err
			}
			sum.Records++
			if id, present, err := RolloutID(rec); err == nil && present && Retire(ctx, id, src, res) {
				sum.Retired++
			}
			if tripped != nil {
				return sum, tripped
			}
		}
		if errors.Is(readErr, io.EOF) {
			return sum, nil
		}
	}
}

// FindRollout returns the first record of a rollouts JSONL whose capture
// key is id.
func FindRollout(in io.Reader, id string) (Rollout, error) {
	r := bufio.NewReader(in)
	for lineNo := 1; ; lineNo++ {
		line, readErr := r.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return nil, fmt.Errorf("read rollouts: %w", readErr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			rec, err := decodeRollout(line)
			if err != nil {
				return nil, fmt.Errorf("rollouts line %d: %w", lineNo, err)
			}
			if got, present, err := RolloutID(rec); err == nil && present && got == id {
				return rec, nil
			}
		}
		if errors.Is(readErr, io.EOF) {
			return nil, fmt.Errorf("%w: %q", ErrRolloutNotFound, id)
		}
	}
}

// ErrRolloutNotFound is returned by FindRollout.
var ErrRolloutNotFound = errors.New("no rollout record with this rollout id")

func decodeRollout(line []byte) (Rollout, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var rec Rollout
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if rec == nil {
		return nil, errors.New("not a JSON object: null")
	}
	// Decode reads one value; anything after it on the line would be
	// dropped from the rewritten file without a word.
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not a single JSON object: content follows it at byte %d", end)
	}
	return rec, nil
}

// VerdictLine is the per-rollout summary `capbench verdict` prints.
type VerdictLine struct {
	RolloutID  string  `json:"rollout_id"`
	MaskSample bool    `json:"mask_sample"`
	Metrics    Metrics `json:"metrics"`
	Error      *string `json:"error"`
	Output     []any   `json:"output"`
}

// NewVerdictLine summarises a result.
func NewVerdictLine(r *Result) VerdictLine {
	v := VerdictLine{RolloutID: r.RolloutID, MaskSample: r.MaskSample, Metrics: r.Metrics, Output: []any{}}
	if r.Error != "" {
		e := r.Error
		v.Error = &e
	}
	if r.RebuiltResponse != nil {
		if out, ok := r.RebuiltResponse["output"].([]any); ok {
			v.Output = out
		}
	}
	return v
}

// RolloutLister lists the rollouts of a capture directory.
type RolloutLister interface {
	Rollouts(ctx context.Context) ([]string, error)
}

// VerdictDir consumes every rollout of a capture directory, in rollout-id
// order, without a verified response and without retiring anything, and
// writes one VerdictLine per rollout as a JSON line. Freezing marks each
// rollout frozen, as Gym's consumer does.
func VerdictDir(ctx context.Context, src interface {
	store.Source
	RolloutLister
}, opts Options, out io.Writer) error {
	ids, err := src.Rollouts(ctx)
	if err != nil {
		return fmt.Errorf("list rollouts: %w", err)
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	for _, id := range ids {
		res, err := Consume(ctx, src, id, Input{}, opts)
		if err != nil {
			return err
		}
		if err := writeVerdictLine(bw, NewVerdictLine(res)); err != nil {
			return fmt.Errorf("write verdict of %s: %w", id, err)
		}
	}
	return bw.Flush()
}

// writeVerdictLine streams v as one JSON line, with the bytes encoding/json
// would write for the struct: the rebuilt output of a long rollout is tens of
// megabytes and is never held whole.
func writeVerdictLine(out io.Writer, v VerdictLine) error {
	e := newJSONEncoder(out)
	e.raw(`{"rollout_id":`)
	if err := e.str(v.RolloutID); err != nil {
		return err
	}
	e.raw(`,"mask_sample":`)
	_ = e.value(v.MaskSample)
	e.raw(`,"metrics":`)
	if err := e.fallback(v.Metrics); err != nil {
		return err
	}
	e.raw(`,"error":`)
	if v.Error == nil {
		e.raw("null")
	} else if err := e.str(*v.Error); err != nil {
		return err
	}
	e.raw(`,"output":`)
	if err := e.value(v.Output); err != nil {
		return err
	}
	e.raw("}\n")
	e.flush()
	return e.err
}
