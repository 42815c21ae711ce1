package harness_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
)

var _ = Describe("what the real CLI does, as catalog scenarios", Label("fake", "cli"), func() {
	var (
		session *harness.Session
		out     string
	)
	BeforeEach(func() {
		out = GinkgoT().TempDir()
		var err error
		session, err = harness.NewSession(harness.Options{Backend: env.InProcess, OutDir: out})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(session.Close)
	})

	It("fails a scenario whose explain line is not what `capbench explain` prints, and shows what it printed", func(ctx SpecContext) {
		sc, err := scenarios.Lookup("claude-code-cut-stream-first-call")
		Expect(err).NotTo(HaveOccurred())
		Expect(sc.Expect.Explain).NotTo(BeEmpty())
		sc.Expect.Explain = "a cause nobody prints"
		res := session.Scenario(ctx, sc)
		Expect(res.Status).To(Equal(harness.StatusFail))
		Expect(res.Mismatches).To(ContainElement(And(
			HavePrefix(`explain: want a line with "a cause nobody prints", got:`),
			ContainSubstring("the capture has 2 roots, not 1"))))
	}, SpecTimeout(30*time.Second))

	It(`records the call after the CLI's Edit echo ({"replace_all":false, ...input}) as UNRESOLVED with reason no_match`, func(ctx SpecContext) {
		sc, err := scenarios.Lookup("claude-code-edit-replace-all")
		Expect(err).NotTo(HaveOccurred())
		res := session.Scenario(ctx, sc)
		Expect(res.Status).To(Equal(harness.StatusPass), "%v", res.Mismatches)
		// Masked rollouts keep their capture file.
		f, err := os.Open(filepath.Join(out, "capture", harness.RolloutID(sc.Name, 0)+".tokens.jsonl"))
		Expect(err).NotTo(HaveOccurred())
		defer f.Close()
		var resolutions []string
		lines := bufio.NewScanner(f)
		lines.Buffer(make([]byte, 0, 1<<20), 64<<20)
		for lines.Scan() {
			var e struct {
				Resolution string `json:"parent_resolution"`
				Reason     string `json:"parent_resolution_reason"`
			}
			Expect(json.Unmarshal(lines.Bytes(), &e)).To(Succeed())
			resolutions = append(resolutions, e.Resolution+" "+e.Reason)
		}
		Expect(lines.Err()).NotTo(HaveOccurred())
		Expect(resolutions).To(Equal([]string{"root ", "unresolved no_match"}))
	}, SpecTimeout(30*time.Second))

	It("resolves the same Edit echoed verbatim at request time (the control)", func(ctx SpecContext) {
		sc, err := scenarios.Lookup("claude-code-edit-replace-all")
		Expect(err).NotTo(HaveOccurred())
		sc.Plan.EchoInputDefaults = nil
		res := session.Scenario(ctx, sc)
		// Whether the chain is then clean depends on the proxy keeping the
		// model's key order; the request-time link holds either way.
		Expect(res.Got.Metrics).To(HaveKey("parent_link_failures"))
		Expect(res.Got.Metrics["parent_link_failures"]).NotTo(HaveKey("parent_unresolved"))
		Expect(res.Got.Metrics["n_calls"]).To(BeNumerically("==", 2))
	}, SpecTimeout(30*time.Second))
})
