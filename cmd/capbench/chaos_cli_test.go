package main

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness/chaos"
	"github.com/capbench/capbench/harness/env"
)

var _ = Describe("capbench chaos", func() {
	DescribeTable("refuses bad flags before starting anything, naming the flag",
		func(ctx SpecContext, args []string, want string) {
			_, err := capbench(ctx, append([]string{"chaos", "--binary", "/nonexistent"}, args...)...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("unknown scenario", []string{"--scenario", "nope"}, `--scenario "nope": unknown`),
		Entry("negative duration", []string{"--duration", "-1s"}, "--duration -1s is negative"),
		Entry("negative calls", []string{"--calls", "-5"}, "--calls -5 is negative"),
	)

	DescribeTable("fails unless something ran and nothing was lost or corrupt",
		func(rows []chaos.Row, want string) {
			err := verdict(chaos.Result{Rows: rows})
			if want == "" {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("all skipped", []chaos.Row{{Scenario: "disk", Skipped: "no tmpfs"}}, "nothing was tested"),
		Entry("a lost call", []chaos.Row{{Scenario: "kill", Acknowledged: 3, Stored: 2, Lost: 1}}, "kill: 1 lost, 0 corrupt"),
		Entry("a corrupt record", []chaos.Row{{Scenario: "two", Corrupt: 2}}, "two: 0 lost, 2 corrupt"),
		Entry("clean, one skipped", []chaos.Row{{Scenario: "kill", Acknowledged: 3, Stored: 3}, {Scenario: "disk", Skipped: "no tmpfs"}}, ""),
	)

	It("runs a scenario against real proxy processes and prints the table", func(ctx SpecContext) {
		if testing.Short() {
			Skip("builds capbench and starts proxy processes; skipped with -short")
		}
		bin, err := env.BuildBinary(ctx, GinkgoT().TempDir(), false)
		Expect(err).NotTo(HaveOccurred())
		out, err := capbench(ctx, "chaos", "--binary", bin, "--scenario", "watch", "--calls", "200", "--dir", GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("inputs tried"))
		Expect(out).To(MatchRegexp(`memory and descriptor watch .* 200 +200 +200 +0 +0 +0 `))
	})
})
