package harness_test

import (
	"context"
	"testing"

	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/scenarios"
)

// BenchmarkScenarioInProcess measures one full scenario round trip on the
// in-process backend: agent over HTTP through the proxy to the fake,
// freeze, finalize, durable append, retire, fidelity check.
func BenchmarkScenarioInProcess(b *testing.B) {
	for _, name := range []string{"single-chain/stream", "claude-code-hermes-tools"} {
		b.Run(name, func(b *testing.B) {
			sc, err := scenarios.Lookup(name)
			if err != nil {
				b.Fatal(err)
			}
			s, err := harness.NewSession(harness.Options{OutDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			if res := s.Scenario(ctx, sc); res.Status != harness.StatusPass { // warm the environment
				b.Fatalf("%s: %v", name, res.Mismatches)
			}
			b.ResetTimer()
			for b.Loop() {
				if res := s.Scenario(ctx, sc); res.Status != harness.StatusPass {
					b.Fatalf("%s: %v", name, res.Mismatches)
				}
			}
		})
	}
}
