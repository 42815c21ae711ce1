package scenarios_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/scenarios"
	"github.com/capbench/capbench/scenarios/agent"
)

var _ = Describe("the catalog", func() {
	It("holds self-consistent scenarios with unique names", func() {
		seen := map[string]bool{}
		for _, s := range scenarios.All() {
			Expect(s.Validate()).To(Succeed(), s.Name)
			Expect(seen).NotTo(HaveKey(s.Name))
			seen[s.Name] = true
			Expect(s.Description).NotTo(BeEmpty(), s.Name)
			Expect(s.Server.Model).NotTo(BeEmpty(), s.Name)
		}
	})

	It("covers the scenarios the walkthrough and the contract table name", func() {
		names := scenarios.Names()
		for _, want := range []string{
			"single-chain/stream", "single-chain/nonstream", "unattributed-single-chain/stream",
			"claude-code-hermes-tools", "tools-without-parser", "long-context-32k", "long-context-too-small",
			"retry-middle-call/stream", "retry-final-call", "lost-call", "capture-write-failure",
			"compaction-new-root", "compaction-rewritten-context", "subagent-branch", "title-call",
			"thinking-drops-reasoning", "missing-training-segment", "no-token-ids", "empty-generation",
			"retry-final-identical", "retry-first-call", "empty-generation-middle", "witnesses-disagree",
			"witnesses-disagree-declared", "explicit-terminal-not-captured", "native-token-agent",
			"record-without-rollout-id", "record-malformed-rollout-id",
			"claude-code-inline-system-after-tool", "claude-code-inline-system-from-start",
		} {
			Expect(names).To(ContainElement(want))
		}
	})

	It("names the contract row of every scenario and says why in its description", func() {
		rows := map[scenarios.Row]bool{}
		for _, s := range scenarios.All() {
			Expect(s.Row).NotTo(BeEmpty(), s.Name)
			rows[s.Row] = true
		}
		for _, want := range []scenarios.Row{"1", "2", "3", "4", "5a", "5b", "5c", "5d", "6", "7", "8a", "8b", "8c",
			"9a", "9b", "10a", "10b", "11", "12", "13", "14a", "14b", "15", "16a", "16b", "17", "18", "20", "21"} {
			Expect(rows).To(HaveKey(want))
		}
	})

	It("builds fresh values on every call, so callers may edit them", func() {
		a := scenarios.All()
		a[0].Plan.Main.Task = "changed"
		a[0].Scripts[0].Turns[0].Content = "changed"
		b := scenarios.All()
		Expect(b[0].Plan.Main.Task).NotTo(Equal("changed"))
		Expect(b[0].Scripts[0].Turns[0].Content).NotTo(Equal("changed"))
	})

	It("selects by name, all, and refuses unknown names", func() {
		all, err := scenarios.Select("all")
		Expect(err).NotTo(HaveOccurred())
		Expect(all).To(HaveLen(len(scenarios.All())))
		one, err := scenarios.Select("lost-call")
		Expect(err).NotTo(HaveOccurred())
		Expect(one).To(HaveLen(1))
		_, err = scenarios.Select("lost-call", "no-such-thing")
		Expect(err).To(MatchError(scenarios.ErrUnknownScenario))
		Expect(err.Error()).To(ContainSubstring("no-such-thing"))
	})

	It("rejects a scenario whose plan uses an undefined script", func() {
		s, err := scenarios.Lookup("subagent-branch")
		Expect(err).NotTo(HaveOccurred())
		s.Scripts = s.Scripts[:1]
		Expect(s.Validate()).To(MatchError(ContainSubstring(`undefined script "subagent-branch.sub"`)))
		s2, _ := scenarios.Lookup("witnesses-disagree")
		s2.Seal = "last-call"
		Expect(s2.Validate()).To(MatchError(ContainSubstring(`unknown seal "last-call"`)))
		s.Agent = agent.Kind("nope")
		Expect(s.Validate()).To(MatchError(ContainSubstring("unknown agent")))
	})

	It("says which field to set when a conversation names no script", func() {
		s, err := scenarios.Lookup("single-chain/stream")
		Expect(err).NotTo(HaveOccurred())
		s.Plan.Main.Script = ""
		Expect(s.Validate()).To(MatchError(ContainSubstring("names no script (set Conversation.Script)")))
	})

	It("keeps unscripted scenarios free of scripts, so they can run against a real vLLM", func() {
		s, err := scenarios.Lookup("unscripted-single-call/stream")
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Validate()).To(Succeed())
		s.Plan.Main.Script = "single-chain"
		Expect(s.Validate()).To(MatchError(ContainSubstring("an unscripted scenario defines and names no script")))
	})

	It("gives servers that differ different keys", func() {
		a, _ := scenarios.Lookup("long-context-32k")
		b, _ := scenarios.Lookup("long-context-too-small")
		c, _ := scenarios.Lookup("single-chain/stream")
		Expect(a.Server.Key()).NotTo(Equal(b.Server.Key()))
		Expect(a.Server.Key()).To(Equal(c.Server.Key()))
	})
})

var _ = DescribeTable("metric checks",
	func(c scenarios.Check, metrics map[string]any, want bool) {
		_, ok := c.Evaluate(metrics)
		Expect(ok).To(Equal(want), c.String())
	},
	Entry("equal numbers", scenarios.Eq("n_calls", 3), map[string]any{"n_calls": 3.0}, true),
	Entry("different numbers", scenarios.Eq("n_calls", 3), map[string]any{"n_calls": 2.0}, false),
	Entry("number vs string", scenarios.Eq("n_calls", 3), map[string]any{"n_calls": "3"}, false),
	Entry("nested path", scenarios.Eq("terminal_attribution.chain", "delivered"),
		map[string]any{"terminal_attribution": map[string]any{"chain": "delivered"}}, true),
	Entry("missing path", scenarios.Eq("terminal_attribution.chain", ""), map[string]any{}, false),
	Entry("path through a non-object", scenarios.Eq("n_calls.x", 1), map[string]any{"n_calls": 1.0}, false),
	Entry("less", scenarios.Less("delivered_fraction", 1), map[string]any{"delivered_fraction": 0.45}, true),
	Entry("not less", scenarios.Less("delivered_fraction", 1), map[string]any{"delivered_fraction": 1.0}, false),
	Entry("less on a string", scenarios.Less("delivered_fraction", 1), map[string]any{"delivered_fraction": "0.4"}, false),
	Entry("at least", scenarios.AtLeast("n_calls", 1), map[string]any{"n_calls": 1.0}, true),
	Entry("one of", scenarios.OneOf("terminal_attribution.chain", "", "delivered"),
		map[string]any{"terminal_attribution": map[string]any{"chain": ""}}, true),
	Entry("none of", scenarios.OneOf("terminal_attribution.chain", "", "delivered"),
		map[string]any{"terminal_attribution": map[string]any{"chain": "broken"}}, false),
	Entry("contains", scenarios.Contains("error", "no token records"), map[string]any{"error": "capture contains no token records"}, true),
	Entry("absent", scenarios.Absent("capture_incomplete"), map[string]any{"n_calls": 1.0}, true),
	Entry("present though absent wanted", scenarios.Absent("capture_incomplete"), map[string]any{"capture_incomplete": true}, false),
	Entry("empty map equals empty map", scenarios.Eq("parent_link_failures", map[string]any{}), map[string]any{"parent_link_failures": map[string]any{}}, true),
	Entry("map with extra key", scenarios.Eq("parent_link_failures", map[string]any{}),
		map[string]any{"parent_link_failures": map[string]any{"parent_unresolved": 1.0}}, false),
	Entry("counter map literal equal", scenarios.Eq("parent_link_failures", map[string]int{"parent_unresolved": 1}),
		map[string]any{"parent_link_failures": map[string]any{"parent_unresolved": 1.0}}, true),
	Entry("counter map literal with a different count", scenarios.Eq("parent_link_failures", map[string]int{"parent_unresolved": 1}),
		map[string]any{"parent_link_failures": map[string]any{"parent_unresolved": 2.0}}, false),
	Entry("counter map literal missing a key", scenarios.Eq("parent_link_failures", map[string]int{"parent_unresolved": 1}),
		map[string]any{"parent_link_failures": map[string]any{"parent_digest_mismatch": 1.0}}, false),
	Entry("nil metrics", scenarios.Eq("n_calls", 0), nil, false),
)
