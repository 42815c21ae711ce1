package agent

import "strings"

func objectSchema(required []string, props map[string]any) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func str(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }

// claudeCodeTools is the CLI's default tool list (names and argument shapes;
// descriptions are short summaries written for capbench).
func claudeCodeTools() []Tool {
	return []Tool{
		{Name: "Agent", Description: "Launch a sub-agent that works on a task on its own and reports back.",
			Parameters: objectSchema([]string{"description", "prompt"}, map[string]any{
				"description": str("A short description of the task"), "prompt": str("The task for the agent"),
				"subagent_type": str("The kind of agent to use")})},
		{Name: "Bash", Description: "Run a bash command and return its output.",
			Parameters: objectSchema([]string{"command"}, map[string]any{
				"command": str("The command to run"), "description": str("What the command does"),
				"timeout": map[string]any{"type": "number", "description": "Timeout in milliseconds"}})},
		{Name: "Edit", Description: "Replace an exact string in a file.",
			Parameters: objectSchema([]string{"file_path", "old_string", "new_string"}, map[string]any{
				"file_path": str("Absolute path"), "old_string": str("Text to replace"), "new_string": str("Replacement")})},
		{Name: "ListAgents", Description: "List the running sub-agents.", Parameters: objectSchema(nil, map[string]any{})},
		{Name: "Read", Description: "Read a file from the local filesystem.",
			Parameters: objectSchema([]string{"file_path"}, map[string]any{
				"file_path": str("Absolute path"), "offset": map[string]any{"type": "number"}, "limit": map[string]any{"type": "number"}})},
		{Name: "ReportFindings", Description: "Report findings to the user.",
			Parameters: objectSchema([]string{"findings"}, map[string]any{"findings": str("The findings")})},
		{Name: "ScheduleWakeup", Description: "Ask to be re-invoked later.",
			Parameters: objectSchema([]string{"delay_seconds"}, map[string]any{"delay_seconds": map[string]any{"type": "number"}})},
		{Name: "Skill", Description: "Run a named skill.",
			Parameters: objectSchema([]string{"skill"}, map[string]any{"skill": str("Skill name")})},
		{Name: "ToolSearch", Description: "Search the deferred tools by keyword.",
			Parameters: objectSchema([]string{"query"}, map[string]any{"query": str("Keywords")})},
		{Name: "Workflow", Description: "Run a multi-step workflow.",
			Parameters: objectSchema([]string{"name"}, map[string]any{"name": str("Workflow name")})},
		{Name: "DeferredToolPlaceholder", Description: "Placeholder for tools loaded on demand.", Parameters: objectSchema(nil, map[string]any{})},
		{Name: "Write", Description: "Write a file to the local filesystem.",
			Parameters: objectSchema([]string{"file_path", "content"}, map[string]any{
				"file_path": str("Absolute path"), "content": str("File content")})},
	}
}

// chatTools is the OpenAI agent's default tool list.
func chatTools() []Tool {
	return []Tool{
		{Name: "bash", Description: "Run a shell command and return its output.",
			Parameters: objectSchema([]string{"cmd"}, map[string]any{"cmd": str("The command to run")})},
		{Name: "read_file", Description: "Read a file.",
			Parameters: objectSchema([]string{"path"}, map[string]any{"path": str("The file path")})},
	}
}

// claudeCodeSystemPrompt stands in for the CLI's main prompt: several KB of
// guidance, enough that a 32000-token max_tokens overflows a 32k context.
var claudeCodeSystemPrompt = "\nYou are an interactive agent that helps users with software engineering tasks. " +
	"Use the instructions below and the tools available to you to assist the user.\n\n" +
	strings.Repeat("# Doing tasks\nRead the relevant files before changing them. Prefer small, verifiable steps. "+
		"Run the project's tests after a change and report what you ran. Keep answers short and concrete; "+
		"cite file paths and line numbers. Never guess at command output: run the command.\n\n", 24)

// claudeCodeEnvironment is the role:"system" message the CLI sends inside
// messages (environment, agent list, date).
var claudeCodeEnvironment = "# Environment\nYou have been invoked in the following environment: \n" +
	" - Primary working directory: /workspace\n - Is a git repository: false\n - Platform: linux\n" +
	" - Shell: bash\n - OS Version: Linux 6.1.0-generic\n\nToday's date is 2026-11-29."
