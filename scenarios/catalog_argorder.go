package scenarios

import "github.com/capbench/capbench/scenarios/agent"

// argOrderScenarios are Claude Code tool rounds whose arguments the model
// writes in the tool schema's key order (not alphabetically), as real models
// do. The harness echoes each call back with the keys in the order it got
// them; the proxy must re-send that order to the engine, or the next prompt
// no longer contains the generated tokens and the chain breaks.
func argOrderScenarios() []Scenario {
	rounds := []struct {
		name, desc, tool, args, result string
	}{
		{"claude-code-write-schema-order", "Write with file_path before content", "Write",
			`{"file_path": "/workspace/notes.txt", "content": "line one\nline two\n"}`, "File created successfully at: /workspace/notes.txt"},
		{"claude-code-edit-schema-order", "Edit with file_path, old_string, new_string", "Edit",
			`{"file_path": "/workspace/main.go", "old_string": "x := 1", "new_string": "x := 2"}`, "The file /workspace/main.go has been updated."},
		{"claude-code-read-offset-limit", "Read with integer offset and limit after the path", "Read",
			`{"file_path": "/workspace/build.log", "offset": 120, "limit": 40}`, "120\tok\n121\tdone"},
		{"claude-code-nested-argument", "a tool argument that is an object with unsorted keys, inside a list", "Agent",
			`{"description": "Find callers", "prompt": "List the callers of Open", "options": {"zeta": 1, "alpha": [{"y": 2.5, "x": "a"}]}}`, "Found 3 callers."},
		{"claude-code-non-ascii-argument", "Write with non-ASCII path and content (kept raw, as vLLM's tool parser writes them)", "Write",
			`{"file_path": "/workspace/résumé.md", "content": "héllo — ✓ 日本語"}`, "File created successfully."},
	}
	out := make([]Scenario, 0, len(rounds))
	for _, r := range rounds {
		plan := claudePlan(r.name, agent.Delivered)
		plan.ToolResults = map[string]string{r.tool: r.result}
		out = append(out, Scenario{
			Name:        r.name,
			Description: "Claude-Code-like harness: " + r.desc + "; the echoed call must render as the generated tokens (one chain)",
			Row:         "3", Agent: agent.ClaudeCode,
			Plan: plan,
			Scripts: []Script{{Name: r.name, Turns: []Turn{
				{ToolCalls: []ToolCall{{Name: r.tool, Arguments: r.args}}},
				{Content: "Done."},
			}}},
			Server: defaultServer(),
			Expect: Expect{MaskSample: false, Checks: append(healthy(2),
				Eq("parent_link_failures", map[string]any{}), Eq("terminal_attribution.chain", "delivered"))},
			Tags: []string{"stream", "argument-order"},
		})
	}
	return out
}
