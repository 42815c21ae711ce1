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

	DescribeTable("resolves the call after an Edit at request time only when the echo is what the model wrote",
		func(ctx SpecContext, cliAddsDefault bool, want string) {
			sc, err := scenarios.Lookup("claude-code-edit-replace-all")
			Expect(err).NotTo(HaveOccurred())
			if !cliAddsDefault {
				// The control: the same Edit echoed verbatim. Its verdict
				// depends on the proxy keeping the model's key order, so
				// only the request-time resolution is checked here.
				sc.Plan.EchoInputDefaults = nil
			}
			res := session.Scenario(ctx, sc)
			if cliAddsDefault {
				Expect(res.Status).To(Equal(harness.StatusPass), "%v", res.Mismatches)
			}
			f, err := os.Open(filepath.Join(out, "capture", harness.RolloutID(sc.Name, 0)+".tokens.jsonl"))
			Expect(err).NotTo(HaveOccurred())
			defer f.Close()
			var resolutions []string
			sc2 := bufio.NewScanner(f)
			sc2.Buffer(make([]byte, 0, 1<<20), 64<<20)
			for sc2.Scan() {
				var e struct {
					Resolution string `json:"parent_resolution"`
					Reason     string `json:"parent_resolution_reason"`
				}
				Expect(json.Unmarshal(sc2.Bytes(), &e)).To(Succeed())
				resolutions = append(resolutions, e.Resolution+" "+e.Reason)
			}
			Expect(sc2.Err()).NotTo(HaveOccurred())
			Expect(resolutions).To(Equal([]string{"root ", want}))
		},
		Entry(`the CLI adds "replace_all":false: UNRESOLVED, no_match`, true, "unresolved no_match", SpecTimeout(30*time.Second)),
		Entry("echoed verbatim (control): resolved to the Edit call", false, "resolved ", SpecTimeout(30*time.Second)),
	)
})
