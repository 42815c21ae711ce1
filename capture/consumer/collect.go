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
	Records   int // records read and written in this run
	Finalized int // records a build was returned for
	Masked    int
	Retired   int
	// Resumed counts records an earlier, interrupted run had already
	// written to the output; they are not finalized or written again.
	Resumed int
	// RetiredLate counts snapshots of resumed records whose retirement the
	// interrupted run had not reached.
	RetiredLate int
}

// FinalizeRollouts does what Gym's collector does with a rollouts file:
// every record read from in is finalized against src, appended durably to
// w, and only then is its snapshot retired (when the build allows it). The
// whole input is read and checked first, so a bad line stops the run before
// anything is frozen, written or retired. A kill switch that trips stops the
// run after the tripping record is written.
func FinalizeRollouts(ctx context.Context, in io.Reader, w *Writer, src store.Source, opts Options, kill *KillSwitch) (FinalizeSummary, error) {
	recs, err := ReadRollouts(in)
	if err != nil {
		return FinalizeSummary{}, err
	}
	return FinalizeRecords(ctx, recs, nil, w, src, opts, kill)
}

// ReadRollouts reads a whole rollouts JSONL and checks every line: each
// must be one JSON object. Errors name the line.
func ReadRollouts(in io.Reader) ([]Rollout, error) {
	var recs []Rollout
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
			recs = append(recs, rec)
		}
		if errors.Is(readErr, io.EOF) {
			return recs, nil
		}
	}
}

// ErrOutputMismatch reports an existing output file that is not the output
// of an earlier run over the same input.
var ErrOutputMismatch = errors.New("the output file does not continue this input")

// ErrAlreadyFinalized reports an input rollout whose snapshot was retired
// by an earlier run whose output is not the one given.
var ErrAlreadyFinalized = errors.New("rollout already finalized")

// StateReader is the optional part of a source that reports a rollout's
// lifecycle without changing it (the file store has it).
type StateReader interface {
	State(ctx context.Context, rolloutID string) (store.State, error)
}

// FinalizeRecords finalizes recs in order, appending each to w. done are the
// records an earlier run over the same input already wrote (what OpenWriter
// found): they must be the first len(done) records of recs, rollout id for
// rollout id, and are neither finalized nor written again; a resumed record
// that was written but whose snapshot the interrupted run did not retire is
// retired now. Before the first change it also checks that no remaining
// record names a rollout that is already retired, which would otherwise be
// masked as "rollout retired" although its sample was delivered elsewhere.
func FinalizeRecords(ctx context.Context, recs, done []Rollout, w *Writer, src store.Source, opts Options, kill *KillSwitch) (FinalizeSummary, error) {
	var sum FinalizeSummary
	if err := checkResume(ctx, recs, done, src); err != nil {
		return sum, err
	}
	for _, rec := range done {
		sum.Resumed++
		if retireResumed(ctx, rec, src) {
			sum.RetiredLate++
		}
	}
	for _, rec := range recs[len(done):] {
		if err := ctx.Err(); err != nil {
			return sum, err
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
	return sum, nil
}

func checkResume(ctx context.Context, recs, done []Rollout, src store.Source) error {
	if len(done) > len(recs) {
		return fmt.Errorf("%w: it holds %d records, the input only %d", ErrOutputMismatch, len(done), len(recs))
	}
	for i, d := range done {
		want, wantOK, _ := RolloutID(recs[i])
		got, gotOK, _ := RolloutID(d)
		if want != got || wantOK != gotOK {
			return fmt.Errorf("%w: its record %d is rollout %q, input record %d is rollout %q", ErrOutputMismatch, i+1, got, i+1, want)
		}
	}
	sr, ok := src.(StateReader)
	if !ok {
		return nil
	}
	for i, rec := range recs[len(done):] {
		id, present, err := RolloutID(rec)
		if err != nil || !present || store.ValidateRolloutID(id) != nil {
			continue
		}
		st, err := sr.State(ctx, id)
		if err != nil {
			continue // the build reports it as the record's error
		}
		if st.Retired {
			return fmt.Errorf("%w: input record %d (rollout %s) was consumed and retired by an earlier run, "+
				"whose --out holds its finalized record; rerun with that --out to continue it, or leave this record out",
				ErrAlreadyFinalized, len(done)+i+1, id)
		}
	}
	return nil
}

// retireResumed retires the snapshot of a record an interrupted run wrote
// but did not get to retire: an unmasked record whose rollout is still
// frozen. Freezing a frozen rollout returns its snapshot unchanged.
func retireResumed(ctx context.Context, rec Rollout, src store.Source) bool {
	id, present, err := RolloutID(rec)
	if err != nil || !present || rec[KeyMaskSample] == true {
		return false
	}
	if sr, ok := src.(StateReader); ok {
		st, err := sr.State(ctx, id)
		if err != nil || !st.Frozen || st.Retired {
			return false
		}
	}
	snap, err := src.Freeze(ctx, id)
	if err != nil || snap == nil {
		return false
	}
	dropped, err := src.Drop(ctx, id, snap.SnapshotID, snap.Version)
	return err == nil && dropped
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

// RolloutLister lists the rollouts of a capture directory.
type RolloutLister interface {
	Rollouts(ctx context.Context) ([]string, error)
}
