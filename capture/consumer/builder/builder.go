// Package builder chains the frozen records of one rollout into trajectories
// (the `prefix_merging` strategy), validates the chains and projects the main
// chain to one contiguous Responses payload.
//
// The builder is linear in the number of tokens: records are ordered by prompt
// length, parent links are checked with one digest per referenced parent (a
// child's prefix is compared with the parent's tokens rather than hashed; on
// a large rollout those digests are computed on several goroutines), and
// the prefix index used to recover a missing parent is only built when some
// record names a parent that is not among the surviving records.
package builder

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/capbench/capbench/capture/record"

	"github.com/capbench/capbench/internal/pyfmt"
)

// PrefixMerging is the only builder the target knows.
const PrefixMerging = "prefix_merging"

// Terminal chain verdicts reported in BuildNotes.TerminalChain.
const (
	TerminalNone        = ""
	TerminalDelivered   = "delivered"
	TerminalBroken      = "broken"
	TerminalNotCaptured = "not_captured"
)

// Parent-link failure reasons (keys of BuildNotes.ParentLinkFailures).
const (
	ReasonDuplicateConflict      = "duplicate_call_id_conflict"
	ReasonDeltaUnreconstructable = "delta_chain_unreconstructable"
	ReasonParentUnresolved       = "parent_unresolved"
	ReasonResolvedMissingID      = "resolved_parent_missing_id"
	ReasonDigestMismatch         = "parent_digest_mismatch"
	ReasonMissingRecovered       = "parent_call_id_missing_recovered"
	ReasonMissing                = "parent_call_id_missing"
	ReasonMissingResolution      = "missing_resolution"
)

// maxDeltaDepth bounds the walk from a delta record to its full-prompt anchor.
const maxDeltaDepth = 10000

// ErrBuild is wrapped by every data error the builder and projection report;
// the consumer turns these into masked failed builds.
var ErrBuild = errors.New("build error")

// buildError is a data error whose text is persisted verbatim (after the
// Python error-type prefix the consumer adds).
type buildError struct {
	kind string // Python error type name, e.g. "ValueError"
	msg  string
}

func (e *buildError) Error() string { return e.msg }
func (e *buildError) Unwrap() error { return ErrBuild }

// Kind returns the Python error type Gym reports for this failure.
func (e *buildError) Kind() string { return e.kind }

func valueError(format string, args ...any) error {
	return &buildError{kind: "ValueError", msg: fmt.Sprintf(format, args...)}
}

func assertionError(msg string) error {
	return &buildError{kind: "AssertionError", msg: msg}
}

// ErrorKind returns the Python error type name of a builder error ("ValueError",
// "AssertionError"), or "" when err did not come from this package.
func ErrorKind(err error) string {
	var be *buildError
	if errors.As(err, &be) {
		return be.kind
	}
	return ""
}

// Link is one call of a chain. Interstitial holds the prompt tokens added
// after the previous link's cumulative sequence (loss-mask 0).
type Link struct {
	Entry        *record.Entry
	Interstitial []int
}

// Chain is one root-to-leaf (or root-to-terminal) trajectory.
type Chain struct {
	ID         string
	RootPrompt []int
	Links      []Link
}

// Validate requires one log-prob per generated token on every link.
func (c *Chain) Validate() error {
	for _, l := range c.Links {
		if len(l.Entry.GenerationLogProbs) != len(l.Entry.GenerationTokenIDs) {
			return valueError("log-prob/token length mismatch on %s: %d vs %d",
				l.Entry.ModelCallID, len(l.Entry.GenerationLogProbs), len(l.Entry.GenerationTokenIDs))
		}
	}
	return nil
}

// Notes describe what the build kept, dropped or could not resolve.
type Notes struct {
	Builder                  string
	Roots                    int
	Chains                   int
	GeneratedTokensCaptured  int
	GeneratedTokensDelivered int
	DeliveredFraction        float64
	UnresolvedRetries        []string
	EmptyGenerationCalls     []string
	TerminalCallID           string
	TerminalChain            string
	ParentLinkFailures       map[string]int
	UnresolvedParentCalls    []string
}

// Output is the result of one build.
type Output struct {
	Chains      []*Chain
	Quarantined []string
	Notes       Notes
}

// Main returns the chain called "main", else the first chain, else nil.
func (o *Output) Main() *Chain {
	for _, c := range o.Chains {
		if c.ID == "main" {
			return c
		}
	}
	if len(o.Chains) > 0 {
		return o.Chains[0]
	}
	return nil
}

// Run builds with the named builder. Only PrefixMerging exists; any other
// name is a data error whose text matches Gym's.
func Run(entries []*record.Entry, name, terminalCallID string) (*Output, error) {
	if name != PrefixMerging {
		return nil, valueError("unknown builder %s; known: ['%s']", PyRepr(name), PrefixMerging)
	}
	return PrefixMergingBuild(entries, terminalCallID)
}

// PyRepr renders s the way Python's repr() renders a str (quotes chosen as
// Python does; common escapes), so persisted error texts match Gym's.
func PyRepr(s string) string { return pyfmt.Str(s) }

// node is one placed record.
type node struct {
	entry       *record.Entry
	prompt      []int
	gen         []int
	parent      *node
	children    []*node
	quarantined bool
	boundary    bool
	order       int // position in placement order
	// digestOK caches whether the parent's stamped digest equals the digest
	// of its actual cumulative sequence (0 unknown, 1 yes, 2 no).
	digestOK int8
	// link caches linkVerified(linkParent, prompt) when it was worked out
	// ahead of placement (0 not worked out, 1 verified, 2 not).
	link       int8
	linkParent *node
}

func (n *node) cumLen() int { return len(n.prompt) + len(n.gen) }

// cumulativeEquals reports whether prefix == prompt ++ gen of n.
func (n *node) cumulativeEquals(prefix []int) bool {
	if len(prefix) != n.cumLen() {
		return false
	}
	return intsEqual(prefix[:len(n.prompt)], n.prompt) && intsEqual(prefix[len(n.prompt):], n.gen)
}

func (n *node) cumulative() []int {
	out := make([]int, 0, n.cumLen())
	out = append(out, n.prompt...)
	return append(out, n.gen...)
}

// PrefixMergingBuild chains entries (any order) by their recorded parent
// verdicts, anchoring on terminalCallID when it is non-empty.
func PrefixMergingBuild(entries []*record.Entry, terminalCallID string) (*Output, error) {
	failures := map[string]int{}
	var unresolvedParents []string

	// 1. Deduplicate by call id, keeping the first copy.
	deduped := make([]*record.Entry, 0, len(entries))
	byID := make(map[string]*record.Entry, len(entries))
	var duplicateConflicts []string
	for _, e := range entries {
		if e == nil {
			continue
		}
		prev, ok := byID[e.ModelCallID]
		if !ok {
			byID[e.ModelCallID] = e
			deduped = append(deduped, e)
			continue
		}
		if !slices.Equal(prev.PromptTokenIDs, e.PromptTokenIDs) || !slices.Equal(prev.GenerationTokenIDs, e.GenerationTokenIDs) {
			duplicateConflicts = append(duplicateConflicts, e.ModelCallID)
		}
	}

	// 2. Materialise delta prompts.
	deduped, deltaFailures := materialiseDeltas(deduped, byID)

	// 3. Drop empty generations (and unreconstructable delta records).
	var empty []string
	surviving := make([]*node, 0, len(deduped))
	for _, e := range deduped {
		if _, failed := deltaFailures[e.ModelCallID]; failed {
			continue
		}
		if len(e.GenerationTokenIDs) == 0 {
			empty = append(empty, e.ModelCallID)
			continue
		}
		surviving = append(surviving, &node{entry: e, prompt: e.PromptTokenIDs, gen: e.GenerationTokenIDs})
	}
	for _, id := range duplicateConflicts {
		failures[ReasonDuplicateConflict]++
		unresolvedParents = append(unresolvedParents, id)
	}
	for _, e := range deduped {
		if _, failed := deltaFailures[e.ModelCallID]; failed {
			failures[ReasonDeltaUnreconstructable]++
			unresolvedParents = append(unresolvedParents, e.ModelCallID)
		}
	}
	if len(surviving) == 0 {
		notes := Notes{
			Builder:              PrefixMerging,
			EmptyGenerationCalls: nonNil(empty),
			TerminalCallID:       terminalCallID,
			UnresolvedRetries:    []string{},
			ParentLinkFailures:   map[string]int{},
		}
		if terminalCallID != "" {
			notes.TerminalChain = TerminalNotCaptured
		}
		// Duplicate-id conflicts are not reported on this early path;
		// delta failures are.
		if n := failures[ReasonDeltaUnreconstructable]; n > 0 {
			notes.ParentLinkFailures[ReasonDeltaUnreconstructable] = n
			for _, e := range deduped {
				if _, failed := deltaFailures[e.ModelCallID]; failed {
					notes.UnresolvedParentCalls = append(notes.UnresolvedParentCalls, e.ModelCallID)
				}
			}
		}
		notes.UnresolvedParentCalls = nonNil(notes.UnresolvedParentCalls)
		return &Output{Chains: nil, Quarantined: []string{}, Notes: notes}, nil
	}

	// 4. Order by (prompt length, call id).
	slices.SortFunc(surviving, func(a, b *node) int {
		if d := len(a.prompt) - len(b.prompt); d != 0 {
			return d
		}
		return strings.Compare(a.entry.ModelCallID, b.entry.ModelCallID)
	})

	// 5. Place each record.
	survivingIDs := make(map[string]struct{}, len(surviving))
	for _, n := range surviving {
		survivingIDs[n.entry.ModelCallID] = struct{}{}
	}
	var index *prefixIndex
	for _, n := range surviving {
		if p := n.entry.ParentCallID; p != nil {
			if _, ok := survivingIDs[*p]; !ok {
				index = newPrefixIndex()
				break
			}
		}
	}
	for i, n := range surviving {
		n.order = i
	}
	verifyLinksAhead(surviving)
	placed := make(map[string]*node, len(surviving))
	roots := 0
	for _, n := range surviving {
		parent, note := resolveParent(n, placed, index)
		if note != "" {
			failures[note]++
			if note != ReasonMissingRecovered {
				n.boundary = true
				unresolvedParents = append(unresolvedParents, n.entry.ModelCallID)
			}
		}
		if parent != nil {
			n.parent = parent
			parent.children = append(parent.children, n)
		} else {
			roots++
		}
		if index != nil {
			index.add(n)
		}
		placed[n.entry.ModelCallID] = n
	}

	// 6. Terminal ancestry.
	var terminal *node
	if terminalCallID != "" {
		terminal = placed[terminalCallID]
	}
	onTerminalPath := map[*node]bool{}
	for a := terminal; a != nil; a = a.parent {
		onTerminalPath[a] = true
	}

	// 7. Retry-sibling resolution.
	quarantined := []string{}
	unresolvedRetries := []string{}
	for _, group := range retryGroups(surviving) {
		var keep []*node
		for _, m := range group {
			if onTerminalPath[m] {
				keep = append(keep, m)
			}
		}
		if keep == nil {
			for _, m := range group {
				if slices.ContainsFunc(m.children, func(c *node) bool { return !c.quarantined }) {
					keep = append(keep, m)
				}
			}
		}
		if keep == nil {
			smallest := group[0]
			for _, m := range group[1:] {
				if m.entry.ModelCallID < smallest.entry.ModelCallID {
					smallest = m
				}
			}
			keep = []*node{smallest}
			if terminal == nil {
				for _, m := range group {
					unresolvedRetries = append(unresolvedRetries, m.entry.ModelCallID)
				}
			}
		}
		for _, m := range group {
			if !slices.Contains(keep, m) && !m.quarantined {
				m.quarantined = true
				quarantined = append(quarantined, m.entry.ModelCallID)
			}
		}
	}

	// Parents precede children in placement order, so one pass marks every
	// node whose root path crosses a quarantined (or boundary) record.
	tainted := make([]bool, len(surviving))
	crossesBoundary := make([]bool, len(surviving))
	for i, n := range surviving {
		tainted[i] = n.quarantined
		crossesBoundary[i] = n.boundary
		if n.parent != nil {
			tainted[i] = tainted[i] || tainted[n.parent.order]
			crossesBoundary[i] = crossesBoundary[i] || crossesBoundary[n.parent.order]
		}
	}

	// 8. Terminal chain.
	status := TerminalNone
	var terminalChain *Chain
	if terminalCallID != "" {
		switch {
		case terminal == nil:
			status = TerminalNotCaptured
		case tainted[terminal.order] || crossesBoundary[terminal.order]:
			status = TerminalBroken
		default:
			terminalChain = chainFrom(pathTo(terminal))
			status = TerminalDelivered
		}
	}

	// 9. Chains, one per clean leaf.
	chains := []*Chain{}
	if terminalChain != nil {
		chains = append(chains, terminalChain)
	}
	for _, n := range surviving {
		if len(n.children) > 0 || tainted[n.order] {
			continue
		}
		path := pathTo(n)
		if terminalChain != nil && slices.Contains(path, terminal) {
			continue
		}
		chains = append(chains, chainFrom(path))
	}

	// 10. Main chain.
	var main *Chain
	if terminalChain != nil {
		main = terminalChain
	} else {
		for _, c := range chains {
			if main == nil || chainBefore(c, main) {
				main = c
			}
		}
	}
	branch := 0
	for _, c := range chains {
		if c == main {
			c.ID = "main"
			continue
		}
		c.ID = "branch-" + strconv.Itoa(branch)
		branch++
	}

	// 11. Notes.
	captured := 0
	for _, n := range surviving {
		captured += len(n.gen)
	}
	delivered := 0
	if main != nil {
		for _, l := range main.Links {
			delivered += len(l.Entry.GenerationTokenIDs)
		}
	}
	fraction := 0.0
	if captured > 0 {
		fraction = Round4(float64(delivered) / float64(captured))
	}
	return &Output{
		Chains:      chains,
		Quarantined: quarantined,
		Notes: Notes{
			Builder:                  PrefixMerging,
			Roots:                    roots,
			Chains:                   len(chains),
			GeneratedTokensCaptured:  captured,
			GeneratedTokensDelivered: delivered,
			DeliveredFraction:        fraction,
			UnresolvedRetries:        unresolvedRetries,
			EmptyGenerationCalls:     nonNil(empty),
			TerminalCallID:           terminalCallID,
			TerminalChain:            status,
			ParentLinkFailures:       failures,
			UnresolvedParentCalls:    nonNil(unresolvedParents),
		},
	}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// chainBefore orders chains by their first record's (created_at, call id);
// an empty chain sorts last.
func chainBefore(a, b *Chain) bool {
	if len(a.Links) == 0 {
		return false
	}
	if len(b.Links) == 0 {
		return true
	}
	ea, eb := a.Links[0].Entry, b.Links[0].Entry
	if ea.CreatedAt != eb.CreatedAt {
		return ea.CreatedAt < eb.CreatedAt
	}
	return ea.ModelCallID < eb.ModelCallID
}

// Round4 rounds like Python's round(x, 4): the exact binary value is
// rounded to 4 decimals (ties to even), then read back.
func Round4(x float64) float64 {
	v, err := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 4, 64), 64)
	if err != nil {
		return x
	}
	return v
}

// resolveParent places a record under the parent its record names, trusting
// the link only when the digests prove it (docs/consumer.md#building-chains-prefix_merging).
func resolveParent(n *node, placed map[string]*node, index *prefixIndex) (*node, string) {
	e := n.entry
	if r := e.ParentResolution; r != nil {
		switch *r {
		case record.ResolutionRoot:
			return nil, ""
		case record.ResolutionUnresolved:
			return nil, ReasonParentUnresolved
		}
	}
	resolved := e.ParentResolution != nil && *e.ParentResolution == record.ResolutionResolved
	if !resolved && e.ParentCallID == nil {
		return nil, ReasonMissingResolution
	}
	if e.ParentCallID == nil {
		return nil, ReasonResolvedMissingID
	}
	parent, ok := placed[*e.ParentCallID]
	if !ok {
		if index != nil {
			if p := index.infer(n.prompt); p != nil {
				return p, ReasonMissingRecovered
			}
		}
		return nil, ReasonMissing
	}
	verified := n.link == 1
	if n.link == 0 || n.linkParent != parent {
		verified = linkVerified(parent, n.prompt)
	}
	if verified {
		return parent, ""
	}
	return nil, ReasonDigestMismatch
}

// linkVerified checks the child's prompt against the parent's recorded
// cum_len and digest. Instead of hashing every child prefix, it compares the
// prefix with the parent's actual cumulative tokens and hashes the parent's
// cumulative at most once: digest(prefix) == parent digest exactly when the
// prefix equals the parent's cumulative and that cumulative hashes to the
// stamped digest (or when the stamped length differs, by direct hashing).
func linkVerified(parent *node, prompt []int) bool {
	cumLen := parent.cumLen()
	if parent.entry.CumLen != nil {
		cumLen = *parent.entry.CumLen
	}
	if cumLen < 0 || cumLen > len(prompt) {
		return false
	}
	if parent.entry.Digest == nil || *parent.entry.Digest == "" {
		// The reference digest is the digest of the actual cumulative.
		if cumLen != parent.cumLen() {
			return false
		}
		return parent.cumulativeEquals(prompt[:cumLen])
	}
	stamped := *parent.entry.Digest
	if cumLen != parent.cumLen() {
		// A stamped length that disagrees with the tokens: hash directly.
		d, err := record.TokenDigest(prompt[:cumLen])
		return err == nil && d == stamped
	}
	prefix := prompt[:cumLen]
	if !parent.cumulativeEquals(prefix) {
		// A different prefix of the same length can only match the stamped
		// digest if the stamped digest is not the parent's own; check.
		if parent.stampedDigestOK(nil) {
			return false
		}
		d, err := record.TokenDigest(prefix)
		return err == nil && d == stamped
	}
	// prefix equals the parent's cumulative, so hashing it (no copy) is
	// hashing the parent's cumulative.
	return parent.stampedDigestOK(prefix)
}

// stampedDigestOK reports (once per node) whether the node's stamped digest
// is the digest of its actual cumulative tokens; cumulative may be passed
// when the caller holds an equal slice, to avoid building one.
func (n *node) stampedDigestOK(cumulative []int) bool {
	if n.digestOK == 0 && !n.entry.PromptIsDelta {
		// A reader may have worked it out already (record.DigestPrecheck).
		if ok, known := n.entry.StampedDigestMatches(); known {
			n.digestOK = 2
			if ok {
				n.digestOK = 1
			}
		}
	}
	if n.digestOK == 0 {
		if cumulative == nil {
			cumulative = n.cumulative()
		}
		n.digestOK = 2
		if d, err := record.TokenDigest(cumulative); err == nil && n.entry.Digest != nil && d == *n.entry.Digest {
			n.digestOK = 1
		}
	}
	return n.digestOK == 1
}

// retryGroups returns, in placement order, every set of two or more siblings
// (same parent; all roots form one group) with identical prompts.
func retryGroups(nodes []*node) [][]*node {
	type key struct {
		parent *node
		length int
	}
	byKey := map[key][]*node{}
	var keys []key
	for _, n := range nodes {
		k := key{n.parent, len(n.prompt)}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], n)
	}
	// Python iterates parent groups in first-appearance order, then prompt
	// sub-groups in first-appearance order; reproduce that order.
	var groups [][]*node
	type sub struct {
		first   int
		members []*node
	}
	byParent := map[*node][]sub{}
	var parentOrder []*node
	seenParent := map[*node]bool{}
	for _, k := range keys {
		members := byKey[k]
		if !seenParent[k.parent] {
			seenParent[k.parent] = true
			parentOrder = append(parentOrder, k.parent)
		}
		if len(members) < 2 {
			byParent[k.parent] = append(byParent[k.parent], sub{first: members[0].order, members: members})
			continue
		}
		// Partition equal-length prompts by content: a hash picks the
		// candidate parts, a comparison confirms (linear, not pairwise).
		var parts [][]*node
		byHash := map[uint64][]int{}
		for _, m := range members {
			h := hashTokens(m.prompt)
			placedIn := false
			for _, i := range byHash[h] {
				if slices.Equal(parts[i][0].prompt, m.prompt) {
					parts[i] = append(parts[i], m)
					placedIn = true
					break
				}
			}
			if !placedIn {
				byHash[h] = append(byHash[h], len(parts))
				parts = append(parts, []*node{m})
			}
		}
		for _, p := range parts {
			byParent[k.parent] = append(byParent[k.parent], sub{first: p[0].order, members: p})
		}
	}
	// Parent groups are ordered by their first member; so is parentOrder,
	// because keys were appended in placement order.
	for _, p := range parentOrder {
		subs := byParent[p]
		slices.SortStableFunc(subs, func(a, b sub) int { return a.first - b.first })
		for _, s := range subs {
			if len(s.members) >= 2 {
				groups = append(groups, s.members)
			}
		}
	}
	return groups
}

func hashTokens(tokens []int) uint64 {
	var h uint64
	for _, t := range tokens {
		h = mix(h, t)
	}
	return h
}

// pathTo returns the root-to-n path without recursion.
func pathTo(n *node) []*node {
	var rev []*node
	for c := n; c != nil; c = c.parent {
		rev = append(rev, c)
	}
	slices.Reverse(rev)
	return rev
}

func chainFrom(path []*node) *Chain {
	root := path[0]
	c := &Chain{RootPrompt: root.prompt, Links: make([]Link, 0, len(path))}
	prevCum := 0
	for i, n := range path {
		var inter []int
		if i > 0 {
			if prevCum < len(n.prompt) {
				inter = n.prompt[prevCum:len(n.prompt):len(n.prompt)]
			} else {
				inter = []int{}
			}
		} else {
			inter = []int{}
		}
		c.Links = append(c.Links, Link{Entry: n.entry, Interstitial: inter})
		prevCum = n.cumLen()
	}
	return c
}
