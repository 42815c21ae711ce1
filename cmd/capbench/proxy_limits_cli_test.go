package main

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
)

var _ = Describe("capbench proxy's limit flags", func() {
	DescribeTable("are checked before the proxy listens, with the flag's name",
		func(ctx SpecContext, args []string, want string) {
			_, err := capbench(ctx, append([]string{"proxy", "--upstream", "http://127.0.0.1:1"}, args...)...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("budget below the body limit", []string{"--max-body-bytes", "1000", "--max-inflight-body-bytes", "999"},
			"--max-inflight-body-bytes 999 is below --max-body-bytes 1000"),
		Entry("negative timeout", []string{"--read-body-timeout", "-1s"}, "--read-body-timeout -1s is negative"),
		Entry("negative connection cap", []string{"--max-connections", "-1"}, "--max-connections -1 is negative"),
	)

	It("mints the rollout token the proxy checks", func(ctx SpecContext) {
		out, err := capbench(ctx, "proxy", "rollout-token", "--rollout-secret", "s3", "r-1")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal(proxy.RolloutToken("s3", "r-1") + "\n"))
		_, err = capbench(ctx, "proxy", "rollout-token", "r-1")
		Expect(err).To(MatchError(ContainSubstring("--rollout-secret (or CAPBENCH_ROLLOUT_SECRET) is required")))
	})
})
