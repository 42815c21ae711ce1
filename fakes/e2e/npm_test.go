package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
)

var _ = Describe("wire compatibility with the official openai npm client", Label("npm", "e2e"), func() {
	It("parses chat, streaming, tools, logprobs and errors from the fake", func(sctx SpecContext) {
		skipInShortMode()
		dir := filepath.Join(repoRoot(), "fakes", "vllm", "testdata", "npm")
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
			unavailable("node_modules missing; run `npm ci` in " + dir)
		}
		node, err := exec.LookPath("node")
		if err != nil {
			unavailable("node is not installed")
		}

		s, err := vllm.New(vllm.Options{EnableAutoToolChoice: true, ToolCallParser: "hermes"})
		Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		Expect(s.Start(ctx)).To(Succeed())
		DeferCleanup(s.Close)
		Expect(s.SetScript(vllm.Script{Name: "tool", Turns: []vllm.Turn{{
			ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}},
		}}})).To(Succeed())

		cmd := exec.CommandContext(sctx, node, "wire.mjs", s.URL()+"/v1")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(string(out)).To(ContainSubstring(`{"ok":true`))
		Expect(s.Ledger()).To(HaveLen(6)) // every generation the script made, errors excluded
	}, SpecTimeout(2*time.Minute))
})
