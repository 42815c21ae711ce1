package vllm

import (
	"sync"
	"time"
)

// LedgerEntry is the ground truth of one generation.
type LedgerEntry struct {
	// Seq numbers generations from 1 in the order they finished; a reader
	// that keeps the last Seq it saw asks only for newer ones
	// (GET /fake/ledger?after=SEQ, Server.LedgerAfter).
	Seq               uint64    `json:"seq"`
	RequestID         string    `json:"request_id"`
	Model             string    `json:"model"`
	PromptTokenIDs    []int     `json:"prompt_token_ids"`
	GeneratedTokenIDs []int     `json:"generated_token_ids"`
	LogProbs          []float64 `json:"log_probs"`
	FinishReason      string    `json:"finish_reason"`
	Text              string    `json:"text"`
	Created           time.Time `json:"created"`
}

// entryOverhead approximates the bytes an entry costs beyond its slices and
// strings (struct, slice headers, the time, the map-free JSON-ready shape).
const entryOverhead = 192

// size is the entry's approximate memory footprint in bytes: what the byte
// bound of the ledger counts.
func (e *LedgerEntry) size() int64 {
	return entryOverhead + int64(8*(len(e.PromptTokenIDs)+len(e.GeneratedTokenIDs)+len(e.LogProbs))) +
		int64(len(e.Text)+len(e.RequestID)+len(e.Model)+len(e.FinishReason))
}

// ledger is a concurrency-safe ring of generations, bounded by entry count
// and by bytes so a long load test with long prompts stays bounded: the
// oldest entries are dropped first, and Dropped says how many went.
type ledger struct {
	mu       sync.Mutex
	limit    int   // entries; 0 = unbounded
	maxBytes int64 // 0 = unbounded
	entries  []LedgerEntry
	start    int // entries[start:] are live
	bytes    int64
	seq      uint64
	dropped  uint64
}

func (l *ledger) add(e LedgerEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	e.Seq = l.seq
	l.entries = append(l.entries, e)
	l.bytes += e.size()
	for l.live() > 1 && ((l.limit > 0 && l.live() > l.limit) || (l.maxBytes > 0 && l.bytes > l.maxBytes)) {
		l.bytes -= l.entries[l.start].size()
		l.entries[l.start] = LedgerEntry{} // let the slices go now
		l.start++
		l.dropped++
	}
	if l.start > 0 && l.start >= len(l.entries)/2 {
		// Compact rarely (amortised O(1)) instead of shifting on every drop.
		l.entries = append(make([]LedgerEntry, 0, 2*l.live()+1), l.entries[l.start:]...)
		l.start = 0
	}
}

func (l *ledger) live() int { return len(l.entries) - l.start }

// after returns a copy of the live entries with Seq > seq, oldest first, and
// the number of entries dropped so far.
func (l *ledger) after(seq uint64) ([]LedgerEntry, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	live := l.entries[l.start:]
	i := 0
	if n := len(live); n > 0 && seq >= live[0].Seq {
		i = min(int(seq-live[0].Seq)+1, n) // Seq is contiguous within the ring
	}
	return append([]LedgerEntry(nil), live[i:]...), l.dropped
}

// stats reports the live entries, their bytes and the dropped count.
func (l *ledger) stats() (entries int, bytes int64, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live(), l.bytes, l.dropped
}
