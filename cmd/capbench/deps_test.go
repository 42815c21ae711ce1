package main

import (
	"context"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Every package linked into the binary runs its init on every start of every
// subcommand, `capbench verdict` included. A Docker SDK and its tree
// (testcontainers-go, moby, OpenTelemetry, distribution/reference) cost
// milliseconds there; the container backends use internal/dockerapi instead,
// and testcontainers-go stays in the test suites that drive it directly.
var _ = Describe("the capbench binary's dependencies", func() {
	It("links no Docker SDK, testcontainers-go or OpenTelemetry package", func(ctx SpecContext) {
		goTool, err := exec.LookPath("go")
		if err != nil {
			Skip("no go tool on PATH to list the binary's packages: " + err.Error())
		}
		lctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(lctx, goTool, "list", "-deps", "github.com/capbench/capbench/cmd/capbench")
		out, err := cmd.Output()
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		Expect(err).NotTo(HaveOccurred(), "go list -deps: %s", stderr)
		deps := strings.Fields(string(out))
		Expect(deps).To(ContainElement("github.com/capbench/capbench/harness/env"),
			"the list must be the binary's: it links the container backends")
		var banned []string
		for _, p := range deps {
			for _, prefix := range []string{"github.com/testcontainers/", "github.com/moby/", "github.com/docker/", "go.opentelemetry.io/"} {
				if strings.HasPrefix(p, prefix) {
					banned = append(banned, p)
				}
			}
		}
		Expect(banned).To(BeEmpty(), "packages the capbench binary must not link (each costs start-up time in its init); "+
			"find who imports one with `go mod why -m MODULE` or `go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/capbench`")
	}, SpecTimeout(4*time.Minute))
})
