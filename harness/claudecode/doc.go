// Package claudecode runs the real Claude Code CLI headless against the
// capture proxy, so that a suite can check the whole path a reference
// harness takes: CLI → proxy (Anthropic Messages) → vLLM → store → consumer.
//
// The CLI is large and is not installed by default, so everything that needs
// it is opt-in: Executable resolves it from the CAPBENCH_CLAUDE_CODE setting
// and reports ErrNotEnabled when it is off. Command builds an invocation that
// can only reach the given base URL: a fresh HOME, a dummy API key and the
// flags that turn off telemetry, auto-update and other nonessential traffic.
package claudecode
