// Package e2e holds the catalog suites that need more than this process: the
// fake vLLM as a separate process, and fake and proxy as FROM-scratch
// containers on a private network (the container backend, which talks to
// the Docker engine through internal/dockerapi). The container suite
// skips with a reason when no container engine is usable, unless CI=true.
package e2e
