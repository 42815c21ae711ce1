// Package e2e holds end-to-end suites for the fake vLLM: the FROM-scratch
// container image built with testcontainers-go, and wire compatibility with
// the official openai npm client. The suites skip with a reason when Docker,
// node or node_modules are missing, unless CI=true, where they fail.
package e2e
