package tokenizer

import (
	"strings"
	"sync"
)

// SegmentCache remembers the encodings of long segments: the text between
// added tokens, which Encode tokenizes independently of its neighbours. A
// chat prompt is mostly segments seen before (the system prompt and tools,
// every earlier turn), so with a cache a growing conversation costs
// tokenization of its new text only. The cache keeps two generations and
// drops the older when the newer fills half of maxBytes, so its memory
// stays bounded. It is safe for concurrent use.
type SegmentCache struct {
	mu       sync.Mutex
	cur, old map[string][]int
	curBytes int
	oldBytes int
	maxBytes int
}

// minCachedSegment is the shortest segment worth a lookup: shorter ones
// encode about as fast as they hash.
const minCachedSegment = 8

// segmentOverhead approximates a map entry's fixed cost in bytes.
const segmentOverhead = 64

// NewSegmentCache returns a cache holding about maxBytes of segments and
// their ids (at least one segment's worth).
func NewSegmentCache(maxBytes int) *SegmentCache {
	return &SegmentCache{cur: map[string][]int{}, maxBytes: maxBytes}
}

func (c *SegmentCache) get(seg string) ([]int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ids, ok := c.cur[seg]; ok {
		return ids, true
	}
	if ids, ok := c.old[seg]; ok {
		c.putLocked(strings.Clone(seg), ids) // still in use: keep it in the newer generation
		return ids, true
	}
	return nil, false
}

func (c *SegmentCache) put(seg string, ids []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(strings.Clone(seg), ids) // a clone: seg points into a whole prompt
}

func (c *SegmentCache) putLocked(seg string, ids []int) {
	size := len(seg) + 8*len(ids) + segmentOverhead
	if c.curBytes > 0 && c.curBytes+size > c.maxBytes/2 {
		c.old, c.oldBytes = c.cur, c.curBytes
		c.cur, c.curBytes = make(map[string][]int, len(c.cur)), 0
	}
	c.cur[seg] = ids
	c.curBytes += size
}

// Bytes is about how much memory the cache holds: never much over
// maxBytes (by two segments at most).
func (c *SegmentCache) Bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.curBytes + c.oldBytes
}

// EncodeCached returns exactly Encode(text), looking long segments up in c
// first and remembering those it encodes. A nil c encodes without a cache.
func (t *Tokenizer) EncodeCached(text string, c *SegmentCache) []int {
	if c == nil {
		return t.Encode(text)
	}
	out := make([]int, 0, len(text)/3+4)
	for len(text) > 0 {
		i, id, n := t.nextAdded(text)
		seg := text
		if i >= 0 {
			seg = text[:i]
		}
		out = t.encodeSegmentCached(out, seg, c)
		if i < 0 {
			break
		}
		out = append(out, id)
		text = text[i+n:]
	}
	return out
}

func (t *Tokenizer) encodeSegmentCached(out []int, seg string, c *SegmentCache) []int {
	if len(seg) < minCachedSegment {
		return t.encodeSegment(out, seg)
	}
	if ids, ok := c.get(seg); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = t.encodeSegment(out, seg)
	c.put(seg, append([]int(nil), out[start:]...))
	return out
}
