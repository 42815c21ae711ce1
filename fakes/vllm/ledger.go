package vllm

import (
	"encoding/binary"
	"errors"
	"math"
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
	// Text is the generated ids decoded, special tokens included.
	Text    string    `json:"text"`
	Created time.Time `json:"created"`
}

// ledgerChunk is the size of the byte chunks entries are packed into: the
// byte bound holds to within one chunk.
const ledgerChunk = 1 << 20

// ledger is a concurrency-safe ring of generations, bounded by entry count
// and by bytes, so a long load test with long prompts stays bounded: the
// oldest entries are dropped first, and dropped counts them.
//
// Entries are packed into pointer-free byte chunks (token ids as varints,
// log-probs as their exact bits) and decoded when read: the garbage
// collector never scans them, so a large ledger costs the serving path
// nothing, and it takes about a third of the memory of LedgerEntry values.
type ledger struct {
	mu sync.Mutex
	// decode turns generated ids into an entry's Text on reading: the
	// text is not stored, as it is exactly its ids decoded.
	decode   func([]int) string
	limit    int   // entries; 0 = unbounded
	maxBytes int64 // 0 = unbounded
	chunks   [][]byte
	base     int         // absolute number of chunks[0]
	refs     []ledgerRef // refs[start:] are live, oldest first
	start    int
	firstSeq uint64 // Seq of refs[start]
	bytes    int64  // encoded bytes of the live entries
	seq      uint64
	dropped  uint64
}

// ledgerRef locates one encoded entry; it holds no pointers.
type ledgerRef struct {
	chunk  int // absolute chunk number
	off, n int
}

func (l *ledger) add(e LedgerEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	if l.live() == 0 {
		l.firstSeq = l.seq
	}
	e.Seq = l.seq
	var c *[]byte
	if n := len(l.chunks); n > 0 {
		c = &l.chunks[n-1]
	}
	need := encodedSize(&e)
	if c == nil || cap(*c)-len(*c) < need {
		l.chunks = append(l.chunks, make([]byte, 0, max(ledgerChunk, need)))
		c = &l.chunks[len(l.chunks)-1]
	}
	off := len(*c)
	*c = appendEntry(*c, &e)
	l.refs = append(l.refs, ledgerRef{chunk: l.base + len(l.chunks) - 1, off: off, n: len(*c) - off})
	l.bytes += int64(len(*c) - off)
	for l.live() > 1 && ((l.limit > 0 && l.live() > l.limit) || (l.maxBytes > 0 && l.bytes > l.maxBytes)) {
		l.bytes -= int64(l.refs[l.start].n)
		l.start++
		l.firstSeq++
		l.dropped++
	}
	for len(l.chunks) > 1 && l.base < l.refs[l.start].chunk {
		l.chunks[0] = nil
		l.chunks = l.chunks[1:]
		l.base++
	}
	if l.start > 0 && l.start >= len(l.refs)/2 {
		// Compact rarely (amortised O(1)) instead of shifting on every drop.
		l.refs = append(make([]ledgerRef, 0, 2*l.live()+1), l.refs[l.start:]...)
		l.start = 0
	}
}

func (l *ledger) live() int { return len(l.refs) - l.start }

// after returns the live entries with Seq > seq, oldest first, and the
// number of entries dropped so far.
func (l *ledger) after(seq uint64) ([]LedgerEntry, uint64) {
	out, dropped := l.decodedAfter(seq)
	if l.decode != nil {
		for i := range out { // outside the lock: decoding is the slow part
			out[i].Text = l.decode(out[i].GeneratedTokenIDs)
		}
	}
	return out, dropped
}

func (l *ledger) decodedAfter(seq uint64) ([]LedgerEntry, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	live := l.refs[l.start:]
	i := 0
	if seq >= l.firstSeq {
		i = int(min(seq-l.firstSeq+1, uint64(len(live)))) // Seq is contiguous in the ring
	}
	out := make([]LedgerEntry, 0, len(live)-i)
	for _, r := range live[i:] {
		e, err := decodeEntry(l.chunks[r.chunk-l.base][r.off : r.off+r.n])
		if err != nil {
			panic("fake vllm: corrupt ledger entry: " + err.Error()) // written by appendEntry above: a bug, not input
		}
		out = append(out, e)
	}
	return out, l.dropped
}

// stats reports the live entries, their encoded bytes and the dropped count.
func (l *ledger) stats() (entries int, bytes int64, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live(), l.bytes, l.dropped
}

// encodedSize bounds appendEntry's output for e.
func encodedSize(e *LedgerEntry) int {
	return 6*binary.MaxVarintLen64 + binary.MaxVarintLen64*(len(e.PromptTokenIDs)+len(e.GeneratedTokenIDs)) +
		8*len(e.LogProbs) + len(e.RequestID) + len(e.Model) + len(e.FinishReason) + 3*binary.MaxVarintLen64
}

func appendEntry(b []byte, e *LedgerEntry) []byte {
	b = binary.AppendUvarint(b, e.Seq)
	b = binary.AppendVarint(b, e.Created.UnixNano())
	for _, s := range [...]string{e.RequestID, e.Model, e.FinishReason} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, ids := range [...][]int{e.PromptTokenIDs, e.GeneratedTokenIDs} {
		b = binary.AppendUvarint(b, uint64(len(ids)))
		for _, id := range ids {
			b = binary.AppendVarint(b, int64(id))
		}
	}
	b = binary.AppendUvarint(b, uint64(len(e.LogProbs)))
	for _, lp := range e.LogProbs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(lp))
	}
	return b
}

var errShortEntry = errors.New("short ledger entry")

func decodeEntry(b []byte) (LedgerEntry, error) {
	var e LedgerEntry
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	seq := uv()
	created, n := binary.Varint(b)
	if n <= 0 {
		return e, errShortEntry
	}
	b = b[n:]
	e.Seq, e.Created = seq, time.Unix(0, created)
	for _, s := range [...]*string{&e.RequestID, &e.Model, &e.FinishReason} {
		k := uv()
		if uint64(len(b)) < k {
			return e, errShortEntry
		}
		*s, b = string(b[:k]), b[k:]
	}
	for _, ids := range [...]*[]int{&e.PromptTokenIDs, &e.GeneratedTokenIDs} {
		k := uv()
		*ids = make([]int, 0, min(k, uint64(len(b))))
		for range k {
			v, n := binary.Varint(b)
			if n <= 0 {
				return e, errShortEntry
			}
			*ids, b = append(*ids, int(v)), b[n:]
		}
	}
	k := uv()
	if uint64(len(b)) != 8*k {
		return e, errShortEntry
	}
	e.LogProbs = make([]float64, k)
	for i := range e.LogProbs {
		e.LogProbs[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return e, nil
}
