// Package e2e holds the catalog suites that need more than this process: the
// fake vLLM as a separate process, and fake and proxy as FROM-scratch
// containers on a private network (testcontainers-go). The container suite
// skips with a reason when no container engine is usable, unless CI=true.
package e2e
