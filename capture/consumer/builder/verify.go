package builder

import (
	"bytes"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/capbench/capbench/capture/record"
)

// parallelHashTokens is the amount of parent-digest work (tokens to hash)
// below which links are verified during placement on one goroutine: under it
// starting workers costs more than it saves.
const parallelHashTokens = 1 << 18

// maxLinkWorkers bounds the goroutines verifying links ahead of placement.
const maxLinkWorkers = 4

// linkJob is one parent and the children whose link to it placement will
// check. All of them go to one worker, because checking a link may fill the
// parent's digest cache.
type linkJob struct {
	parent   *node
	children []*node
}

// verifyLinksAhead works out, for every record that placement will check
// against a named parent, the result of linkVerified, on several goroutines
// when the hashing involved is large. linkVerified is a pure function of the
// parent and the child's prompt (its caches only memoise), so placement
// reading the stored result is exactly placement calling it. nodes must be in
// placement order with order set.
func verifyLinksAhead(nodes []*node) {
	workers := min(runtime.GOMAXPROCS(0), maxLinkWorkers)
	if workers < 2 || len(nodes) < 2 {
		return
	}
	// The hashing is at most every record's cumulative once: a small
	// rollout is done before a worker would start.
	total := 0
	for _, n := range nodes {
		total += n.cumLen()
	}
	if total < parallelHashTokens {
		return
	}
	byID := make(map[string]*node, len(nodes))
	for _, n := range nodes {
		byID[n.entry.ModelCallID] = n
	}
	jobs := map[*node]*linkJob{}
	var order []*linkJob
	work := 0
	for _, c := range nodes {
		p := linkCandidate(c, byID)
		if p == nil {
			continue
		}
		j := jobs[p]
		if j == nil {
			j = &linkJob{parent: p}
			jobs[p] = j
			order = append(order, j)
			work += p.cumLen()
		}
		j.children = append(j.children, c)
	}
	if work < parallelHashTokens || len(order) < 2 {
		return
	}
	// Largest parents first, so the last jobs handed out are short.
	slices.SortFunc(order, func(a, b *linkJob) int { return b.parent.cumLen() - a.parent.cumLen() })
	var next atomic.Int64
	run := func() {
		for {
			i := int(next.Add(1)) - 1
			if i >= len(order) {
				return
			}
			j := order[i]
			for _, c := range j.children {
				c.linkParent = j.parent
				c.link = 2
				if linkVerified(j.parent, c.prompt) {
					c.link = 1
				}
			}
		}
	}
	var wg sync.WaitGroup
	for range min(workers, len(order)) - 1 {
		wg.Go(run)
	}
	run()
	wg.Wait()
}

// linkCandidate returns the parent that placement will check c against with
// linkVerified (see resolveParent): a recorded verdict that is neither root
// nor unresolved, a named parent that survives and is placed before c. It
// returns nil when placement takes any other branch.
func linkCandidate(c *node, byID map[string]*node) *node {
	e := c.entry
	if r := e.ParentResolution; r != nil && (*r == record.ResolutionRoot || *r == record.ResolutionUnresolved) {
		return nil
	}
	if e.ParentCallID == nil {
		return nil
	}
	p := byID[*e.ParentCallID]
	if p == nil || p.order >= c.order {
		return nil
	}
	return p
}

// intsEqual is slices.Equal for token ids, comparing the memory as bytes
// (the runtime's vectorised comparison) rather than element by element. Two
// slices over the same memory (a store reader lets a chain's prompts share
// one array) compare equal without reading it.
func intsEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	const size = int(unsafe.Sizeof(a[0]))
	ab := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(a))), len(a)*size)
	bb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), len(b)*size)
	return bytes.Equal(ab, bb)
}
