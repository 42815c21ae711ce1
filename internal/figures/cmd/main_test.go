package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/figures"
)

var _ = Describe("figures command", func() {
	var readme string
	const text = "# p\n\n" + figures.BeginMarker + "\n\nold\n\n" + figures.EndMarker + "\n"

	BeforeEach(func() {
		readme = filepath.Join(GinkgoT().TempDir(), "README.md")
		Expect(os.WriteFile(readme, []byte(text), 0o644)).To(Succeed())
	})

	DescribeTable("refuses bad input with the flag's name, touching nothing",
		func(want string, args ...string) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), append([]string{"--readme", readme}, args...), &out, &errOut)
			Expect(err).To(MatchError(ContainSubstring(want)))
			b, _ := os.ReadFile(readme)
			Expect(string(b)).To(Equal(text))
		},
		Entry("an argument", `unexpected argument "stream"`, "stream"),
		Entry("a bad --rows", "--rows: error parsing regexp", "--rows", "("),
		Entry("no capbench binary", "--capbench /nonexistent/capbench: no such file or directory (run make build", "--capbench", "/nonexistent/capbench"),
		Entry("an unknown flag", "flag provided but not defined: -row", "-row", "x"),
	)

	It("a Go-benchmark-only selection does not need the capbench binary", func() {
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"--readme", readme, "--capbench", "/nonexistent", "--rows", "^stream-ttft$", "--go", "false", "--out", GinkgoT().TempDir()}, &out, &errOut)
		Expect(err).To(MatchError(And(ContainSubstring("row stream-ttft: run stream-ttft failed: false test ./capture/proxy"), Not(ContainSubstring("--capbench")))))
		By("--dry-run prints the command")
		Expect(run(context.Background(), []string{"--readme", readme, "--rows", "^stream-ttft$", "--dry-run"}, &out, &errOut)).To(Succeed())
		Expect(out.String()).To(Equal("stream-ttft: go test ./capture/proxy -run '^$' -bench StreamTTFT -benchtime 8x\n"))
	})

	It("--list names every row", func() {
		var out bytes.Buffer
		Expect(run(context.Background(), []string{"--list"}, &out, &out)).To(Succeed())
		Expect(out.String()).To(ContainSubstring("chaos-kill"))
		Expect(bytes.Count(out.Bytes(), []byte("\n"))).To(Equal(len(figures.Rows())))
	})

	It("--from re-renders saved outputs into the README", func() {
		var out, errOut bytes.Buffer
		Expect(run(context.Background(), []string{"--readme", readme, "--from", "../testdata/saved"}, &out, &errOut)).To(Succeed())
		b, _ := os.ReadFile(readme)
		Expect(string(b)).To(ContainSubstring("| what | command | figure |"))
		Expect(string(b)).To(ContainSubstring(out.String()))
	})
})
