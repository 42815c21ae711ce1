package builder_test

import (
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer/builder"
	"github.com/capbench/capbench/capture/record"
)

type rec struct {
	id      string
	prompt  []int
	gen     []int
	res     record.Resolution
	parent  string
	delta   bool
	cum     []int // full cumulative when delta (for cum_len/digest)
	items   []record.Item
	index   *int
	created float64
}

func mk(r rec) *record.Entry {
	cum := r.cum
	if cum == nil {
		cum = append(append([]int{}, r.prompt...), r.gen...)
	}
	d, err := record.TokenDigest(cum)
	Expect(err).NotTo(HaveOccurred())
	n := len(cum)
	lp := make([]float64, len(r.gen))
	e := &record.Entry{
		SchemaVersion: record.SchemaVersion, RolloutID: "r", ModelCallID: r.id,
		PromptTokenIDs: r.prompt, GenerationTokenIDs: r.gen, GenerationLogProbs: lp,
		OutputItems: r.items, TokenItemIndex: r.index, CumLen: &n, Digest: &d,
		PromptIsDelta: r.delta, CreatedAt: r.created,
	}
	if r.res != "" {
		res := r.res
		e.ParentResolution = &res
	}
	if r.parent != "" {
		p := r.parent
		e.ParentCallID = &p
	}
	return e
}

func intp(i int) *int { return &i }

var _ = Describe("prefix_merging", func() {
	It("projects the contract's two-call example (§4.3)", func() {
		a := mk(rec{id: "a", prompt: []int{10, 11}, gen: []int{12, 13}, res: record.ResolutionRoot, index: intp(1),
			items: []record.Item{{"type": "message", "content": "Let me check."}, {"type": "function_call", "name": "f"}}})
		b := mk(rec{id: "b", prompt: []int{10, 11, 12, 13, 20, 21}, gen: []int{22}, res: record.ResolutionResolved, parent: "a", index: intp(0),
			items: []record.Item{{"type": "message", "content": "Done."}}})
		out, err := builder.Run([]*record.Entry{b, a}, builder.PrefixMerging, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Chains).To(HaveLen(1))
		Expect(out.Chains[0].Links[1].Interstitial).To(Equal([]int{20, 21}))
		resp, err := builder.Project("r-1", out, "pol")
		Expect(err).NotTo(HaveOccurred())
		Expect(builder.CheckContiguity(resp)).To(Succeed())
		output := resp["output"].([]any)
		Expect(output).To(HaveLen(3))
		Expect(output[0]).NotTo(HaveKey("prompt_token_ids"))
		Expect(output[1]).To(HaveKeyWithValue("prompt_token_ids", []int{10, 11}))
		Expect(output[1]).To(HaveKeyWithValue("generation_token_ids", []int{12, 13}))
		Expect(output[2]).To(HaveKeyWithValue("prompt_token_ids", []int{10, 11, 12, 13, 20, 21}))
		Expect(output[2]).To(HaveKeyWithValue("generation_token_ids", []int{22}))
		Expect(resp["usage"]).To(Equal(map[string]any{"input_tokens": 2, "output_tokens": 3}))
		Expect(resp["id"]).To(Equal("proj-r-1"))
	})

	It("emits a token-only item for a record without output items", func() {
		a := mk(rec{id: "a", prompt: []int{1}, gen: []int{2}, res: record.ResolutionRoot})
		out, err := builder.PrefixMergingBuild([]*record.Entry{a}, "")
		Expect(err).NotTo(HaveOccurred())
		resp, err := builder.Project("r", out, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(resp["output"]).To(Equal([]any{map[string]any{
			"type": "message", "prompt_token_ids": []int{1}, "generation_token_ids": []int{2}, "generation_log_probs": []float64{0},
		}}))
	})

	It("materialises delta prompts and checks them against the stamped digest", func() {
		a := mk(rec{id: "a", prompt: []int{1, 2}, gen: []int{3}, res: record.ResolutionRoot})
		b := mk(rec{id: "b", prompt: []int{4}, gen: []int{5}, res: record.ResolutionResolved, parent: "a", delta: true, cum: []int{1, 2, 3, 4, 5}})
		c := mk(rec{id: "c", prompt: []int{6}, gen: []int{7}, res: record.ResolutionResolved, parent: "b", delta: true, cum: []int{1, 2, 3, 4, 5, 6, 7}})
		out, err := builder.PrefixMergingBuild([]*record.Entry{c, b, a}, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Notes.ParentLinkFailures).To(BeEmpty())
		Expect(out.Chains).To(HaveLen(1))
		Expect(out.Chains[0].Links).To(HaveLen(3))
		Expect(out.Chains[0].Links[2].Entry.PromptTokenIDs).To(Equal([]int{1, 2, 3, 4, 5, 6}))
		Expect(out.Chains[0].Links[2].Entry.PromptIsDelta).To(BeFalse())
		Expect(c.PromptTokenIDs).To(Equal([]int{6}), "the input record is not modified")
	})

	DescribeTable("drops unreconstructable delta records",
		func(entries func() []*record.Entry, dropped []string) {
			out, err := builder.PrefixMergingBuild(entries(), "")
			Expect(err).NotTo(HaveOccurred())
			Expect(out.Notes.ParentLinkFailures).To(HaveKeyWithValue("delta_chain_unreconstructable", len(dropped)))
			Expect(out.Notes.UnresolvedParentCalls).To(Equal(dropped))
		},
		Entry("missing parent", func() []*record.Entry {
			return []*record.Entry{
				mk(rec{id: "a", prompt: []int{1}, gen: []int{2}, res: record.ResolutionRoot}),
				mk(rec{id: "b", prompt: []int{4}, gen: []int{5}, res: record.ResolutionResolved, parent: "gone", delta: true, cum: []int{9, 4, 5}}),
			}
		}, []string{"b"}),
		Entry("cycle", func() []*record.Entry {
			return []*record.Entry{
				mk(rec{id: "a", prompt: []int{1}, gen: []int{2}, res: record.ResolutionRoot}),
				mk(rec{id: "x", prompt: []int{4}, gen: []int{5}, res: record.ResolutionResolved, parent: "y", delta: true, cum: []int{4, 5}}),
				mk(rec{id: "y", prompt: []int{6}, gen: []int{7}, res: record.ResolutionResolved, parent: "x", delta: true, cum: []int{6, 7}}),
			}
		}, []string{"x", "y"}),
		Entry("digest mismatch", func() []*record.Entry {
			return []*record.Entry{
				mk(rec{id: "a", prompt: []int{1}, gen: []int{2}, res: record.ResolutionRoot}),
				mk(rec{id: "b", prompt: []int{4}, gen: []int{5}, res: record.ResolutionResolved, parent: "a", delta: true, cum: []int{1, 2, 9, 5}}),
			}
		}, []string{"b"}),
	)

	It("counts a parent-less record as missing_resolution and a recorded verdict without id as resolved_parent_missing_id", func() {
		a := mk(rec{id: "a", prompt: []int{1}, gen: []int{2}})
		b := mk(rec{id: "b", prompt: []int{1, 2, 3}, gen: []int{4}, res: record.ResolutionResolved})
		out, err := builder.PrefixMergingBuild([]*record.Entry{a, b}, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Notes.ParentLinkFailures).To(Equal(map[string]int{"missing_resolution": 1, "resolved_parent_missing_id": 1}))
		Expect(out.Notes.Roots).To(Equal(2))
		Expect(out.Notes.UnresolvedParentCalls).To(Equal([]string{"a", "b"}))
	})

	It("does not recover a missing parent when two placed records share the prefix", func() {
		a1 := mk(rec{id: "a1", prompt: []int{1}, gen: []int{2}, res: record.ResolutionRoot})
		a2 := mk(rec{id: "a2", prompt: []int{1}, gen: []int{2}, res: record.ResolutionRoot})
		c := mk(rec{id: "c", prompt: []int{1, 2, 3}, gen: []int{4}, res: record.ResolutionResolved, parent: "gone"})
		out, err := builder.PrefixMergingBuild([]*record.Entry{a1, a2, c}, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Notes.ParentLinkFailures).To(Equal(map[string]int{"parent_call_id_missing": 1}))
	})

	It("rejects an unknown builder with Gym's message", func() {
		_, err := builder.Run(nil, "per_request", "")
		Expect(err).To(MatchError("unknown builder 'per_request'; known: ['prefix_merging']"))
		Expect(errors.Is(err, builder.ErrBuild)).To(BeTrue())
		Expect(builder.ErrorKind(err)).To(Equal("ValueError"))
	})

	It("reports a log-prob/token length mismatch on validation", func() {
		a := mk(rec{id: "a", prompt: []int{1}, gen: []int{2, 3}, res: record.ResolutionRoot})
		a.GenerationLogProbs = []float64{-1}
		out, err := builder.PrefixMergingBuild([]*record.Entry{a}, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Chains[0].Validate()).To(MatchError("log-prob/token length mismatch on a: 1 vs 2"))
	})

	It("rejects a projection that is not prefix-contiguous", func() {
		resp := map[string]any{"output": []any{
			map[string]any{"prompt_token_ids": []int{1}, "generation_token_ids": []int{2}},
			map[string]any{"prompt_token_ids": []int{1, 3}, "generation_token_ids": []int{4}},
		}}
		err := builder.CheckContiguity(resp)
		Expect(err).To(HaveOccurred())
		Expect(builder.ErrorKind(err)).To(Equal("AssertionError"))
	})

	It("truncates calls after the attributed terminal", func() {
		a := mk(rec{id: "a", prompt: []int{1}, gen: []int{2}, res: record.ResolutionRoot})
		b := mk(rec{id: "b", prompt: []int{1, 2, 3}, gen: []int{4}, res: record.ResolutionResolved, parent: "a"})
		out, err := builder.PrefixMergingBuild([]*record.Entry{a, b}, "a")
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Notes.TerminalChain).To(Equal("delivered"))
		Expect(out.Chains).To(HaveLen(1))
		Expect(out.Chains[0].Links).To(HaveLen(1))
		Expect(out.Notes.DeliveredFraction).To(Equal(0.5))
	})

	It("builds a deep chain without recursion", func() {
		const depth = 2000
		master := make([]int, 2*depth+1)
		for i := range master {
			master[i] = i
		}
		entries := make([]*record.Entry, depth)
		for i := range entries {
			r := rec{id: "c" + itoa(100000+i), prompt: master[:2*i], gen: master[2*i : 2*i+1], res: record.ResolutionRoot}
			if i > 0 {
				r.res = record.ResolutionResolved
				r.parent = entries[i-1].ModelCallID
			}
			entries[i] = mk(r)
		}
		out, err := builder.PrefixMergingBuild(entries, entries[depth-1].ModelCallID)
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Notes.TerminalChain).To(Equal("delivered"))
		Expect(out.Chains).To(HaveLen(1))
		Expect(out.Chains[0].Links).To(HaveLen(depth))
		resp, err := builder.Project("r", out, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(builder.CheckContiguity(resp)).To(Succeed())
	})
})

var _ = DescribeTable("Round4 rounds like Python's round(x, 4)",
	func(x, want float64) { Expect(builder.Round4(x)).To(Equal(want)) },
	Entry("25/31", 25.0/31.0, 0.8065),
	Entry("exact", 1.0, 1.0),
	Entry("binary value just below a tie", 0.00015, 0.0001),
	Entry("one third", 1.0/3.0, 0.3333),
	Entry("exact tie rounds to even (down)", 1.0/32.0, 0.0312),
	Entry("exact tie rounds to even (up)", 3.0/32.0, 0.0938),
)

var _ = DescribeTable("PyRepr renders a str as Python's repr",
	func(in, want string) { Expect(builder.PyRepr(in)).To(Equal(want)) },
	Entry("plain", "abc", "'abc'"),
	Entry("newline", "26-0\n", `'26-0\n'`),
	Entry("single quote", "it's", `"it's"`),
	Entry("both quotes", `it's "x"`, `'it\'s "x"'`),
)

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for i > 0 {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
	}
	return string(b)
}
