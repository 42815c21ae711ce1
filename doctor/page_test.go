package doctor_test

import (
	"fmt"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/doctor/page"
)

func walkthroughPath(name string) string { return filepath.Join("..", "testdata", "walkthrough", name) }

func checkPage(name, gpuFlag string) *doctor.Report {
	GinkgoHelper()
	p, err := page.Read(walkthroughPath(name))
	Expect(err).NotTo(HaveOccurred())
	rep, _, err := doctor.CheckPage(p, gpuFlag)
	Expect(err).NotTo(HaveOccurred())
	return rep
}

func errorsOf(r *doctor.Report) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Severity == doctor.Error {
			out = append(out, fmt.Sprintf("%s@%d", f.Rule, f.Line))
		}
	}
	return out
}

var _ = Describe("doctor page", func() {
	It("passes first-run.mdx", func() {
		rep := checkPage("first-run.mdx", "")
		Expect(errorsOf(rep)).To(BeEmpty(), "%+v", rep.Findings)
		Expect(rep.OK()).To(BeTrue())
	})

	It("reports first-run-broken.mdx's three mistakes with their lines", func() {
		rep := checkPage("first-run-broken.mdx", "")
		Expect(errorsOf(rep)).To(ConsistOf(
			"serve/tool-parser-alone@17",
			"serve/refuses-to-start@15",
			"page/overlay-not-given-to-collector@41",
		))
		for _, f := range rep.Findings {
			if f.Severity == doctor.Error {
				Expect(f.Cause).NotTo(BeEmpty(), f.Rule)
				Expect(f.Fix).NotTo(BeEmpty(), f.Rule)
				Expect(f.File).To(HaveSuffix("first-run-broken.mdx"))
			}
		}
	})

	It("warns when the jq check reads another file than gym eval run writes", func() {
		p := page.Parse("t.md", []byte(pageWith(overlayBlock("capture.yaml"), "gym env start --config capture.yaml\ngym eval run --no-serve --config capture.yaml --output r.jsonl\njq -c '{m: .mask_sample}' other.jsonl\n")))
		rep, _, err := doctor.CheckPage(p, "48GiB")
		Expect(err).NotTo(HaveOccurred())
		Expect(rep.OK()).To(BeTrue())
		Expect(rep.Rules(doctor.Warning)).To(ContainElement("page/jq-other-file"))
	})

	It("reads the GPU from the prose and lets --gpu override it", func() {
		rep := checkPage("first-run-broken.mdx", "H200")
		Expect(errorsOf(rep)).NotTo(ContainElement(HavePrefix("serve/refuses-to-start")))
	})

	DescribeTable("page-level rules",
		func(src string, wantRule string, wantLine int) {
			p := page.Parse("t.md", []byte(src))
			rep, _, err := doctor.CheckPage(p, "48GiB")
			Expect(err).NotTo(HaveOccurred())
			if wantRule == "" {
				Expect(errorsOf(rep)).To(BeEmpty(), "%+v", rep.Findings)
				return
			}
			Expect(errorsOf(rep)).To(ContainElement(fmt.Sprintf("%s@%d", wantRule, wantLine)), "%+v", rep.Findings)
		},
		Entry("overlay named but never shown: fails", pageWith("", "gym env start --config capture.yaml\ngym eval run --no-serve --config capture.yaml\n"), "page/overlay-not-shown", 8),
		Entry("overlay shown: passes", pageWith(overlayBlock("capture.yaml"), "gym env start --config capture.yaml\ngym eval run --no-serve --config capture.yaml\n"), "", 0),
		Entry("overlay only to the servers: fails", pageWith(overlayBlock("capture.yaml"), "gym env start --config capture.yaml\ngym eval run --no-serve\n"), "page/overlay-not-given-to-collector", 20),
		Entry("NeMo RL nesting given to gym: fails", pageWith(nestedBlock("capture.yaml"), "gym env start --config capture.yaml\ngym eval run --no-serve --config capture.yaml\n"), "config/nemo-rl-nesting", 10),
		Entry("jq on the rollouts file passes", pageWith(overlayBlock("capture.yaml"), "gym env start --config capture.yaml\ngym eval run --no-serve --config capture.yaml --output r.jsonl\njq -c '{m: .mask_sample}' r.jsonl\n"), "", 0),
		Entry("bad jq filter: fails", pageWith(overlayBlock("capture.yaml"), "gym env start --config capture.yaml\ngym eval run --no-serve --config capture.yaml\njq -c '{id: ._ng_rollout_id' rollouts.jsonl\n"), "page/jq-syntax", 21),
	)
})

// pageWith is a small page: a good vllm serve block, the given YAML block
// and a shell block with cmds.
func pageWith(yamlBlock, cmds string) string {
	return "# Run\n\n```bash\nvllm serve Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --tool-call-parser hermes --max-model-len 65536\n```\n\n" +
		yamlBlock + "```bash\n" + cmds + "```\n"
}

func overlayBlock(name string) string {
	return "Save as `" + name + "`:\n\n```yaml\ntoken_id_capture:\n  enabled: true\n  dir: /tmp/cap\nresponses_api_agents:\n  claude_code_agent:\n    token_id_capture: true\n```\n\n"
}

func nestedBlock(name string) string {
	return "```yaml title=\"" + name + "\"\nenv:\n  nemo_gym:\n    token_id_capture:\n      enabled: true\n      dir: /tmp/cap\n```\n\n"
}

var _ = Describe("doctor page on another layout", func() {
	It("passes a page with tabs, a console prompt, snake_case flags and a NeMo RL block shown for reference", func() {
		rep := checkPage("tabs-nemo-rl.mdx", "")
		Expect(errorsOf(rep)).To(BeEmpty(), "%+v", rep.Findings)
		p, err := page.Read(walkthroughPath("tabs-nemo-rl.mdx"))
		Expect(err).NotTo(HaveOccurred())
		_, st, err := doctor.CheckPage(p, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(st.GPULabel).To(Equal("L40S (44.52 GiB, line 7)"))
		Expect(st.Serve.MaxModelLen).To(Equal("64K"))
		Expect(st.Serve.ToolCallParser).To(Equal("hermes"))
		Expect(st.Overlays).To(HaveKey("token_capture.yaml"))
		Expect(st.Overlays).To(HaveKey("grpo_claude_code.yaml"))
		Expect(st.Overlays["grpo_claude_code.yaml"].Overlay.Nested).To(BeTrue())
		Expect(st.JQ).To(HaveLen(1))
		Expect(st.JQ[0].File).To(Equal("out/rollouts.jsonl"))
		Expect(st.Outcome.Equal).To(Equal(map[string]any{"n_calls": 1.0, "chains": 1.0}))
		Expect(st.Outcome.Absent).To(Equal([]string{"mask"}))
	})
})
