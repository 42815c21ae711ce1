package scenarios

import (
	"strconv"
	"strings"

	"github.com/capbench/capbench/scenarios/agent"
)

// cliRows are what the real Claude Code CLI does that breaks (or, with a
// witness, does not break) a chain, seen on its traffic through the proxy:
// the CLI's own additions to an echoed Edit, its inline system message after
// a truncated Read, and its retry of a stream it saw cut. docs/claude-code-cli.md
// lists what was seen on the real CLI.
func cliRows() []Scenario {
	var out []Scenario
	add := func(s ...Scenario) { out = append(out, s...) }

	edit := claudePlan("claude-code-edit-replace-all", agent.Delivered)
	edit.Main.Task = "rename the greeting in main.go"
	edit.ToolResults = map[string]string{"Edit": "The file /workspace/main.go has been updated."}
	edit.EchoInputDefaults = map[string]string{"Edit": `"replace_all":false`}
	add(Scenario{
		Name: "claude-code-edit-replace-all",
		Description: "the model calls Edit with file_path, old_string, new_string; the CLI echoes the call back " +
			"as {\"replace_all\":false, ...input} (its default first, as seen from Claude Code 2.1.328), so the next request's assistant turn matches " +
			"no captured generation: the follow-up call is UNRESOLVED (no_match), a second root, and the record's " +
			"served id names a chain that starts after the broken link: masked",
		Row: "17", Agent: agent.ClaudeCode,
		Plan: edit,
		Scripts: []Script{{Name: "claude-code-edit-replace-all", Turns: []Turn{
			{ToolCalls: []ToolCall{{Name: "Edit", Arguments: `{"file_path": "/workspace/main.go", "old_string": "hello", "new_string": "hi"}`}}},
			{Content: "Renamed the greeting."},
		}}},
		Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 2),
			Eq("parent_link_failures", map[string]int{"parent_unresolved": 1}), Eq("unresolved_parent_calls", 1),
			Eq("roots", 2), Eq("chains", 2), Eq("terminal_attribution.chain", "broken")},
			Explain: "parent link failures: parent_unresolved=1"},
		Tags: []string{"stream", "cli"},
	})

	read := claudePlan("claude-code-truncated-read", agent.Delivered)
	read.Main.Task = "what does the server log say?"
	read.ToolResults = map[string]string{"Read": truncatedLog}
	read.InlineSystem = &agent.InlineSystem{Text: readTruncationNote}
	add(Scenario{
		Name: "claude-code-truncated-read",
		Description: "the main agent Reads a long file; the CLI sends the truncated result followed by a new inline " +
			"role:\"system\" note about the truncation. The proxy merges inline system messages into the leading " +
			"system message, so the follow-up prompt changes near its start: parent_digest_mismatch, two roots, " +
			"and the attributed chain crosses the mismatch: masked (not only sub-agents see such notes)",
		Row: "17", Agent: agent.ClaudeCode,
		Plan: read,
		Scripts: []Script{{Name: "claude-code-truncated-read", Turns: []Turn{
			{ToolCalls: []ToolCall{{Name: "Read", Arguments: `{"file_path": "/workspace/server.log"}`}}},
			{Content: "The log shows the server starting and serving requests."},
		}}},
		Server: defaultServer(),
		Expect: Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 2),
			Eq("parent_link_failures", map[string]int{"parent_digest_mismatch": 1}), Eq("unresolved_parent_calls", 1),
			Eq("roots", 2), Eq("chains", 2), Eq("terminal_attribution.chain", "broken")},
			Explain: "parent link failures: parent_digest_mismatch=1"},
		Tags: []string{"stream", "cli"},
	})

	cut := func(name string, turn int, attr agent.Attribution) Scenario {
		p := claudePlan(name, attr)
		p.Retries = []agent.Retry{{Turn: turn, Cut: true}}
		return Scenario{
			Name: name, Agent: agent.ClaudeCode, Plan: p, Server: defaultServer(),
			Scripts: []Script{{Name: name, Turns: []Turn{
				{ToolCalls: []ToolCall{claudeBash("echo hi", "Print hi")}},
				{Content: "The command printed hi."},
			}}},
			Tags: []string{"stream", "cli"},
		}
	}
	const cutHow = "the CLI's stream is cut just before message_stop (the proxy had captured the whole reply) and the CLI resends the identical body"
	s := cut("claude-code-cut-stream-first-call", 0, agent.Unattributed)
	s.Row = "5d"
	s.Description = "the first call: " + cutHow + "; both attempts are ROOTs and only the kept one is extended; " +
		"the harness's record names no served id, so roots != 1 masks"
	s.Expect = Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 3), Eq("roots", 2), Eq("chains", 1),
		Eq("quarantined_calls", 1), Eq("terminal_attribution.chain", "")},
		Explain: "the capture has 2 roots, not 1"}
	add(s)
	s = cut("claude-code-cut-stream-first-call-attributed", 0, agent.Delivered)
	s.Row = "5d"
	s.Description = "as claude-code-cut-stream-first-call, but the record names the kept chain's final served id: " +
		"the chain from the kept root is clean, delivered"
	s.Expect = Expect{MaskSample: false, Checks: []Check{Eq("n_calls", 3), Eq("roots", 2), Eq("quarantined_calls", 1),
		Eq("terminal_attribution.method", "response_id"), Eq("terminal_attribution.chain", "delivered")},
		Explain: "its chain from the root is clean, so exactly that chain is delivered"}
	add(s)
	s = cut("claude-code-cut-stream-final-call", 1, agent.Unattributed)
	s.Row = "5a"
	s.Description = "the final call: " + cutHow + "; two captured answers share one prompt and the record names " +
		"neither, so nothing says which attempt the CLI kept: an ambiguous retry, masked"
	s.Expect = Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 3), Eq("roots", 1), Eq("quarantined_calls", 1),
		Eq("terminal_attribution.chain", "")},
		Explain: "a call was retried and nothing says which attempt was kept"}
	add(s)
	s = cut("claude-code-cut-stream-final-call-attributed", 1, agent.Delivered)
	s.Row = "5b"
	s.Description = "as claude-code-cut-stream-final-call, but the record names the kept attempt's served id: delivered"
	s.Expect = Expect{MaskSample: false, Checks: []Check{Eq("n_calls", 3), Eq("roots", 1), Eq("quarantined_calls", 1),
		Eq("terminal_attribution.method", "response_id"), Eq("terminal_attribution.chain", "delivered")},
		Explain: "its chain from the root is clean, so exactly that chain is delivered"}
	add(s)

	upstream := cut("claude-code-upstream-cut-first-call", 0, agent.Delivered)
	upstream.Plan.Retries = []agent.Retry{{Turn: 0, Fault: "drop-mid-stream"}}
	upstream.Row = "6"
	upstream.Description = "control for the cut-stream rows: here vLLM's stream breaks upstream of the proxy, so the " +
		"first attempt is never captured (the proxy marks the rollout incomplete) and the CLI resends; even with " +
		"the kept chain attributed, an incomplete capture is masked (seen with the real CLI too)"
	upstream.Expect = Expect{MaskSample: true, Checks: []Check{Eq("n_calls", 2), Eq("roots", 1),
		Eq("capture_incomplete", true), Eq("terminal_attribution.chain", "delivered")},
		Explain: "Masked: the snapshot is incomplete"}
	add(upstream)
	return out
}

// readTruncationNote is the inline system note Claude Code 2.1.328 adds
// after a Read result it truncated (its shape, seen in harness/claudecode).
const readTruncationNote = "[Truncated: PARTIAL view — /workspace/server.log: showing lines 1-40 of 3001 total " +
	"(43901 tokens, cap 25000). Call Read with offset=41 limit=40 for the next page, or Grep to find a specific " +
	"section. Do NOT answer from this page alone if the answer may be further in the file.]"

// truncatedLog is a Read result in the CLI's numbered-line format.
var truncatedLog = func() string {
	var b strings.Builder
	for i := 1; i <= 40; i++ {
		b.WriteString(strings.Repeat(" ", 6-len(strconv.Itoa(i))) + strconv.Itoa(i) + "\tINFO request served in 3 ms\n")
	}
	return b.String()
}()
