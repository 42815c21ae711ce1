// Package claudecode runs the real Claude Code CLI headless against the
// capture proxy, so that a suite can check the whole path a reference
// harness takes: CLI → proxy (Anthropic Messages) → vLLM → store → consumer.
//
// The CLI is large and is not installed by default, so everything that needs
// it is opt-in: Executable resolves it from the CAPBENCH_CLAUDE_CODE setting
// and reports ErrNotEnabled when it is off (the specs skip) and
// ErrNotInstalled when it is on but names nothing runnable (the specs fail:
// an opted-in run without the CLI must not pass as skipped). Command builds
// an invocation that can only reach the given base URL: a fresh HOME, a
// dummy API key and the flags that turn off telemetry, auto-update and other
// nonessential traffic.
//
// The suite drives Bash, Write, Read and Edit round trips, a sub-agent (its
// calls routed to their own fake script by x-claude-code-agent-id), a fault
// on the first attempt only, a missing script and a truncated Read, and
// checks every record against the fake's ledger.
package claudecode
