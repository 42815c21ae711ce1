package scenarios

import (
	"fmt"

	"github.com/capbench/capbench/scenarios/agent"
)

// defaultServer is `vllm serve <model> --enable-auto-tool-choice
// --tool-call-parser hermes --max-model-len 65536`.
func defaultServer() Server {
	return Server{Model: DefaultModel, MaxModelLen: 65536, EnableAutoToolChoice: true,
		ToolCallParser: "hermes", ChatTemplateVariant: "plain"}
}

// Scripted turns shared by several scenarios.
func bash(cmd string) ToolCall {
	return ToolCall{Name: "bash", Arguments: fmt.Sprintf(`{"cmd": %q}`, cmd)}
}

func claudeBash(cmd, desc string) ToolCall {
	return ToolCall{Name: "Bash", Arguments: fmt.Sprintf(`{"command": %q, "description": %q}`, cmd, desc)}
}

// threeCallChat is a 3-call tool conversation for the Chat agents.
func threeCallChat(name string) Script {
	return Script{Name: name, Turns: []Turn{
		{ToolCalls: []ToolCall{bash("go list ./... | wc -l")}},
		{ToolCalls: []ToolCall{bash("go list ./... | grep -c internal")}},
		{Content: "14 packages, 5 of them internal."},
	}}
}

func chatPlan(script string, attr agent.Attribution, stream bool) agent.Plan {
	return agent.Plan{
		Model:       DefaultModel,
		Main:        agent.Conversation{Script: script, Task: "How many Go packages are there?"},
		Stream:      stream,
		ToolResults: map[string]string{"bash": "14"},
		Attribution: attr,
		Reward:      1,
	}
}

func claudePlan(script string, attr agent.Attribution) agent.Plan {
	return agent.Plan{
		Model:       DefaultModel,
		Main:        agent.Conversation{Script: script, Task: "run echo hi"},
		Stream:      true,
		ToolResults: map[string]string{"Bash": "hi"},
		Attribution: attr,
		Reward:      1,
	}
}

// healthy are the checks of a single clean delivered chain.
func healthy(nCalls int) []Check {
	return []Check{Eq("n_calls", nCalls), Eq("chains", 1), Eq("roots", 1),
		Eq("quarantined_calls", 0), Eq("delivered_fraction", 1.0),
		Eq("unresolved_parent_calls", 0), Eq("empty_generation_calls", 0),
		Absent("capture_incomplete")}
}

func withStreamVariants(s Scenario) []Scenario {
	st := s
	st.Name += "/stream"
	st.Plan.Stream = true
	st.Tags = append(append([]string{}, s.Tags...), "stream")
	ns := s
	ns.Name += "/nonstream"
	ns.Plan.Stream = false
	ns.Tags = append(append([]string{}, s.Tags...), "nonstream")
	return []Scenario{st, ns}
}

// All returns the catalog, in a stable order. Each call builds fresh values,
// so callers may modify what they get.
func All() []Scenario {
	var out []Scenario
	add := func(s ...Scenario) { out = append(out, s...) }

	add(withStreamVariants(Scenario{
		Name:        "single-chain",
		Description: "3 append-only calls; the record's response id is the last served id",
		Row:         "1", Agent: agent.OpenAIChat,
		Plan:    chatPlan("single-chain", agent.Delivered, true),
		Scripts: []Script{threeCallChat("single-chain")},
		Server:  defaultServer(),
		Expect: Expect{MaskSample: false, Checks: append(healthy(3),
			Eq("terminal_attribution.method", "response_id"), Eq("terminal_attribution.chain", "delivered"))},
	})...)

	add(withStreamVariants(Scenario{
		Name:        "unattributed-single-chain",
		Description: "3 calls; the harness synthesizes its transcript (fresh id, rewritten text): no witness, one clean chain",
		Row:         "2", Agent: agent.OpenAIChat,
		Plan:    chatPlan("unattributed-single-chain", agent.Unattributed, true),
		Scripts: []Script{threeCallChat("unattributed-single-chain")},
		Server:  defaultServer(),
		Expect: Expect{MaskSample: false, Checks: append(healthy(3),
			Eq("terminal_attribution.method", "none"), Eq("terminal_attribution.chain", ""))},
	})...)

	add(Scenario{
		Name:        "claude-code-hermes-tools",
		Description: "Claude-Code-like harness (Messages, streaming, max_tokens 32000) runs two Bash tool turns through the hermes parser",
		Row:         "3", Agent: agent.ClaudeCode,
		Plan: claudePlan("claude-code-hermes-tools", agent.Delivered),
		Scripts: []Script{{Name: "claude-code-hermes-tools", Turns: []Turn{
			{ToolCalls: []ToolCall{claudeBash("echo hi", "Print hi")}},
			{ToolCalls: []ToolCall{claudeBash("echo hi again", "Print again")}},
			{Content: "The command printed hi."},
		}}},
		Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: append(healthy(3),
			Eq("parent_link_failures", map[string]any{}), Eq("terminal_attribution.chain", "delivered"))},
		Tags: []string{"stream"},
	})

	add(withStreamVariants(Scenario{
		Name:        "hermes-tools-content-witness",
		Description: "Chat tool calls parsed by hermes; the record has no id, so the faithful transcript attributes by content",
		Row:         "3", Agent: agent.OpenAIChat,
		Plan:    chatPlan("hermes-tools-content-witness", agent.ContentOnly, true),
		Scripts: []Script{threeCallChat("hermes-tools-content-witness")},
		Server:  defaultServer(),
		Expect: Expect{MaskSample: false, Checks: append(healthy(3),
			OneOf("terminal_attribution.method", "content_output", "content_cumulative"),
			Eq("terminal_attribution.chain", "delivered"))},
	})...)

	add(Scenario{
		Name: "preamble-before-tool-call",
		Description: "the model writes text before its tool call; hermes keeps the text's trailing newline and the " +
			"template adds its own separator, so the next prompt does not extend the parent's tokens",
		Row: "17", Agent: agent.OpenAIChat,
		Plan: chatPlan("preamble-before-tool-call", agent.Delivered, false),
		Scripts: []Script{{Name: "preamble-before-tool-call", Turns: []Turn{
			{Content: "Listing packages.", ToolCalls: []ToolCall{bash("go list ./... | wc -l")}},
			{Content: "14 packages."},
		}}},
		Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 2),
			Eq("parent_link_failures.parent_digest_mismatch", 1), Eq("terminal_attribution.chain", "broken")}},
		Tags: []string{"nonstream"},
	})

	noParser := defaultServer()
	noParser.EnableAutoToolChoice, noParser.ToolCallParser = false, ""
	plainTools := chatPlan("tools-without-parser", agent.Unattributed, false)
	plainTools.ToolChoice = "none"
	add(Scenario{
		Name:        "tools-without-parser",
		Description: "vLLM started without --enable-auto-tool-choice/--tool-call-parser: the tool call stays text, every rollout is one call",
		Row:         "9.2", Agent: agent.OpenAIChat,
		Plan: plainTools, Scripts: []Script{threeCallChat("tools-without-parser")},
		Server: noParser,
		Expect: Expect{MaskSample: false, Checks: append(healthy(1), Eq("terminal_attribution.chain", ""))},
	})
	add(Scenario{
		Name:        "tools-auto-without-parser",
		Description: "tool_choice auto against a server without the parser flags: vLLM refuses the call, nothing is captured",
		Row:         "12", Agent: agent.OpenAIChat,
		Plan:    chatPlan("tools-auto-without-parser", agent.Delivered, false),
		Scripts: []Script{threeCallChat("tools-auto-without-parser")},
		Server:  noParser,
		Expect: Expect{MaskSample: true, AgentError: `"auto" tool choice requires`,
			Checks: []Check{Eq("n_calls", 0), Contains("error", "capture contains no token records"), Eq("capture_incomplete", true)}},
	})

	probe := claudePlan("claude-code-head-probe", agent.Delivered)
	probe.Probe = true
	add(Scenario{
		Name: "claude-code-head-probe",
		Description: "the CLI's HEAD probe under the training prefix (nonessential traffic on) precedes the task; " +
			"this scenario expects the proxy never to mark the rollout incomplete for the probe: probes are " +
			"answered and never count as model calls, so the rollout stays healthy. That is the newer variant " +
			"of row Q5 (docs/scenarios.md); the older behaviour (mark_incomplete for any non-dialect path under the capture " +
			"prefix) would mask this rollout",
		Row: "Q5", Agent: agent.ClaudeCode,
		Plan: probe,
		Scripts: []Script{{Name: "claude-code-head-probe", Turns: []Turn{
			{ToolCalls: []ToolCall{claudeBash("echo hi", "Print hi")}},
			{Content: "The command printed hi."},
		}}},
		Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: append(healthy(2), Eq("terminal_attribution.chain", "delivered"))},
		Tags:   []string{"stream"},
	})

	long := claudePlan("long-context-32k", agent.Delivered)
	long.Main.Task = "say hi"
	add(Scenario{
		Name:        "long-context-32k",
		Description: "Claude-Code request with max_tokens 32000 on --max-model-len 65536: fits",
		Row:         "1", Agent: agent.ClaudeCode,
		Plan:    long,
		Scripts: []Script{{Name: "long-context-32k", Turns: []Turn{{Content: "hi"}}}},
		Server:  defaultServer(),
		Expect:  Expect{MaskSample: false, Checks: append(healthy(1), Eq("terminal_attribution.chain", "delivered"))},
		Tags:    []string{"stream"},
	})
	small := defaultServer()
	small.MaxModelLen = 32768
	tooSmall := claudePlan("long-context-too-small", agent.Delivered)
	tooSmall.Main.Task = "say hi"
	add(Scenario{
		Name:        "long-context-too-small",
		Description: "max_tokens 32000 plus the CLI prompt exceed --max-model-len 32768: vLLM's context-length error, the intent dangles",
		Row:         "6", Agent: agent.ClaudeCode,
		Plan:    tooSmall,
		Scripts: []Script{{Name: "long-context-too-small", Turns: []Turn{{Content: "hi"}}}},
		Server:  small,
		Expect: Expect{MaskSample: true, AgentError: "maximum context length",
			Checks: []Check{Eq("n_calls", 0), Contains("error", "capture contains no token records"), Eq("capture_incomplete", true)}},
		Tags: []string{"stream"},
	})

	midRetry := chatPlan("retry-middle-call", agent.Delivered, true)
	midRetry.Retries = []agent.Retry{{Turn: 1}}
	add(withStreamVariants(Scenario{
		Name:        "retry-middle-call",
		Description: "the second call is resent with an identical body; the agent keeps and continues the second attempt",
		Row:         "4", Agent: agent.OpenAIChat,
		Plan: midRetry, Scripts: []Script{threeCallChat("retry-middle-call")}, Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: []Check{Eq("n_calls", 4), Eq("quarantined_calls", 1),
			Eq("chains", 1), Eq("roots", 1), Less("delivered_fraction", 1),
			OneOf("terminal_attribution.chain", "", "delivered")}},
	})...)

	finalRetry := chatPlan("retry-final-call", agent.Unattributed, true)
	finalRetry.Retries = []agent.Retry{{Turn: 2}}
	add(Scenario{
		Name:        "retry-final-call",
		Description: "the final call is resent; nothing says which attempt the harness kept",
		Row:         "5a", Agent: agent.OpenAIChat,
		Plan: finalRetry, Scripts: []Script{threeCallChat("retry-final-call")}, Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 4), Eq("quarantined_calls", 1),
			Eq("chains", 1), Eq("terminal_attribution.chain", "")}},
		Tags: []string{"stream"},
	})
	finalRetryAttr := chatPlan("retry-final-call-attributed", agent.Delivered, true)
	finalRetryAttr.Retries = []agent.Retry{{Turn: 2}}
	add(Scenario{
		Name:        "retry-final-call-attributed",
		Description: "the final call is resent; the record names the kept attempt's served id",
		Row:         "5b", Agent: agent.OpenAIChat,
		Plan: finalRetryAttr, Scripts: []Script{threeCallChat("retry-final-call-attributed")}, Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: []Check{Eq("n_calls", 4), Eq("quarantined_calls", 1),
			Eq("terminal_attribution.chain", "delivered")}},
		Tags: []string{"stream"},
	})

	lost := chatPlan("lost-call", agent.Delivered, true)
	lost.Retries = []agent.Retry{{Turn: 1, Fault: "500"}}
	add(Scenario{
		Name:        "lost-call",
		Description: "the second call fails upstream (HTTP 500) after its intent was registered; the agent resends and finishes",
		Row:         "6", Agent: agent.OpenAIChat,
		Plan: lost, Scripts: []Script{threeCallChat("lost-call")}, Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("capture_incomplete", true), Eq("n_calls", 3)}},
		Tags:   []string{"stream"},
	})

	add(Scenario{
		Name:        "capture-write-failure",
		Description: "the store refuses the second record (Put fails); the call still succeeds, the rollout is incomplete",
		Row:         "7", Agent: agent.OpenAIChat,
		Plan:    chatPlan("capture-write-failure", agent.Delivered, true),
		Scripts: []Script{threeCallChat("capture-write-failure")}, Server: defaultServer(),
		Capture: Capture{FailPut: 2},
		Expect:  Expect{MaskSample: true, Checks: []Check{Eq("capture_incomplete", true), Eq("n_calls", 2)}},
		Tags:    []string{"stream"},
	})

	add(Scenario{
		Name:        "no-token-ids",
		Description: "the backend returns the second reply without log-probs (no token ids); that call is marked incomplete",
		Row:         "13", Agent: agent.OpenAIChat,
		Plan: func() agent.Plan {
			p := chatPlan("no-token-ids", agent.Delivered, false)
			p.Faults = map[int]string{1: "no-logprobs"}
			return p
		}(),
		Scripts: []Script{threeCallChat("no-token-ids")}, Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("capture_incomplete", true)}},
		Tags:   []string{"nonstream"},
	})

	compactScripts := func(name string) []Script {
		return []Script{threeCallChat(name), {Name: name + ".compacted", Turns: []Turn{
			{ToolCalls: []ToolCall{bash("go list ./... | grep -c internal")}},
			{Content: "14 packages, 5 of them internal."},
		}}}
	}
	compaction := func(name string, attr agent.Attribution, keep bool) agent.Plan {
		p := chatPlan(name, attr, true)
		p.Compaction = &agent.Compaction{AfterTurn: 0, KeepLastAssistant: keep, Script: name + ".compacted",
			Summary: "Summary of the conversation so far: the repository has 14 Go packages. Continue the task."}
		return p
	}
	add(Scenario{
		Name:        "compaction-new-root",
		Description: "after the first tool turn the history is replaced by a summary (no assistant turns): a new ROOT, unattributed",
		Row:         "8a", Agent: agent.OpenAIChat,
		Plan:    compaction("compaction-new-root", agent.Unattributed, false),
		Scripts: compactScripts("compaction-new-root"), Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("roots", 2), Eq("chains", 2),
			Less("delivered_fraction", 1), Eq("terminal_attribution.chain", "")}},
		Tags: []string{"stream"},
	})
	add(Scenario{
		Name:        "compaction-attributed",
		Description: "compaction to a new ROOT; the record names the final (post-compaction) call",
		Row:         "8b", Agent: agent.OpenAIChat,
		Plan:    compaction("compaction-attributed", agent.Delivered, false),
		Scripts: compactScripts("compaction-attributed"), Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: []Check{Eq("chains", 2), Less("delivered_fraction", 1),
			Eq("terminal_attribution.chain", "delivered")}},
		Tags: []string{"stream"},
	})
	add(Scenario{
		Name:        "compaction-rewritten-context",
		Description: "compaction keeps the last assistant turn but rewrites the context before it: an UNRESOLVED boundary",
		Row:         "8c", Agent: agent.OpenAIChat,
		Plan: compaction("compaction-rewritten-context", agent.Unattributed, true),
		Scripts: []Script{threeCallChat("compaction-rewritten-context"), {Name: "compaction-rewritten-context.compacted", Turns: []Turn{
			{Content: "unused"},
			{Content: "14 packages, 5 of them internal."},
		}}},
		Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("unresolved_parent_calls", 1),
			Eq("parent_link_failures.parent_unresolved", 1), Eq("terminal_attribution.chain", "")}},
		Tags: []string{"stream"},
	})

	subagent := func(name string, attr agent.Attribution) Scenario {
		p := claudePlan(name, attr)
		p.Main.Task = "Find out what the build prints"
		p.SubAgent = &agent.SubAgent{Tool: "Agent", Conversation: agent.Conversation{
			Script: name + ".sub", Task: "Run the build and report what it prints.",
			System: "You are a sub-agent. Do the task you are given and report back in one sentence."}}
		return Scenario{
			Agent: agent.ClaudeCode, Plan: p, Server: defaultServer(), Tags: []string{"stream"},
			Scripts: []Script{
				{Name: name, Turns: []Turn{
					{ToolCalls: []ToolCall{{Name: "Agent", Arguments: `{"description": "Run the build", "prompt": "Run the build and report what it prints."}`}}},
					{Content: "The build prints ok."},
				}},
				{Name: name + ".sub", Turns: []Turn{
					{ToolCalls: []ToolCall{claudeBash("make", "Build")}},
					{Content: "The build printed ok."},
				}},
			},
		}
	}
	s := subagent("subagent-branch", agent.Unattributed)
	s.Name, s.Row = "subagent-branch", "9a"
	s.Description = "the main agent spawns a sub-agent (own system prompt, own ROOT) in the same rollout; unattributed"
	s.Expect = Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 4), Eq("roots", 2), Eq("chains", 2),
		Eq("terminal_attribution.chain", "")}}
	add(s)
	s = subagent("subagent-branch-attributed", agent.Delivered)
	s.Name, s.Row = "subagent-branch-attributed", "9b"
	s.Description = "sub-agent branch; the record names the main agent's final call"
	s.Expect = Expect{MaskSample: false, Checks: []Check{Eq("n_calls", 4), Eq("chains", 2),
		Less("delivered_fraction", 1), Eq("terminal_attribution.chain", "delivered")}}
	add(s)

	title := func(name string, attr agent.Attribution) Scenario {
		p := claudePlan(name, attr)
		p.Title = &agent.Conversation{Script: name + ".title", MaxTokens: 512,
			System: "Generate a concise title (at most 6 words) for the conversation. Reply with the title only.",
			Task:   "run echo hi"}
		p.Tools = nil
		return Scenario{
			Agent: agent.ClaudeCode, Plan: p, Server: defaultServer(), Tags: []string{"stream"},
			Scripts: []Script{
				{Name: name, Turns: []Turn{
					{ToolCalls: []ToolCall{claudeBash("echo hi", "Print hi")}},
					{Content: "The command printed hi."},
				}},
				{Name: name + ".title", Turns: []Turn{{Content: "Echo greeting"}}},
			},
		}
	}
	s = title("title-call", agent.Unattributed)
	s.Name, s.Row = "title-call", "10a"
	s.Description = "an auxiliary title call finishes before the task; unattributed, so the earliest root (the title) is the main chain"
	s.Expect = Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 3), Eq("roots", 2), Eq("chains", 2),
		Eq("terminal_attribution.chain", "")}}
	add(s)
	s = title("title-call-attributed", agent.Delivered)
	s.Name, s.Row = "title-call-attributed", "10b"
	s.Description = "auxiliary title call; the record names the task's final call, so only the task chain is delivered"
	s.Expect = Expect{MaskSample: false, Checks: []Check{Eq("n_calls", 3), Eq("chains", 2),
		Less("delivered_fraction", 1), Eq("terminal_attribution.chain", "delivered")}}
	add(s)

	thinking := defaultServer()
	thinking.ChatTemplateVariant, thinking.ReasoningParser = "thinking", "qwen3"
	thinkPlan := chatPlan("thinking-drops-reasoning", agent.Unattributed, true)
	thinkPlan.EchoReasoning = true
	thinkPlan.FollowUps = []string{"And how many of them are internal?"}
	add(Scenario{
		Name: "thinking-drops-reasoning",
		Description: "a thinking chat template drops the reasoning of turns before the latest user message, " +
			"so the follow-up prompt does not extend the parent's tokens",
		Row: "11", Agent: agent.OpenAIChat,
		Plan: thinkPlan,
		Scripts: []Script{{Name: "thinking-drops-reasoning", Turns: []Turn{
			{Reasoning: "I should count the packages.", Content: "There are 14 packages."},
			{Reasoning: "Five of them live under internal.", Content: "5 of them are internal."},
		}}},
		Server: thinking,
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 2), Eq("parent_link_failures.parent_digest_mismatch", 1),
			Eq("unresolved_parent_calls", 1), Eq("roots", 2), Eq("chains", 2), Eq("terminal_attribution.chain", "")}},
		Tags: []string{"stream"},
	})

	add(Scenario{
		Name:        "missing-training-segment",
		Description: "a custom harness builds /ng-rollout/<id>/v1/... itself, without training-token-capture: nothing is recorded",
		Row:         "12", Agent: agent.Custom,
		Plan:    chatPlan("missing-training-segment", agent.Delivered, false),
		Scripts: []Script{threeCallChat("missing-training-segment")}, Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 0),
			Contains("error", "capture contains no token records")}},
		Tags: []string{"nonstream"},
	})

	add(Scenario{
		Name: "empty-generation",
		Description: "the only call generates nothing but EOS; vLLM still returns the EOS token id and its " +
			"log-prob, so the capture holds a 1-token generation that is delivered (row 14a of docs/scenarios.md needs a " +
			"backend that returns zero generated tokens)",
		Row: "14a", Agent: agent.OpenAIChat,
		Plan:    chatPlan("empty-generation", agent.Unattributed, false),
		Scripts: []Script{{Name: "empty-generation", Turns: []Turn{{Empty: true}}}}, Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: append(healthy(1), Eq("generated_tokens_captured", 1))},
		Tags:   []string{"nonstream"},
	})

	add(Scenario{
		Name:        "declared-terminal-not-captured",
		Description: "the record declares a terminal response id that no captured call served",
		Row:         "15", Agent: agent.OpenAIChat,
		Plan:    chatPlan("declared-terminal-not-captured", agent.DeclaredUnknown, true),
		Scripts: []Script{threeCallChat("declared-terminal-not-captured")}, Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("terminal_attribution.method", "none"),
			Contains("terminal_attribution.reason", "declared_terminal_not_captured"), Eq("terminal_attribution.chain", "")}},
		Tags: []string{"stream"},
	})
	add(moreRows()...)
	add(argOrderScenarios()...)
	add(cliRows()...)
	add(unscripted()...)
	return out
}

// Names lists the catalog's scenario names in order.
func Names() []string {
	all := All()
	names := make([]string, len(all))
	for i, s := range all {
		names[i] = s.Name
	}
	return names
}

// Lookup returns the scenario called name.
func Lookup(name string) (Scenario, error) {
	for _, s := range All() {
		if s.Name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("%w: %q (known: %v)", ErrUnknownScenario, name, Names())
}

// Select returns the scenarios named (all of them for "all" or no names).
func Select(names ...string) ([]Scenario, error) {
	if len(names) == 0 || (len(names) == 1 && (names[0] == "all" || names[0] == "")) {
		return All(), nil
	}
	out := make([]Scenario, 0, len(names))
	for _, n := range names {
		s, err := Lookup(n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
