package walkthrough_test

import (
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/walkthrough"
)

func pagePath(name string) string { return filepath.Join("..", "testdata", "walkthrough", name) }

func dump(r *walkthrough.Result) string {
	s := ""
	for _, st := range r.Steps {
		s += fmt.Sprintf("step %-5s %s (line %d): %s\n", st.Status, st.Name, st.Line, st.Detail)
	}
	for _, m := range r.Mistakes {
		s += fmt.Sprintf("mistake %-5s %s [on page %t]: %s\n", m.Status, m.Name, m.OnPage, m.Detail)
	}
	return s
}

var _ = Describe("walkthrough", Label("inprocess"), func() {
	It("passes first-run.mdx with every mistake's symptom seen", func(ctx SpecContext) {
		r, err := walkthrough.Run(ctx, walkthrough.Options{Page: pagePath("first-run.mdx"), WorkDir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Print(dump(r))
		Expect(r.BrokenSteps()).To(BeEmpty(), dump(r))
		Expect(r.UndetectedMistakes()).To(BeEmpty(), dump(r))
		Expect(r.Mistakes).To(HaveLen(5))
		Expect(r.OK()).To(BeTrue())
	}, SpecTimeout(2*time.Minute))

	It("passes a page laid out with tabs, console prompts and a NeMo RL block", func(ctx SpecContext) {
		r, err := walkthrough.Run(ctx, walkthrough.Options{Page: pagePath("tabs-nemo-rl.mdx"), WorkDir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.GPU).To(HavePrefix("L40S"))
		Expect(r.OK()).To(BeTrue(), dump(r))
	}, SpecTimeout(2*time.Minute))

	It("fails first-run-broken.mdx naming each broken step", func(ctx SpecContext) {
		r, err := walkthrough.Run(ctx, walkthrough.Options{Page: pagePath("first-run-broken.mdx"), WorkDir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Print(dump(r))
		Expect(r.OK()).To(BeFalse())
		Expect(r.BrokenSteps()).To(ContainElements("Serve the policy (vllm serve)", "Tool calling (a Bash tool round trip)", "Collect rollouts (gym eval run)"), dump(r))
		Expect(r.UndetectedMistakes()).To(BeEmpty(), dump(r))
	}, SpecTimeout(2*time.Minute))
})
