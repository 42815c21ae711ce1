package claudecode_test

import (
	"context"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness/claudecode"
)

var _ = Describe("resolving the opt-in CLI", func() {
	var npmDir string
	BeforeEach(func() { npmDir = GinkgoT().TempDir() })

	DescribeTable("a setting that does not name an executable is refused with the reason",
		func(setting string, want error, mention string) {
			got, err := claudecode.Executable(setting, npmDir)
			Expect(err).To(MatchError(want))
			Expect(got).To(BeEmpty())
			Expect(err.Error()).To(ContainSubstring(mention))
		},
		Entry("unset", "", claudecode.ErrNotEnabled, claudecode.SettingEnv),
		Entry("off", "0", claudecode.ErrNotEnabled, claudecode.SettingEnv),
		Entry("1 without an npm install", "1", claudecode.ErrNotInstalled, "npm install"),
		Entry("a missing path", "/nonexistent/claude", claudecode.ErrNotInstalled, "/nonexistent/claude"),
	)

	It("refuses a directory and a file that is not executable", func() {
		_, err := claudecode.Executable(npmDir, npmDir)
		Expect(err).To(MatchError(claudecode.ErrNotInstalled))
		plain := filepath.Join(npmDir, "claude")
		Expect(os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644)).To(Succeed())
		_, err = claudecode.Executable(plain, npmDir)
		Expect(err).To(MatchError(claudecode.ErrNotInstalled))
	})

	It("finds node_modules/.bin/claude for 1 and takes an explicit path as is", func() {
		bin := filepath.Join(npmDir, "node_modules", ".bin")
		Expect(os.MkdirAll(bin, 0o755)).To(Succeed())
		exe := filepath.Join(bin, "claude")
		Expect(os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)).To(Succeed())
		Expect(claudecode.Executable("1", npmDir)).To(Equal(exe))
		Expect(claudecode.Executable(" "+exe+" ", "elsewhere")).To(Equal(exe))
	})
})

var _ = Describe("the run's environment", func() {
	It("points the CLI at the base URL only, with a fresh home and the traffic switches", func() {
		GinkgoT().Setenv("ANTHROPIC_BASE_URL", "https://api.example.invalid")
		GinkgoT().Setenv("ANTHROPIC_AUTH_TOKEN", "secret")
		GinkgoT().Setenv("HOME", "/somewhere/else")
		c := claudecode.Config{Executable: "/bin/true", BaseURL: "http://127.0.0.1:1/ng-rollout/r/training-token-capture",
			Home: "/tmp/h", Dir: "/tmp/w",
			Headers: map[string]string{"X-Fake-Script": "hi", "X-A": "b"}, Env: []string{"MAX_THINKING_TOKENS=0"}}
		env := c.Environ()
		Expect(env).To(ContainElements(
			"HOME=/tmp/h",
			"ANTHROPIC_BASE_URL=http://127.0.0.1:1/ng-rollout/r/training-token-capture",
			"ANTHROPIC_API_KEY=dummy",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1",
			"ANTHROPIC_CUSTOM_HEADERS=X-A: b\nX-Fake-Script: hi",
			"MAX_THINKING_TOKENS=0",
		))
		for _, kv := range env {
			Expect(kv).NotTo(HavePrefix("ANTHROPIC_AUTH_TOKEN="))
			Expect(kv).NotTo(Equal("HOME=/somewhere/else"))
			Expect(kv).NotTo(Equal("ANTHROPIC_BASE_URL=https://api.example.invalid"))
		}
		cmd := c.Command(context.Background(), "say hi", "--allowedTools", "Bash")
		Expect(cmd.Args[1:]).To(Equal([]string{"-p", "say hi", "--output-format", "json", "--allowedTools", "Bash"}))
		Expect(cmd.Dir).To(Equal("/tmp/w"))
	})
})

var _ = Describe("reading the JSON result", func() {
	It("takes the last result object on stdout", func() {
		r, err := claudecode.ParseResult([]byte("noise\n{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"hi\",\"num_turns\":1}\n"))
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Result).To(Equal("hi"))
		Expect(r.Subtype).To(Equal("success"))
		Expect(r.NumTurns).To(Equal(1))
	})
	DescribeTable("refuses stdout without a result object",
		func(stdout string) {
			r, err := claudecode.ParseResult([]byte(stdout))
			Expect(err).To(MatchError(claudecode.ErrNoResult))
			Expect(r).To(BeNil())
		},
		Entry("empty", ""),
		Entry("text only", "Error: something\n"),
		Entry("cut JSON", `{"type":"result","result":"h`),
		Entry("another object", `{"type":"system"}`),
	)
})
