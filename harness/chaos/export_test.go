package chaos

import (
	"context"

	"github.com/capbench/capbench/fakes/vllm"
)

// TallyAcks counts acks (rollout id → acknowledged response ids, tried
// calls) against dir as a scenario would.
func TallyAcks(ctx context.Context, dir string, tried int, acks map[string][]string, ledger []vllm.LedgerEntry) (Row, error) {
	l := newLoad("t", 1, "http://unused")
	l.tried.Store(int64(tried))
	for id, rs := range acks {
		l.acks[id] = rs
		l.acked.Add(int64(len(rs)))
	}
	var row Row
	err := tally(ctx, dir, l, ledger, &row)
	return row, err
}
