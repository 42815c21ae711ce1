package builder

// prefixIndex recovers a parent when a record names a parent that is not
// among the surviving records (typically a filtered empty generation). It
// answers the same question as a trie over the cumulative sequences of the
// records placed so far — "the deepest registered sequence that is a prefix
// of this prompt" — but with a polynomial rolling hash keyed by length, so it
// costs O(tokens) time and memory instead of one map per trie node. Every
// hash hit is confirmed by comparing tokens.
type prefixIndex struct {
	buckets map[prefixKey][]*node
	lengths map[int]struct{}
}

type prefixKey struct {
	length int
	hash   uint64
}

const rollingBase = 1_000_003

func newPrefixIndex() *prefixIndex {
	return &prefixIndex{buckets: map[prefixKey][]*node{}, lengths: map[int]struct{}{}}
}

func mix(h uint64, tok int) uint64 {
	return h*rollingBase + (uint64(tok) ^ 0x9e3779b97f4a7c15)
}

func (x *prefixIndex) add(n *node) {
	var h uint64
	for _, t := range n.prompt {
		h = mix(h, t)
	}
	for _, t := range n.gen {
		h = mix(h, t)
	}
	k := prefixKey{n.cumLen(), h}
	x.buckets[k] = append(x.buckets[k], n)
	x.lengths[n.cumLen()] = struct{}{}
}

// infer returns the unique record whose cumulative sequence is the longest
// registered prefix of prompt, or nil when there is none or when several
// records share that identical sequence (ambiguous).
func (x *prefixIndex) infer(prompt []int) *node {
	hashes := make([]uint64, len(prompt)+1)
	for i, t := range prompt {
		hashes[i+1] = mix(hashes[i], t)
	}
	for l := len(prompt); l >= 1; l-- {
		if _, ok := x.lengths[l]; !ok {
			continue
		}
		var found []*node
		for _, n := range x.buckets[prefixKey{l, hashes[l]}] {
			if n.cumulativeEquals(prompt[:l]) {
				found = append(found, n)
			}
		}
		switch len(found) {
		case 0:
			continue
		case 1:
			return found[0]
		default:
			return nil
		}
	}
	return nil
}
