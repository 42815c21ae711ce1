package driver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"path/filepath"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/env"
)

// snapshotView is a frozen rollout.
type snapshotView = *store.Snapshot

type envSource struct{ e env.Env }

func (s envSource) freeze(ctx context.Context, id string) (snapshotView, error) {
	return s.e.Source().Freeze(ctx, id)
}

func (s envSource) ledger(ctx context.Context) ([]env.LedgerEntry, error) { return s.e.Ledger(ctx) }

// maxProblems bounds the mismatches a result lists.
const maxProblems = 10

// checkCapture freezes the rollout of every proxied call that succeeded and
// compares it with the fake's ledger (bit for bit, harness.CheckFidelity) or,
// without a ledger, with what the client received (token counts).
func checkCapture(ctx context.Context, st *stack, samples []bench.Sample) *bench.Capture {
	c := &bench.Capture{Store: st.store, CapturedAll: true, FidelityMethod: "ledger"}
	ledger, err := st.source.ledger(ctx)
	if err != nil {
		if !errors.Is(err, env.ErrUnsupported) {
			c.Problems = append(c.Problems, "ledger: "+err.Error())
		}
		ledger, c.FidelityMethod = nil, "structural"
	}
	idx := indexLedger(ledger)
	var first, last int64 = -1, 0
	byRollout := map[string][]*bench.Sample{}
	var order []string
	for i := range samples {
		s := &samples[i]
		if s.Path != bench.PathProxy || s.RolloutID == "" || !s.OK() {
			continue
		}
		c.ProxiedOK++
		if first < 0 || s.StartNS < first {
			first = s.StartNS
		}
		last = max(last, s.EndNS)
		if _, ok := byRollout[s.RolloutID]; !ok {
			order = append(order, s.RolloutID)
		}
		byRollout[s.RolloutID] = append(byRollout[s.RolloutID], s)
	}
	for _, id := range order {
		sent := byRollout[id]
		snap, err := st.source.freeze(ctx, id)
		if err != nil || snap == nil || len(snap.Entries) < len(sent) {
			c.CapturedAll = false
			n := 0
			if snap != nil {
				n = len(snap.Entries)
			}
			addProblem(c, fmt.Sprintf("rollout %s: %d of %d calls captured (%v)", id, n, len(sent), err))
			if snap == nil {
				continue
			}
		}
		c.Rollouts++
		c.Records += len(snap.Entries)
		c.FidelityCalls += len(snap.Entries)
		if ledger != nil {
			f := harness.CheckFidelity(snap, idx.candidates(snap), nil)
			c.FidelityExact += f.Matched
			for _, p := range f.Problems {
				addProblem(c, id+": "+p)
			}
			continue
		}
		// Structural: the captured calls carry what the client received.
		var gotGen, wantGen int
		for _, e := range snap.Entries {
			gotGen += len(e.GenerationTokenIDs)
		}
		for _, s := range sent {
			wantGen += s.OutputTokens
		}
		if gotGen == wantGen && len(snap.Entries) == len(sent) {
			c.FidelityExact += len(snap.Entries)
		} else {
			addProblem(c, fmt.Sprintf("%s: captured %d calls / %d generated tokens, the client saw %d / %d", id, len(snap.Entries), gotGen, len(sent), wantGen))
		}
	}
	if st.captureDir != "" {
		c.Bytes = dirBytes(st.captureDir)
	}
	if st.puts != nil {
		stats, errs := st.puts.Stats()
		c.PutLatency, c.PutErrors = &stats, errs
	}
	if span := float64(last-first) / 1e9; first >= 0 && span > 0 {
		c.RecordsPerS = float64(c.Records) / span
		c.BytesPerS = float64(c.Bytes) / span
	}
	return c
}

func addProblem(c *bench.Capture, p string) {
	if len(c.Problems) < maxProblems {
		c.Problems = append(c.Problems, p)
	}
}

// dirBytes is the size of every file under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// consumerOptions are NeMo Gym's defaults with warnings kept quiet (masked
// rollouts are counted in the result instead).
func consumerOptions() consumer.Options {
	opts := consumer.DefaultOptions()
	opts.Logger = slog.New(slog.DiscardHandler)
	return opts
}

// ledgerIndex finds the ledger generations a snapshot can match by prompt,
// so checking thousands of rollouts does not rescan the whole ledger for
// each one.
type ledgerIndex struct {
	byPrompt map[uint64][]env.LedgerEntry
	oldest   *env.LedgerEntry // kept in every subset: it tells whether the ring dropped entries
}

func promptHash(ids []int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint64(b[:], uint64(id))
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

func indexLedger(ledger []env.LedgerEntry) *ledgerIndex {
	ix := &ledgerIndex{byPrompt: map[uint64][]env.LedgerEntry{}}
	for i := range ledger {
		l := &ledger[i]
		k := promptHash(l.PromptTokenIDs)
		ix.byPrompt[k] = append(ix.byPrompt[k], *l)
		if ix.oldest == nil || (l.Seq > 0 && l.Seq < ix.oldest.Seq) {
			ix.oldest = l
		}
	}
	return ix
}

func (ix *ledgerIndex) candidates(snap *store.Snapshot) []env.LedgerEntry {
	var out []env.LedgerEntry
	seen := map[uint64]bool{}
	for _, e := range snap.Entries {
		k := promptHash(e.PromptTokenIDs)
		if !seen[k] {
			seen[k] = true
			out = append(out, ix.byPrompt[k]...)
		}
	}
	if ix.oldest != nil {
		o := *ix.oldest
		o.PromptTokenIDs = nil // matches no prompt; only its Seq counts
		out = append(out, o)
	}
	return out
}
