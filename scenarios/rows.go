package scenarios

import "github.com/capbench/capbench/scenarios/agent"

// moreRows covers the rows of docs/scenarios.md about identical retries, a retried
// first call, an empty middle generation, disagreeing witnesses, explicit
// ids and records delivery cannot consume or need not rebuild.
//
// Rows the real path cannot produce, and so are not here:
//   - 14a needs a zero-token generation; vLLM (and the fake) always return
//     the EOS token for an immediate stop, and max_tokens must be at least
//     1, so the "empty-generation" scenario shows the 1-token reality.
//   - 17 through a quarantined retry: the builder keeps every retry sibling
//     on the attributed terminal's path, so a quarantined record is never an
//     ancestor of the terminal; only the digest-mismatch variant exists
//     ("preamble-before-tool-call").
//   - 19: the proxy gives every request a fresh call id and the file store
//     refuses a conflicting re-put, so one snapshot never holds two records
//     with one call id.
func moreRows() []Scenario {
	var out []Scenario
	add := func(s ...Scenario) { out = append(out, s...) }

	identical := chatPlan("retry-final-identical", agent.ContentOnly, true)
	identical.Retries = []agent.Retry{{Turn: 2}}
	add(Scenario{
		Name: "retry-final-identical",
		Description: "row 5c of docs/scenarios.md: the final call is resent with an identical body and the fake samples " +
			"deterministically, so both attempts hold the same tokens; the record has no id and its faithful " +
			"transcript matches both attempts by content, which collapse to the smaller call id: delivered, unmasked",
		Row: "5c", Agent: agent.OpenAIChat,
		Plan: identical, Scripts: []Script{threeCallChat("retry-final-identical")}, Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: []Check{Eq("n_calls", 4), Eq("quarantined_calls", 1),
			Eq("chains", 1), Eq("roots", 1),
			OneOf("terminal_attribution.method", "content_output", "content_cumulative"),
			Eq("terminal_attribution.chain", "delivered")}},
		Tags: []string{"stream"},
	})

	first := chatPlan("retry-first-call", agent.Unattributed, true)
	first.Retries = []agent.Retry{{Turn: 0}}
	add(Scenario{
		Name: "retry-first-call",
		Description: "row 5d of docs/scenarios.md: the first call is resent with an identical body; both attempts are ROOTs " +
			"(nothing precedes them) and only the kept one is extended; unattributed, so roots != 1 masks",
		Row: "5d", Agent: agent.OpenAIChat,
		Plan: first, Scripts: []Script{threeCallChat("retry-first-call")}, Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 4), Eq("roots", 2), Eq("chains", 1),
			Eq("quarantined_calls", 1), Eq("terminal_attribution.chain", "")}},
		Tags: []string{"stream"},
	})

	emptyMid := chatPlan("empty-generation-middle", agent.Unattributed, false)
	emptyMid.FollowUps = []string{"Please answer: how many packages?"}
	add(Scenario{
		Name: "empty-generation-middle",
		Description: "row 14b of docs/scenarios.md: the second call ends the turn with an empty reply and the harness asks " +
			"again; the empty assistant turn adds nothing to the assistant fingerprint, so the next request " +
			"verifies against both the empty call and its parent and resolves UNRESOLVED (ambiguous): a boundary, " +
			"two roots, two chains, masked. Difference from the row: empty_generation_calls is 0, not 1, because " +
			"vLLM (and the fake) returns the EOS token id for an immediate stop, so the empty reply is a 1-token " +
			"generation the builder keeps",
		Row: "14b", Agent: agent.OpenAIChat,
		Plan: emptyMid,
		Scripts: []Script{{Name: "empty-generation-middle", Turns: []Turn{
			{ToolCalls: []ToolCall{bash("go list ./... | wc -l")}},
			{Empty: true},
			{Content: "14 packages."},
		}}},
		Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 3), Eq("empty_generation_calls", 0),
			Eq("parent_link_failures", map[string]any{"parent_unresolved": 1}), Eq("unresolved_parent_calls", 1),
			Eq("roots", 2), Eq("chains", 2), Eq("terminal_attribution.chain", "")}},
		Tags: []string{"nonstream"},
	})

	disagree := func(name string, attr agent.Attribution) Scenario {
		return Scenario{
			Name: name, Agent: agent.OpenAIChat, Plan: chatPlan(name, attr, true),
			Scripts: []Script{threeCallChat(name)}, Server: defaultServer(), Seal: SealFirstCall,
			Tags: []string{"stream"},
		}
	}
	s := disagree("witnesses-disagree", agent.Delivered)
	s.Row = "16a"
	s.Description = "row 16a of docs/scenarios.md: a gate seals `_ng_terminal_model_call_id` with the rollout's first call while " +
		"the record's response id is the last served id; the two witnesses name calls with different tokens, " +
		"so attribution abstains (witness_disagreement) and, with no declared id, the single-chain policy " +
		"applies: one clean chain, unmasked"
	s.Expect = Expect{MaskSample: false, Checks: append(healthy(3), Eq("terminal_attribution.method", "none"),
		Contains("terminal_attribution.reason", "witness_disagreement[explicit="),
		Eq("terminal_attribution.chain", ""))}
	add(s)
	s = disagree("witnesses-disagree-declared", agent.Declared)
	s.Row = "16b"
	s.Description = "row 16b of docs/scenarios.md: as witnesses-disagree, but the record also declares `terminal_response_id` " +
		"(the last served id); the declared witness disagrees with the sealed first call, attribution abstains " +
		"and a declared id always masks an unattributed record (row 4 of the mask decision, docs/consumer.md)"
	s.Expect = Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 3), Eq("chains", 1), Eq("roots", 1),
		Eq("terminal_attribution.method", "none"),
		Contains("terminal_attribution.reason", "witness_disagreement[explicit="),
		Eq("terminal_attribution.chain", "")}}
	add(s)

	uncaptured := chatPlan("explicit-terminal-not-captured", agent.Unattributed, true)
	uncaptured.ExplicitCallID = "0000000000000000000000000000dead"
	add(Scenario{
		Name: "explicit-terminal-not-captured",
		Description: "row 18 of docs/scenarios.md: the agent declares `_ng_terminal_model_call_id` for a call the capture " +
			"never saw, and its synthesized transcript (fresh id, rewritten text) attributes nothing else; the " +
			"explicit witness abstains (explicit_terminal_not_captured) and the single-chain policy leaves one " +
			"clean chain unmasked",
		Row: "18", Agent: agent.OpenAIChat,
		Plan: uncaptured, Scripts: []Script{threeCallChat("explicit-terminal-not-captured")}, Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: append(healthy(3), Eq("terminal_attribution.method", "none"),
			Contains("terminal_attribution.reason", "explicit_terminal_not_captured"),
			Eq("terminal_attribution.chain", ""))},
		Tags: []string{"stream"},
	})

	native := chatPlan("native-token-agent", agent.Delivered, false)
	native.NativeTokens = true
	add(Scenario{
		Name: "native-token-agent",
		Description: "row 20 of docs/scenarios.md: a native token-aware agent asks for log-probs itself and writes each " +
			"reply's generated token ids onto its output items; delivery sees token ids already on the record, " +
			"leaves it unchanged (no _ng_token_capture, no mask) and returns a redundant build whose snapshot " +
			"is retired",
		Row: "20", Agent: agent.OpenAIChat,
		Plan: native, Scripts: []Script{threeCallChat("native-token-agent")}, Server: defaultServer(),
		Expect: Expect{MaskSample: false, Redundant: true},
		Tags:   []string{"nonstream"},
	})

	noKey := chatPlan("record-without-rollout-id", agent.Delivered, true)
	noKey.RecordKey = agent.KeyOmitted
	add(Scenario{
		Name: "record-without-rollout-id",
		Description: "row 21 of docs/scenarios.md: the calls go through the rollout-correlated URL, but the agent's record " +
			"carries neither `_ng_rollout_id` nor task/rollout indices; delivery cannot name the capture, so the " +
			"record is unusable: masked with error \"no capture key\"",
		Row: "21", Agent: agent.OpenAIChat,
		Plan: noKey, Scripts: []Script{threeCallChat("record-without-rollout-id")}, Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 0), Eq("error", "no capture key")}},
		Tags:   []string{"stream"},
	})
	badKey := chatPlan("record-malformed-rollout-id", agent.Delivered, true)
	badKey.RecordKey = agent.KeyMalformed
	add(Scenario{
		Name: "record-malformed-rollout-id",
		Description: "row 21 of docs/scenarios.md: the agent's record carries an `_ng_rollout_id` with a slash, outside the " +
			"rollout id pattern (its URL used the valid id); delivery refuses to rewrite it: unusable, masked " +
			"with error \"malformed rollout id: …\"",
		Row: "21", Agent: agent.OpenAIChat,
		Plan: badKey, Scripts: []Script{threeCallChat("record-malformed-rollout-id")}, Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 0), Contains("error", "malformed rollout id: ")}},
		Tags:   []string{"stream"},
	})
	add(inlineSystemRows()...)
	return out
}

// agentListReminder is the text of the inline role:"system" message the
// Claude Code CLI sends after a tool result (its agent list).
const agentListReminder = "Available agent types for the Agent tool:\n" +
	"- general-purpose: general agent for researching complex questions and running multi-step tasks\n" +
	"- Explore: fast agent for exploring codebases"

// inlineSystemRows are the Claude Code CLI's inline role:"system" message:
// new after a tool result (a digest-mismatch boundary) and, as the control,
// present from the first call on (a clean chain).
func inlineSystemRows() []Scenario {
	script := func(name string) []Script {
		return []Script{{Name: name, Turns: []Turn{
			{ToolCalls: []ToolCall{claudeBash("echo hi", "Print hi")}},
			{Content: "The command printed hi."},
		}}}
	}
	plan := func(name string, fromFirstCall bool) agent.Plan {
		p := claudePlan(name, agent.Delivered)
		p.InlineSystem = &agent.InlineSystem{Text: agentListReminder, FromFirstCall: fromFirstCall}
		return p
	}
	return []Scenario{{
		Name: "claude-code-inline-system-after-tool",
		Description: "the Claude-Code-like agent makes a Bash tool call, then sends the tool result followed by a " +
			"new role:\"system\" message (the CLI's agent list, as in its recorded subagent run). The proxy, like " +
			"vLLM's Messages-to-Chat translation, merges inline system messages into the one " +
			"leading system message Qwen's template needs, so call 2's rendered prompt changes near its start and " +
			"no longer extends call 1's prompt and generation. Parent resolution (docs/capture-path.md) counts system items by role " +
			"only, so call 2 resolves to call 1 at request time; the builder's token check (docs/consumer.md, \"Building chains\") then " +
			"fails: parent_digest_mismatch, a boundary with two roots and two chains. The record names call 2's " +
			"served id, so the attributed chain crosses the mismatch: broken, masked (rows 11 and 17). Observed " +
			"on the real path, as the analysis predicted: call 2's record says parent_resolution resolved " +
			"(parent = call 1) and the verdict reports the mismatch",
		Row: "17", Agent: agent.ClaudeCode,
		Plan: plan("claude-code-inline-system-after-tool", false), Scripts: script("claude-code-inline-system-after-tool"),
		Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 2),
			Eq("parent_link_failures", map[string]int{"parent_digest_mismatch": 1}), Eq("unresolved_parent_calls", 1),
			Eq("roots", 2), Eq("chains", 2),
			Eq("terminal_attribution.method", "response_id"), Eq("terminal_attribution.chain", "broken")}},
		Tags: []string{"stream"},
	}, {
		Name: "claude-code-inline-system-from-start",
		Description: "control for claude-code-inline-system-after-tool: the same conversation and the same extra " +
			"role:\"system\" message, but present from the first call on (right after the CLI's environment " +
			"message). The merged leading system text is the same in both calls, so call 2's prompt extends call " +
			"1's prompt and generation: one clean delivered chain (row 3)",
		Row: "3", Agent: agent.ClaudeCode,
		Plan: plan("claude-code-inline-system-from-start", true), Scripts: script("claude-code-inline-system-from-start"),
		Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: append(healthy(2),
			Eq("parent_link_failures", map[string]any{}), Eq("terminal_attribution.method", "response_id"),
			Eq("terminal_attribution.chain", "delivered"))},
		Tags: []string{"stream"},
	}}
}
