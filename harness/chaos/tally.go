package chaos

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
)

// tally freezes every rollout of the capture directory once every proxy has
// stopped (the directory is not reused) and counts
// the load's acknowledged calls into row. ledger is the engine's ground
// truth (nil skips the token comparison).
func tally(ctx context.Context, dir string, l *load, ledger []vllm.LedgerEntry, row *Row) error {
	fs, err := store.NewFileStore(dir)
	if err != nil {
		return fmt.Errorf("open the capture dir to count: %w", err)
	}
	defer fs.Close()
	truth := make(map[string]bool, len(ledger))
	for _, e := range ledger {
		truth[tokenKey(e.PromptTokenIDs, e.GeneratedTokenIDs)] = true
	}
	row.Tried, row.Acknowledged = int(l.tried.Load()), int(l.acked.Load())
	l.mu.Lock()
	defer l.mu.Unlock()
	for rollout, acked := range l.acks {
		// Freeze is what the consumer does: it also counts calls begun and
		// never finished (dangling intents) as incomplete.
		snap, err := fs.Freeze(ctx, rollout)
		if err != nil {
			row.Corrupt += len(acked)
			continue
		}
		entries, masked := snap.Entries, snap.Incomplete
		byResponse := map[string]int{}
		for _, e := range entries {
			if e.ResponseID != nil {
				byResponse[*e.ResponseID]++
			}
			if ledger != nil && !truth[tokenKey(e.PromptTokenIDs, e.GenerationTokenIDs)] {
				row.Corrupt++
			}
		}
		for _, id := range acked {
			n := byResponse[id]
			switch {
			case n > 1:
				row.Corrupt++ // the same call twice
			case n == 1:
				row.Stored++
			case !masked:
				row.Lost++
			}
			if masked {
				row.Masked++
			}
		}
	}
	return nil
}

func tokenKey(prompt, gen []int) string {
	var b strings.Builder
	for _, id := range prompt {
		b.WriteString(strconv.Itoa(id))
		b.WriteByte(',')
	}
	b.WriteByte('|')
	for _, id := range gen {
		b.WriteString(strconv.Itoa(id))
		b.WriteByte(',')
	}
	return b.String()
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
