package page_test

import (
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/doctor/page"
)

func walkthroughPage(name string) *page.Page {
	GinkgoHelper()
	p, err := page.Read(filepath.Join("..", "..", "testdata", "walkthrough", name))
	Expect(err).NotTo(HaveOccurred())
	return p
}

var _ = Describe("Parse", func() {
	It("finds first-run.mdx's blocks with their languages, names and lines", func() {
		p := walkthroughPage("first-run.mdx")
		Expect(p.Blocks).To(HaveLen(4))
		type got struct {
			Lang, Name string
			Line       int
		}
		var gs []got
		for _, b := range p.Blocks {
			gs = append(gs, got{b.Lang, b.Name, b.Line})
		}
		Expect(gs).To(Equal([]got{{"bash", "", 15}, {"yaml", "token_capture.yaml", 27}, {"bash", "", 42}, {"bash", "", 49}}))
		Expect(p.Blocks[1].Attrs).To(HaveKeyWithValue("title", "token_capture.yaml"))
		Expect(p.Blocks[1].Text).To(HavePrefix("token_id_capture:\n  enabled: true\n"))
	})

	It("keeps prose inside MDX components and skips front matter", func() {
		p := walkthroughPage("first-run.mdx")
		var note *page.Paragraph
		for i := range p.Prose {
			if p.Prose[i].Line == 36 {
				note = &p.Prose[i]
			}
			Expect(p.Prose[i].Text).NotTo(ContainSubstring("title:"))
		}
		Expect(note).NotTo(BeNil())
		Expect(note.Code).To(ContainElement("env.nemo_gym"))
	})

	DescribeTable("names a block from its info string or the prose before it",
		func(src, want string) {
			p := page.Parse("x.md", []byte(src))
			Expect(p.Blocks).To(HaveLen(1))
			Expect(p.Blocks[0].Name).To(Equal(want))
		},
		Entry("title attribute", "```yaml title=\"a.yaml\"\nx: 1\n```\n", "a.yaml"),
		Entry("filename attribute, single quotes", "```yaml filename='conf/b.yml'\nx: 1\n```\n", "conf/b.yml"),
		Entry("bare file name", "```yaml c.yaml\nx: 1\n```\n", "c.yaml"),
		Entry("prose just before", "Save this as `d.yaml`:\n\n```yaml\nx: 1\n```\n", "d.yaml"),
		Entry("no name", "Some text.\n\n```yaml\nx: 1\n```\n", ""),
	)

	It("does not let a JSX wrapper without blank lines swallow a block", func() {
		src := "<Tabs>\n<Tab title=\"Gym\">\n```bash\ngym env start --config a.yaml\n```\n</Tab>\n</Tabs>\n"
		p := page.Parse("x.mdx", []byte(src))
		Expect(p.Blocks).To(HaveLen(1))
		Expect(p.Blocks[0].Line).To(Equal(4))
		Expect(p.Blocks[0].Commands()[0].Is("gym", "env", "start")).To(BeTrue())
	})
})

var _ = Describe("Commands", func() {
	cmds := func(src string) []page.Command {
		p := page.Parse("x.md", []byte("```bash\n"+src+"```\n"))
		Expect(p.Blocks).To(HaveLen(1))
		return p.Blocks[0].Commands()
	}

	It("joins continuations and keeps each flag's line", func() {
		c := cmds("vllm serve Qwen/Qwen3-4B-Thinking-2507 \\\n  --port 8000 \\\n  --tool-call-parser hermes\n")
		Expect(c).To(HaveLen(1))
		Expect(c[0].Is("vllm", "serve")).To(BeTrue())
		v, lines := c[0].Flag("tool-call-parser")
		Expect(v).To(Equal([]string{"hermes"}))
		Expect(lines).To(Equal([]int{4}))
		Expect(c[0].Line).To(Equal(2))
	})

	DescribeTable("splits and unquotes like a shell",
		func(src string, want [][]string) {
			var got [][]string
			for _, c := range cmds(src) {
				got = append(got, c.Args)
			}
			Expect(got).To(Equal(want))
		},
		Entry("two lines", "gym env start --config a.yaml\ngym eval run --no-serve\n",
			[][]string{{"gym", "env", "start", "--config", "a.yaml"}, {"gym", "eval", "run", "--no-serve"}}),
		Entry("comments and prompts", "# start it\n$ vllm serve m  # the model\n", [][]string{{"vllm", "serve", "m"}}),
		Entry("quoted jq filter", "jq -c '{id: ._ng_rollout_id, n: ._ng_token_capture.n_calls}' rollouts.jsonl\n",
			[][]string{{"jq", "-c", "{id: ._ng_rollout_id, n: ._ng_token_capture.n_calls}", "rollouts.jsonl"}}),
		Entry("pipes and &&", "cat r.jsonl | jq .mask_sample && echo ok\n", [][]string{{"cat", "r.jsonl"}, {"jq", ".mask_sample"}, {"echo", "ok"}}),
		Entry("background", "vllm serve m &\n", [][]string{{"vllm", "serve", "m"}}),
		Entry("a quote spanning lines", "jq '{a:\n .b}' f\n", [][]string{{"jq", "{a:\n .b}", "f"}}),
		Entry("an unterminated quote keeps its text", "jq '.a\n", [][]string{{"jq", ".a"}}),
	)

	It("separates leading assignments and matches --snake_case flags", func() {
		c := cmds("CUDA_VISIBLE_DEVICES=0 vllm serve m --max_model_len=65536 --enable-auto-tool-choice\n")
		Expect(c[0].Env).To(HaveKeyWithValue("CUDA_VISIBLE_DEVICES", "0"))
		Expect(c[0].Args[0]).To(Equal("vllm"))
		v, _ := c[0].Flag("max-model-len")
		Expect(v).To(Equal([]string{"65536"}))
		Expect(c[0].Has("enable-auto-tool-choice")).To(BeTrue())
		Expect(c[0].Has("tool-call-parser")).To(BeFalse())
	})

	It("skips uv run and python -m prefixes", func() {
		Expect(cmds("uv run gym eval run --no-serve\n")[0].Is("gym", "eval", "run")).To(BeTrue())
		Expect(cmds("python -m vllm serve m\n")[0].Is("vllm", "serve")).To(BeTrue())
	})
})
