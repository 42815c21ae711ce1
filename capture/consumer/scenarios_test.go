package consumer_test

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// call describes one synthetic captured call.
type call struct {
	id      string
	prompt  []int
	gen     []int
	res     record.Resolution // "" = no verdict (pre-3 record)
	parent  string
	text    string  // assistant text of its single output item
	created float64 // created_at
}

func seq(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func cat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// entry stamps a record the way capture does: cum_len and digest of the
// full sequence, one assistant output item carrying the tokens.
func entry(c call) *record.Entry {
	cum := cat(c.prompt, c.gen)
	digest, err := record.TokenDigest(cum)
	Expect(err).NotTo(HaveOccurred())
	cumLen := len(cum)
	idx := 0
	respID := "resp-" + c.id
	lp := make([]float64, len(c.gen))
	for i := range lp {
		lp[i] = -0.5
	}
	text := c.text
	if text == "" {
		text = "answer " + c.id
	}
	e := &record.Entry{
		SchemaVersion:      record.SchemaVersion,
		RolloutID:          "r-1",
		ModelCallID:        c.id,
		Model:              "pol",
		PromptTokenIDs:     c.prompt,
		GenerationTokenIDs: c.gen,
		GenerationLogProbs: lp,
		OutputItems:        []record.Item{{"type": "message", "role": "assistant", "content": text}},
		TokenItemIndex:     &idx,
		ResponseID:         &respID,
		CreatedAt:          c.created,
		CumLen:             &cumLen,
		Digest:             &digest,
	}
	if c.res != "" {
		r := c.res
		e.ParentResolution = &r
	}
	if c.parent != "" {
		p := c.parent
		e.ParentCallID = &p
	}
	return e
}

func snapshotOf(incomplete bool, calls ...call) *store.Snapshot {
	s := &store.Snapshot{RolloutID: "r-1", SnapshotID: "0123456789abcdef0123456789abcdef", Version: 3, Incomplete: incomplete}
	for _, c := range calls {
		s.Entries = append(s.Entries, entry(c))
	}
	return s
}

// responseNamed is a verified response whose id is the served id of call.
func responseNamed(id string) map[string]any {
	return map[string]any{"id": "resp-" + id, "output": []any{
		map[string]any{"type": "message", "role": "assistant", "content": "rewritten by the harness"},
	}}
}

// unrelated is a verified response no witness can match.
func unrelated() map[string]any { return responseNamed("nobody") }

const (
	R = record.ResolutionRoot
	V = record.ResolutionResolved
	U = record.ResolutionUnresolved
)

// Common token layouts: a → b → c, each prompt extending the previous
// cumulative sequence with two interstitial (tool output) tokens.
var (
	pA  = seq(100, 4)
	gA  = seq(200, 3)
	pB  = cat(pA, gA, seq(300, 2))
	gB  = seq(400, 3)
	gB2 = seq(450, 2)
	pC  = cat(pB, gB, seq(500, 2))
	gC  = seq(600, 4)
)

func chainABC() []call {
	return []call{
		{id: "a", prompt: pA, gen: gA, res: R, created: 1},
		{id: "b", prompt: pB, gen: gB, res: V, parent: "a", created: 2},
		{id: "c", prompt: pC, gen: gC, res: V, parent: "b", created: 3},
	}
}

type scenario struct {
	snap *store.Snapshot
	in   consumer.Input
	opts *consumer.Options
}

type verdict struct {
	mask            bool
	chain           string
	method          string
	callID          string
	reasonContains  string
	errText         string
	nCalls          int
	chains, roots   int
	quarantined     int
	retries         []string
	unresolvedCalls []string
	linkFailures    map[string]int
	deliveredBelow1 bool
	incomplete      bool
	emptyGen        int
	mainFirstCall   string
}

func runScenario(s scenario) *consumer.Result {
	opts := consumer.DefaultOptions()
	if s.opts != nil {
		opts = *s.opts
	}
	return consumer.ConsumeSnapshot(s.snap, s.in, opts)
}

var _ = Describe("contract §10 scenarios", func() {
	DescribeTable("verdicts",
		func(s scenario, want verdict) {
			r := runScenario(s)
			Expect(r.MaskSample).To(Equal(want.mask), "mask_sample")
			Expect(r.Error).To(Equal(want.errText), "error")
			Expect(r.Metrics.NCalls).To(Equal(want.nCalls), "n_calls")
			Expect(r.Metrics.CaptureIncomplete).To(Equal(want.incomplete), "capture_incomplete")
			ta := r.Metrics.TerminalAttribution
			if want.method == "" && want.errText != "" && ta == nil {
				return
			}
			Expect(ta).NotTo(BeNil())
			Expect(ta.Chain).To(Equal(want.chain), "terminal_attribution.chain")
			Expect(ta.Method).To(Equal(want.method), "terminal_attribution.method")
			if want.callID == "" {
				Expect(ta.CallID).To(BeNil())
			} else {
				Expect(ta.CallID).To(HaveValue(Equal(want.callID)))
			}
			Expect(ta.Reason).To(ContainSubstring(want.reasonContains))
			if want.errText != "" {
				Expect(r.RebuiltResponse).To(BeNil())
				return
			}
			Expect(r.Metrics.Chains).To(Equal(want.chains), "chains")
			Expect(r.Metrics.Roots).To(Equal(want.roots), "roots")
			Expect(r.Metrics.QuarantinedCalls).To(Equal(want.quarantined), "quarantined_calls")
			Expect(r.UnresolvedRetries).To(Equal(nonNilStrings(want.retries)), "unresolved_retries")
			Expect(r.UnresolvedParentCalls).To(Equal(nonNilStrings(want.unresolvedCalls)), "unresolved_parent_calls")
			Expect(r.Metrics.UnresolvedParentCalls).To(Equal(len(want.unresolvedCalls)))
			wantFailures := want.linkFailures
			if wantFailures == nil {
				wantFailures = map[string]int{}
			}
			Expect(r.Metrics.ParentLinkFailures).To(Equal(wantFailures), "parent_link_failures")
			Expect(r.Metrics.EmptyGenerationCalls).To(Equal(want.emptyGen))
			if want.deliveredBelow1 {
				Expect(r.Metrics.DeliveredFraction).To(BeNumerically("<", 1))
			} else {
				Expect(r.Metrics.DeliveredFraction).To(Equal(1.0))
			}
			Expect(r.RebuiltResponse).NotTo(BeNil())
			if want.mainFirstCall != "" {
				Expect(r.Chains).NotTo(BeEmpty())
				var main *consumer.Chain
				for i := range r.Chains {
					if r.Chains[i].ID == "main" {
						main = &r.Chains[i]
					}
				}
				Expect(main).NotTo(BeNil())
				Expect(main.Links[0].Entry.ModelCallID).To(Equal(want.mainFirstCall))
			}
		},
		Entry("1: single chain, response id names the last call",
			scenario{snap: snapshotOf(false, chainABC()...), in: consumer.Input{Response: responseNamed("c")}},
			verdict{mask: false, chain: "delivered", method: "response_id", callID: "c", nCalls: 3, chains: 1, roots: 1}),
		Entry("2: single chain, no witness",
			scenario{snap: snapshotOf(false, chainABC()...), in: consumer.Input{Response: unrelated()}},
			verdict{mask: false, chain: "", method: "none", reasonContains: "response_id_no_match,no_content_match", nCalls: 3, chains: 1, roots: 1}),
		Entry("3: merged transcript, trailing block names the final call",
			scenario{snap: snapshotOf(false, chainABC()...), in: consumer.Input{Response: map[string]any{"id": "", "output": []any{
				map[string]any{"role": "user", "content": "go"},
				map[string]any{"role": "assistant", "content": "answer a"},
				map[string]any{"type": "function_call_output", "call_id": "x", "output": "42"},
				map[string]any{"role": "assistant", "content": "answer c"},
			}}}},
			verdict{mask: false, chain: "delivered", method: "content_output", callID: "c", reasonContains: "response_has_no_id", nCalls: 3, chains: 1, roots: 1}),
		Entry("4: retry of a middle call, the continued sibling is kept",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b1", prompt: pB, gen: gB2, res: V, parent: "a", created: 2},
				call{id: "b2", prompt: pB, gen: gB, res: V, parent: "a", created: 3},
				call{id: "c", prompt: pC, gen: gC, res: V, parent: "b2", created: 4},
			), in: consumer.Input{Response: unrelated()}},
			verdict{mask: false, chain: "", method: "none", reasonContains: "no_content_match", nCalls: 4, chains: 1, roots: 1, quarantined: 1, deliveredBelow1: true}),
		Entry("5a: retry of the final call, unattributed",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b2", prompt: pB, gen: gB, res: V, parent: "a", created: 3},
				call{id: "b1", prompt: pB, gen: gB2, res: V, parent: "a", created: 2},
			), in: consumer.Input{Response: unrelated()}},
			verdict{mask: true, chain: "", method: "none", reasonContains: "no_content_match", nCalls: 3, chains: 1, roots: 1, quarantined: 1, retries: []string{"b1", "b2"}, deliveredBelow1: true}),
		Entry("5b: retry of the final call, kept sibling named by id",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b1", prompt: pB, gen: gB2, res: V, parent: "a", created: 2},
				call{id: "b2", prompt: pB, gen: gB, res: V, parent: "a", created: 3},
			), in: consumer.Input{Response: responseNamed("b2")}},
			verdict{mask: false, chain: "delivered", method: "response_id", callID: "b2", nCalls: 3, chains: 1, roots: 1, quarantined: 1, deliveredBelow1: true}),
		Entry("5c: identical final retries collapse to the smaller call id",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b9", prompt: pB, gen: gB, res: V, parent: "a", created: 2, text: "same"},
				call{id: "b1", prompt: pB, gen: gB, res: V, parent: "a", created: 3, text: "same"},
			), in: consumer.Input{Response: map[string]any{"id": "", "output": []any{map[string]any{"role": "assistant", "content": "same"}}}}},
			verdict{mask: false, chain: "delivered", method: "content_output", callID: "b1", reasonContains: "response_has_no_id", nCalls: 3, chains: 1, roots: 1, quarantined: 1, deliveredBelow1: true}),
		Entry("5d: retry of the first call, unattributed: two roots mask",
			scenario{snap: snapshotOf(false,
				call{id: "a1", prompt: pA, gen: seq(250, 3), res: R, created: 1},
				call{id: "a2", prompt: pA, gen: gA, res: R, created: 2},
				call{id: "b", prompt: pB, gen: gB, res: V, parent: "a2", created: 3},
			), in: consumer.Input{Response: unrelated()}},
			verdict{mask: true, chain: "", method: "none", reasonContains: "no_content_match", nCalls: 3, chains: 1, roots: 2, quarantined: 1, deliveredBelow1: true}),
		Entry("6: incomplete snapshot masks a delivered chain",
			scenario{snap: snapshotOf(true, chainABC()...), in: consumer.Input{Response: responseNamed("c")}},
			verdict{mask: true, chain: "delivered", method: "response_id", callID: "c", nCalls: 3, chains: 1, roots: 1, incomplete: true}),
		Entry("6: incomplete snapshot with mask_incomplete_when_attributed off and a delivered chain",
			scenario{snap: snapshotOf(true, chainABC()...), in: consumer.Input{Response: responseNamed("c")},
				opts: &consumer.Options{MaskIncompleteWhenAttributed: false}},
			verdict{mask: false, chain: "delivered", method: "response_id", callID: "c", nCalls: 3, chains: 1, roots: 1, incomplete: true}),
		Entry("6: incomplete snapshot with the setting off still masks when unattributed",
			scenario{snap: snapshotOf(true, chainABC()...), in: consumer.Input{Response: unrelated()},
				opts: &consumer.Options{MaskIncompleteWhenAttributed: false}},
			verdict{mask: true, chain: "", method: "none", reasonContains: "no_content_match", nCalls: 3, chains: 1, roots: 1, incomplete: true}),
		Entry("8a: compaction starts a new root, unattributed",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b", prompt: pB, gen: gB, res: V, parent: "a", created: 2},
				call{id: "c", prompt: seq(900, 5), gen: gC, res: R, created: 3},
			), in: consumer.Input{Response: unrelated()}},
			verdict{mask: true, chain: "", method: "none", reasonContains: "no_content_match", nCalls: 3, chains: 2, roots: 2, deliveredBelow1: true, mainFirstCall: "a"}),
		Entry("8b: compaction, attributed to the post-compaction call",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b", prompt: pB, gen: gB, res: V, parent: "a", created: 2},
				call{id: "c", prompt: seq(900, 5), gen: gC, res: R, created: 3},
			), in: consumer.Input{Response: responseNamed("c")}},
			verdict{mask: false, chain: "delivered", method: "response_id", callID: "c", nCalls: 3, chains: 2, roots: 2, deliveredBelow1: true, mainFirstCall: "c"}),
		Entry("8c: rewritten context is an unresolved boundary; attributed → broken",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b", prompt: pB, gen: gB, res: V, parent: "a", created: 2},
				call{id: "c", prompt: seq(900, 12), gen: gC, res: U, created: 3},
			), in: consumer.Input{Response: responseNamed("c")}},
			verdict{mask: true, chain: "broken", method: "response_id", callID: "c", nCalls: 3, chains: 2, roots: 2, unresolvedCalls: []string{"c"},
				linkFailures: map[string]int{"parent_unresolved": 1}, deliveredBelow1: true, mainFirstCall: "a"}),
		Entry("10a: an auxiliary title call finishing first becomes main when unattributed",
			scenario{snap: snapshotOf(false,
				call{id: "title", prompt: seq(800, 3), gen: seq(850, 2), res: R, created: 0.5},
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b", prompt: pB, gen: gB, res: V, parent: "a", created: 2},
			), in: consumer.Input{Response: unrelated()}},
			verdict{mask: true, chain: "", method: "none", reasonContains: "no_content_match", nCalls: 3, chains: 2, roots: 2, deliveredBelow1: true, mainFirstCall: "title"}),
		Entry("10b: the auxiliary title call, main terminal attributed",
			scenario{snap: snapshotOf(false,
				call{id: "title", prompt: seq(800, 3), gen: seq(850, 2), res: R, created: 0.5},
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b", prompt: pB, gen: gB, res: V, parent: "a", created: 2},
			), in: consumer.Input{Response: responseNamed("b")}},
			verdict{mask: false, chain: "delivered", method: "response_id", callID: "b", nCalls: 3, chains: 2, roots: 2, deliveredBelow1: true, mainFirstCall: "a"}),
		Entry("11: a prompt that does not extend the parent is a digest mismatch; attributed → broken",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "b", prompt: cat(pA, seq(201, 3), seq(300, 2)), gen: gB, res: V, parent: "a", created: 2},
			), in: consumer.Input{Response: responseNamed("b")}},
			verdict{mask: true, chain: "broken", method: "response_id", callID: "b", nCalls: 2, chains: 2, roots: 2, unresolvedCalls: []string{"b"},
				linkFailures: map[string]int{"parent_digest_mismatch": 1}, deliveredBelow1: true}),
		Entry("12/13: no records",
			scenario{snap: snapshotOf(false), in: consumer.Input{Response: unrelated()}},
			verdict{mask: true, errText: "capture contains no token records"}),
		Entry("13: no records and an incomplete snapshot",
			scenario{snap: snapshotOf(true), in: consumer.Input{Response: unrelated()}},
			verdict{mask: true, errText: "capture contains no token records", incomplete: true}),
		Entry("14a: the only call has an empty generation",
			scenario{snap: snapshotOf(false, call{id: "a", prompt: pA, gen: []int{}, res: R}), in: consumer.Input{Response: unrelated()}},
			verdict{mask: true, chain: "error", method: "none", reasonContains: "no_content_match", nCalls: 1, errText: "ValueError: capture produced no safe trainable chain"}),
		Entry("14a: the only call has an empty generation and is attributed",
			scenario{snap: snapshotOf(false, call{id: "a", prompt: pA, gen: []int{}, res: R}), in: consumer.Input{Response: responseNamed("a")}},
			verdict{mask: true, chain: "not_captured", method: "response_id", callID: "a", nCalls: 1, errText: "ValueError: capture produced no safe trainable chain"}),
		Entry("14b: empty middle generation; the next call is unresolved (ambiguous)",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "e", prompt: pB, gen: []int{}, res: V, parent: "a", created: 2},
				call{id: "c", prompt: cat(pB, seq(700, 2)), gen: gC, res: U, created: 3},
			), in: consumer.Input{Response: unrelated()}},
			verdict{mask: true, chain: "", method: "none", reasonContains: "no_content_match", nCalls: 3, chains: 2, roots: 2, emptyGen: 1,
				unresolvedCalls: []string{"c"}, linkFailures: map[string]int{"parent_unresolved": 1}, deliveredBelow1: true}),
		Entry("14b′: empty middle generation named as parent is recovered by prefix",
			scenario{snap: snapshotOf(false,
				call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
				call{id: "e", prompt: pB, gen: []int{}, res: V, parent: "a", created: 2},
				call{id: "c", prompt: cat(pB, seq(700, 2)), gen: gC, res: V, parent: "e", created: 3},
			), in: consumer.Input{Response: unrelated()}},
			verdict{mask: false, chain: "", method: "none", reasonContains: "no_content_match", nCalls: 3, chains: 1, roots: 1, emptyGen: 1,
				linkFailures: map[string]int{"parent_call_id_missing_recovered": 1}}),
		Entry("15: a declared terminal response id that matches no record masks",
			scenario{snap: snapshotOf(false, chainABC()...), in: consumer.Input{Response: responseNamed("c"), DeclaredResponseID: "resp-missing"}},
			verdict{mask: true, chain: "", method: "none", reasonContains: "declared_terminal_not_captured", nCalls: 3, chains: 1, roots: 1}),
		Entry("16a: disagreeing witnesses fall back to the single-chain policy",
			scenario{snap: snapshotOf(false, chainABC()...), in: consumer.Input{Response: responseNamed("c"), ExplicitCallID: "a"}},
			verdict{mask: false, chain: "", method: "none", reasonContains: "witness_disagreement[explicit=a;response_id=c]", nCalls: 3, chains: 1, roots: 1}),
		Entry("16b: disagreeing witnesses with a declared id mask",
			scenario{snap: snapshotOf(false, chainABC()...), in: consumer.Input{Response: responseNamed("c"), DeclaredResponseID: "resp-b"}},
			verdict{mask: true, chain: "", method: "none", reasonContains: "witness_disagreement[declared=b;response_id=c]", nCalls: 3, chains: 1, roots: 1}),
		Entry("18: an explicit id naming an uncaptured call abstains",
			scenario{snap: snapshotOf(false, chainABC()...), in: consumer.Input{Response: unrelated(), ExplicitCallID: "ghost"}},
			verdict{mask: false, chain: "", method: "none", reasonContains: "explicit_terminal_not_captured,response_id_no_match", nCalls: 3, chains: 1, roots: 1}),
		Entry("19: a duplicate call id with different tokens, unattributed",
			scenario{snap: snapshotOf(false, append(chainABC(), call{id: "b", prompt: pB, gen: gB2, res: V, parent: "a", created: 9})...), in: consumer.Input{}},
			verdict{mask: true, chain: "", method: "none", reasonContains: "no_response_object", nCalls: 4, chains: 1, roots: 1,
				unresolvedCalls: []string{"b"}, linkFailures: map[string]int{"duplicate_call_id_conflict": 1}}),
		Entry("19: a duplicate call id, attributed: delivered overrides the unresolved list",
			scenario{snap: snapshotOf(false, append(chainABC(), call{id: "b", prompt: pB, gen: gB2, res: V, parent: "a", created: 9})...), in: consumer.Input{ExplicitCallID: "c"}},
			verdict{mask: false, chain: "delivered", method: "explicit", callID: "c", reasonContains: "no_response_object", nCalls: 4, chains: 1, roots: 1,
				unresolvedCalls: []string{"b"}, linkFailures: map[string]int{"duplicate_call_id_conflict": 1}}),
	)
})

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

var _ = Describe("contract §10 delivery rows", func() {
	ctx := context.Background()

	It("20: leaves a record that already carries token ids untouched and returns a retirable redundant build", func() {
		src := store.NewMemoryStore()
		Expect(src.Put(ctx, entry(call{id: "a", prompt: pA, gen: gA, res: R}))).To(Succeed())
		rec := consumer.Rollout{"_ng_rollout_id": "r-1", "response": map[string]any{"output": []any{
			map[string]any{"type": "message", "generation_token_ids": []any{1, 2}},
		}}}
		before := fmt.Sprint(rec)
		r := consumer.Finalize(ctx, rec, src, consumer.DefaultOptions())
		Expect(r).NotTo(BeNil())
		Expect(r.Redundant).To(BeTrue())
		Expect(fmt.Sprint(rec)).To(Equal(before))
		Expect(consumer.CanRetire(r)).To(BeTrue())
		Expect(string(mustJSON(r))).To(MatchJSON(fmt.Sprintf(
			`{"rebuilt_response":null,"mask_sample":false,"_redundant_capture":true,"_capture_snapshot":{"snapshot_id":%q,"version":%d}}`,
			r.Snapshot.SnapshotID, r.Snapshot.Version)))
		Expect(consumer.Retire(ctx, "r-1", src, r)).To(BeTrue())
	})

	DescribeTable("21: a record without a usable capture key is masked with the contract's error",
		func(rec consumer.Rollout, wantErr string) {
			r := consumer.Finalize(ctx, rec, store.NewMemoryStore(), consumer.DefaultOptions())
			Expect(r).NotTo(BeNil())
			Expect(r.MaskSample).To(BeTrue())
			Expect(r.Error).To(Equal(wantErr))
			Expect(rec["mask_sample"]).To(Equal(true))
			Expect(string(mustJSON(rec["_ng_token_capture"]))).To(MatchJSON(fmt.Sprintf(`{"n_calls":0,"error":%q}`, wantErr)))
			Expect(consumer.CanRetire(r)).To(BeFalse())
		},
		Entry("no indices", consumer.Rollout{"response": map[string]any{}}, "no capture key"),
		Entry("only a task index", consumer.Rollout{"_ng_task_index": 3}, "no capture key"),
		Entry("explicit id with a slash", consumer.Rollout{"_ng_rollout_id": "a/b"},
			"malformed rollout id: explicit _ng_rollout_id 'a/b' is not a valid rollout id"),
		Entry("explicit id with a leading dash", consumer.Rollout{"_ng_rollout_id": "-x"},
			"malformed rollout id: explicit _ng_rollout_id '-x' is not a valid rollout id"),
		Entry("explicit id that is a number", consumer.Rollout{"_ng_rollout_id": 42.0},
			"malformed rollout id: explicit _ng_rollout_id 42 is not a valid rollout id"),
		Entry("explicit id ending in a newline (Go refuses what Python's re.match accepts)", consumer.Rollout{"_ng_rollout_id": "abc\n"},
			`malformed rollout id: explicit _ng_rollout_id 'abc\n' is not a valid rollout id`),
		Entry("an attempt index that is not an integer", consumer.Rollout{"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": "x"},
			"malformed rollout id: _ng_attempt_index 'x' is not an integer"),
	)
})
