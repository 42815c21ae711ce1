package figures_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/figures"
)

func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// script writes an executable shell script and returns its path.
func script(body string) string {
	p := filepath.Join(GinkgoT().TempDir(), "capbench")
	Expect(os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755)).To(Succeed())
	return p
}

var _ = Describe("Exec", func() {
	ctx := context.Background()
	root, _ := filepath.Abs("../..")

	It("runs one real tiny benchmark end to end into a copy of the README", func() {
		readme, err := os.ReadFile("../../README.md")
		Expect(err).NotTo(HaveOccurred())
		ex := figures.Exec{Root: root, Go: goTool(), Timeout: time.Minute}
		cfg, out, _ := setup(string(readme), ex)
		rows := []figures.Row{{Name: "tiny", What: "a tiny benchmark", Figure: `{{.Med "Tiny" "answers/op" | f 0}} answers`,
			Runs: []figures.Run{{Kind: figures.GoTest, Args: []string{"test", "./internal/figures/testdata/tinybench", "-run", "^$", "-bench", "Tiny", "-benchtime", "1x"}}}}}
		Expect(figures.Generate(ctx, cfg, rows)).To(Succeed())
		row := "| a tiny benchmark | `go test ./internal/figures/testdata/tinybench -run '^$' -bench Tiny -benchtime 1x` | 42 answers |\n"
		Expect(out.String()).To(HaveSuffix(row))
		got := read(cfg.README)
		Expect(got).To(ContainSubstring(figures.BeginMarker + "\n\n| what | command | figure |\n|---|---|---|\n" + row + "\n" + figures.EndMarker))
		before, _, _ := strings.Cut(string(readme), figures.BeginMarker)
		Expect(got).To(HavePrefix(before))
		By("the raw output is kept for a reader")
		Expect(read(filepath.Join(cfg.OutDir, "tiny", "stdout.txt"))).To(ContainSubstring("BenchmarkTiny"))
		Expect(read(filepath.Join(cfg.OutDir, "tiny", "command.txt"))).To(ContainSubstring("-bench Tiny"))
	})

	It("runs capbench bench in a fresh folder with --progress off and an absolute --out", func() {
		result, err := filepath.Abs(filepath.Join(saved, "bench-sessions", "out"))
		Expect(err).NotTo(HaveOccurred())
		bin := script(`echo "$PWD" > "$LOG.pwd"; echo "$@" > "$LOG.args"
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
mkdir -p "$out" && cp ` + result + `/* "$out"/
`)
		log := filepath.Join(GinkgoT().TempDir(), "log")
		GinkgoT().Setenv("LOG", log)
		ex := figures.Exec{Root: root, Capbench: bin}
		cfg, out, _ := setup(readmeText, ex)
		cfg.OutDir = "relative-out" // made absolute: the run stands elsewhere
		DeferCleanup(os.RemoveAll, "relative-out")
		rows := []figures.Row{{Name: "s", What: "w", Figure: `{{.Sessions.Calls}} calls`,
			Runs: []figures.Run{{Kind: figures.CapbenchBench, Args: []string{"bench", "--workload", "sessions"}}}}}
		Expect(figures.Generate(ctx, cfg, rows)).To(Succeed())
		Expect(out.String()).To(ContainSubstring("| w | `capbench bench --workload sessions` | 38 calls |"))
		abs, _ := filepath.Abs("relative-out")
		Expect(read(log + ".args")).To(Equal("bench --workload sessions --progress off --out " + filepath.Join(abs, "s", "out") + "\n"))
		pwd := strings.TrimSpace(read(log + ".pwd"))
		Expect(pwd).NotTo(Equal(root))
		Expect(pwd).NotTo(BeADirectory(), "the run's temp folder is removed")
	})

	It("a failing command: its exit status and last output in the error, README unchanged", func() {
		bin := script("echo 'chaos: kill-9 …'; echo 'proxy would not start' >&2; exit 3\n")
		cfg, _, _ := setup(readmeText, figures.Exec{Root: root, Capbench: bin})
		rows := []figures.Row{{Name: "c", What: "w", Figure: "x", Runs: []figures.Run{{Kind: figures.CapbenchChaos, Args: []string{"chaos"}}}}}
		err := figures.Generate(ctx, cfg, rows)
		Expect(err).To(MatchError(And(ContainSubstring("row c: run c failed"), ContainSubstring("chaos --json: exit status 3"),
			ContainSubstring("proxy would not start"), ContainSubstring("unchanged"))))
		Expect(read(cfg.README)).To(Equal(readmeText))
	})

	It("a run past --timeout is stopped with its children, and fails", func() {
		pidFile := filepath.Join(GinkgoT().TempDir(), "pid")
		// A child of the child, as go test runs the benchmark binary.
		bin := script("sleep 30 &\necho $! > " + pidFile + "\nwait\n")
		cfg, _, _ := setup(readmeText, figures.Exec{Root: root, Capbench: bin, Timeout: 300 * time.Millisecond})
		rows := []figures.Row{{Name: "c", What: "w", Figure: "x", Runs: []figures.Run{{Kind: figures.CapbenchChaos, Args: []string{"chaos"}}}}}
		Expect(figures.Generate(ctx, cfg, rows)).To(MatchError(ContainSubstring("context deadline exceeded (after 300ms)")))
		Expect(read(cfg.README)).To(Equal(readmeText))
		pid, err := strconv.Atoi(strings.TrimSpace(read(pidFile)))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error { return syscall.Kill(pid, 0) }).WithTimeout(5 * time.Second).Should(MatchError(syscall.ESRCH))
	})
})
