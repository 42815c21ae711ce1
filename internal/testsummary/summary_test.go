package main

import (
	"bytes"
	"encoding/json"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// stream renders test2json events for one package's output lines.
func stream(pkg string, lines []string, final string) string {
	var b bytes.Buffer
	for _, l := range lines {
		e, _ := json.Marshal(event{Action: "output", Package: pkg, Test: "TestSuite", Output: l + "\n"})
		b.Write(append(e, '\n'))
	}
	e, _ := json.Marshal(event{Action: final, Package: pkg})
	b.Write(append(e, '\n'))
	return b.String()
}

var _ = Describe("the skip summary", func() {
	ginkgoSkip := []string{
		"Running Suite: Proxy Suite",
		"------------------------------",
		"two proxy processes writing one rollout [It] leave an intact file [process]",
		"/x/multiprocess_test.go:53",
		"  [SKIPPED] in [It] - /x/multiprocess_test.go:55 @ 12/01/26 16:40:53.24",
		"S [SKIPPED] [0.000 seconds]",
		"two proxy processes writing one rollout [It] leave an intact file [process]",
		"/x/multiprocess_test.go:53",
		"",
		"  [SKIPPED] builds and starts processes; skipped with -short",
		"  In [It] at: /x/multiprocess_test.go:55 @ 12/01/26 16:40:53.24",
		"------------------------------",
		"Ran 87 of 90 Specs in 0.559 seconds",
	}

	DescribeTable("collects skips with their reasons and keeps a passing run short",
		func(input string, wantOut []string, wantFailed bool) {
			var out bytes.Buffer
			s := newSummary(&out)
			Expect(s.read(strings.NewReader(input))).To(Succeed())
			s.report(&out)
			for _, w := range wantOut {
				Expect(out.String()).To(ContainSubstring(w))
			}
			Expect(s.failed).To(Equal(wantFailed))
		},
		Entry("a Ginkgo spec skipped in a passing package", stream("m/capture/proxy", ginkgoSkip, "pass"),
			[]string{"ok   m/capture/proxy  (Ran 87 of 90 Specs in 0.559 seconds)", "skipped: 1 specs and tests in 1 packages",
				"1  builds and starts processes; skipped with -short", "e.g. two proxy processes writing one rollout [It] leave an intact file [process]"}, false),
		Entry("a failing package prints its whole output", stream("m/p", []string{"boom: expected 1, got 2"}, "fail"),
			[]string{"boom: expected 1, got 2", "FAIL m/p", "skipped: nothing"}, true),
		Entry("a Go test skipped with t.Skip", `{"Action":"output","Package":"m/q","Test":"TestGPU","Output":"    gpu_test.go:12: set CAPBENCH_GPU=1\n"}
{"Action":"skip","Package":"m/q","Test":"TestGPU"}
{"Action":"pass","Package":"m/q"}
`, []string{"1  set CAPBENCH_GPU=1", "e.g. TestGPU"}, false),
	)

	It("does not echo a passing package's output", func() {
		var out bytes.Buffer
		s := newSummary(&out)
		Expect(s.read(strings.NewReader(stream("m/r", []string{"noisy detail"}, "pass")))).To(Succeed())
		Expect(out.String()).NotTo(ContainSubstring("noisy detail"))
	})
})
