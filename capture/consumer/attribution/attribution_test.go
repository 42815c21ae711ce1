package attribution_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer/attribution"
	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
)

func entry(id string, prompt, gen []int, respID string, items ...record.Item) *record.Entry {
	e := &record.Entry{ModelCallID: id, PromptTokenIDs: prompt, GenerationTokenIDs: gen, OutputItems: items}
	if respID != "" {
		e.ResponseID = &respID
	}
	return e
}

func assistant(text string) record.Item {
	return record.Item{"type": "message", "role": "assistant", "content": text}
}

// Two calls: call1 says "step one" and calls a tool, call2 says "final answer".
func twoCalls() []*record.Entry {
	return []*record.Entry{
		entry("call1", []int{1}, []int{2}, "resp-1", assistant("step one")),
		entry("call2", []int{1, 2, 3}, []int{4}, "resp-2", assistant("final answer")),
	}
}

func transcript(id string) map[string]any {
	return map[string]any{"id": id, "output": []any{
		map[string]any{"role": "assistant", "content": "step one"},
		map[string]any{"type": "function_call_output", "call_id": "t", "output": "42"},
		map[string]any{"role": "assistant", "content": "final answer"},
	}}
}

var _ = DescribeTable("terminal attribution (§5.5–5.7 examples)",
	func(entries []*record.Entry, in attribution.Inputs, callID, method, reason string) {
		r := attribution.Resolve(entries, in)
		Expect(r.CallID).To(Equal(callID))
		Expect(r.Method).To(Equal(method))
		Expect(r.Reason).To(Equal(reason))
	},
	Entry("merged transcript whose id names call 2", twoCalls(), attribution.Inputs{Response: transcript("resp-2")},
		"call2", "response_id", "corroborated_by=content_output"),
	Entry("the same transcript without an id", twoCalls(), attribution.Inputs{Response: transcript("")},
		"call2", "content_output", "response_has_no_id"),
	Entry("a transcript ending in a tool output has no trailing block",
		twoCalls(), attribution.Inputs{Response: map[string]any{"output": []any{
			map[string]any{"role": "assistant", "content": "step one"},
			map[string]any{"role": "assistant", "content": "final answer"},
			map[string]any{"type": "function_call_output", "call_id": "t", "output": "42"},
		}}},
		"", "", "response_has_no_id,no_content_match"),
	Entry("the same text produced at two depths is ambiguous",
		[]*record.Entry{
			entry("c1", []int{1}, []int{2}, "", assistant("done")),
			entry("c2", []int{1, 2, 3}, []int{4}, "", assistant("done")),
		}, attribution.Inputs{Response: map[string]any{"output": []any{map[string]any{"role": "assistant", "content": "done"}}}},
		"", "", "response_has_no_id,content_ambiguous"),
	Entry("explicit names call 1 but the id names call 2",
		twoCalls(), attribution.Inputs{ExplicitCallID: "call1", Response: map[string]any{"id": "resp-2", "output": []any{}}},
		"", "", "response_has_no_output,witness_disagreement[explicit=call1;response_id=call2]"),
	Entry("an explicit id that was not captured abstains",
		twoCalls(), attribution.Inputs{ExplicitCallID: "ghost"},
		"", "", "explicit_terminal_not_captured,no_response_object"),
	Entry("a declared id that matches nothing returns at once",
		twoCalls(), attribution.Inputs{DeclaredResponseID: "resp-9", Response: transcript("resp-2")},
		"", "", "declared_terminal_not_captured"),
	Entry("a declared id matching two different sequences is ambiguous",
		[]*record.Entry{
			entry("c1", []int{1}, []int{2}, "same"),
			entry("c2", []int{1}, []int{3}, "same"),
		}, attribution.Inputs{DeclaredResponseID: "same"},
		"", "", "declared_ambiguous"),
	Entry("a declared id agreeing with the response id",
		twoCalls(), attribution.Inputs{DeclaredResponseID: "resp-2", Response: transcript("resp-2")},
		"call2", "declared", "corroborated_by=response_id+content_output"),
	Entry("a response id shared by identical retries collapses to the smaller call id",
		[]*record.Entry{
			entry("c9", []int{1}, []int{2}, "same"),
			entry("c3", []int{1}, []int{2}, "same"),
		}, attribution.Inputs{Response: map[string]any{"id": "same", "output": "not a list"}},
		"c3", "response_id", "response_has_no_output"),
	Entry("a response id shared by different sequences is ambiguous",
		[]*record.Entry{
			entry("c1", []int{1}, []int{2}, "same"),
			entry("c2", []int{1}, []int{3}, "same"),
		}, attribution.Inputs{Response: map[string]any{"id": "same", "output": []any{map[string]any{"role": "user", "content": "hi"}}}},
		"", "", "response_id_ambiguous,no_model_authored_output"),
	Entry("an unfingerprintable output abstains",
		twoCalls(), attribution.Inputs{Response: map[string]any{"id": "x", "output": []any{
			map[string]any{"role": "assistant", "content": 42},
		}}},
		"", "", "response_id_no_match,response_output_unfingerprintable"),
	Entry("an empty response object counts as none",
		twoCalls(), attribution.Inputs{Response: map[string]any{}},
		"", "", "no_response_object"),
)

var _ = Describe("the cumulative reading", func() {
	It("matches a continuation fingerprint only when stamped at the current version", func() {
		items := []any{
			map[string]any{"role": "assistant", "content": "step one"},
			map[string]any{"role": "user", "content": "go on"},
			map[string]any{"role": "assistant", "content": "final answer"},
		}
		target, err := lineage.AssistantFingerprint(items)
		Expect(err).NotTo(HaveOccurred())
		stale, current := 1, lineage.FingerprintVersion
		old := entry("c1", []int{1}, []int{2}, "")
		old.ContinuationFingerprint, old.FingerprintVersion = target, &stale
		fresh := entry("c2", []int{1, 2, 3}, []int{4}, "")
		fresh.ContinuationFingerprint, fresh.FingerprintVersion = target, &current

		r := attribution.Resolve([]*record.Entry{old, fresh}, attribution.Inputs{Response: map[string]any{"output": items}})
		Expect(r.CallID).To(Equal("c2"))
		Expect(r.Method).To(Equal("content_cumulative"))
		Expect(r.Reason).To(Equal("response_has_no_id"))
	})
})
