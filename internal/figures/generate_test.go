package figures_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/figures"
)

// fakeRunner copies a run's saved outputs instead of running it.
type fakeRunner struct {
	src   string
	fail  map[string]error
	calls []string
}

func (f *fakeRunner) Run(_ context.Context, run figures.Run, dir string) error {
	f.calls = append(f.calls, run.ID)
	if err := f.fail[run.ID]; err != nil {
		return err
	}
	from := filepath.Join(f.src, run.ID)
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
}

const readmeText = "# project\n\nintro\n\n## Measured figures\n\nprose stays\n\n" + figures.BeginMarker +
	"\n\n| what | command | figure |\n|---|---|---|\n| old | `old` | old |\n\n" + figures.EndMarker + "\n\n## After\n\ntail stays\n"

// setup writes a README into a temp dir and returns a config over it.
func setup(text string, runner figures.Runner) (figures.Config, *bytes.Buffer, *bytes.Buffer) {
	dir := GinkgoT().TempDir()
	readme := filepath.Join(dir, "README.md")
	Expect(os.WriteFile(readme, []byte(text), 0o644)).To(Succeed())
	var out, errOut bytes.Buffer
	return figures.Config{README: readme, OutDir: filepath.Join(dir, "out"), Runner: runner, Stdout: &out, Stderr: &errOut}, &out, &errOut
}

func read(p string) string {
	b, err := os.ReadFile(p)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

func goRow(name, bench, figure string) figures.Row {
	return figures.Row{Name: name, What: name + " what", Figure: figure,
		Runs: []figures.Run{{ID: name, Kind: figures.GoTest, Args: []string{"test", "./x", "-run", "^$", "-bench", bench}}}}
}

var _ = Describe("Generate", func() {
	ctx := context.Background()

	It("renders every real row from real outputs, rewrites only the marked region, and is idempotent", func() {
		fr := &fakeRunner{src: saved}
		cfg, out, _ := setup(readmeText, fr)
		Expect(figures.Generate(ctx, cfg, figures.Rows())).To(Succeed())
		got := read(cfg.README)
		Expect(got).To(HavePrefix("# project\n\nintro\n\n## Measured figures\n\nprose stays\n\n" + figures.BeginMarker + "\n\n| what | command | figure |\n"))
		Expect(got).To(HaveSuffix("\n\n" + figures.EndMarker + "\n\n## After\n\ntail stays\n"))
		Expect(got).NotTo(ContainSubstring("| old |"))
		Expect(got).To(ContainSubstring("| time to first token, 250-token stream, fake at 20 ms TTFT + 2 ms/token, concurrency 1 | `go test ./capture/proxy -run '^$' -bench StreamTTFT -benchtime 8x` | direct 20.98 ms; through the proxy 21.64 ms (+0.67 ms); over the file store 21.63 ms (+0.66 ms: the call intent is synced while the engine works on the first token); `--buffered-streams` (NeMo Gym's behaviour) 520.9 ms |\n"))
		Expect(got).To(ContainSubstring("| `make chaos` | 3,098 acknowledged calls, 3,098 stored, 0 lost, 0 corrupt; peak RSS 29.3 MiB |\n"))
		Expect(got).To(ContainSubstring("| 0.75–0.86× the trivial server (median 0.78×)"))
		Expect(got).To(ContainSubstring("TTFT through capture 6.6 ms vs 5.5 ms direct (+1.11 ms per pair); E2EL ratio 1.018 [1.013, 1.021]; 40/40 captured, 40/40 exact against the ledger |"))
		Expect(got).To(ContainSubstring("| scheduled arrivals identical; TTFT p50 21.2 vs 20.9 ms, E2EL p50 50.2 vs 49.3 ms, 85.00 vs 84.67 req/s; shard start lag 0.19–2.01 ms |"))
		Expect(strings.Count(got, "\n| ")).To(Equal(len(figures.Rows()) + 1))
		Expect(out.String()).To(HavePrefix("| what | command | figure |\n"))
		Expect(got).To(ContainSubstring(out.String()))

		By("the three chaos rows share one run")
		Expect(fr.calls).To(HaveLen(26))
		Expect(fr.calls).To(ContainElement("chaos"))

		By("a second run over the same outputs gives the same bytes")
		first := got
		Expect(figures.Generate(ctx, cfg, figures.Rows())).To(Succeed())
		Expect(read(cfg.README)).To(Equal(first))
	})

	DescribeTable("rows whose peer runs only when given (NeMo Gym: CAPBENCH_GYM_DIR; llm-d-inference-sim: CAPBENCH_SIM_BIN) say which way they ran",
		func(src, row, want string) {
			cfg, out, _ := setup(readmeText, &fakeRunner{src: src})
			cfg.Rows = regexp.MustCompile("^" + row + "$")
			Expect(figures.Generate(ctx, cfg, figures.Rows())).To(Succeed())
			Expect(out.String()).To(ContainSubstring(want))
		},
		Entry("consumer, Gym run", "testdata/saved-gym", "consume-cold", "40 ms CPU per rollout (42 ms wall). NeMo Gym's `trajectories_for_rollout` in the same run: 494 ms in Python, 11.7× our time |"),
		Entry("consumer, no Gym", saved, "consume-cold", "41 ms CPU per rollout (50 ms wall). Peer not rerun here (`CAPBENCH_GYM_DIR` not set, docs/gym-peer.md)"),
		Entry("verdict process, Gym run", "testdata/saved-gym", "verdict-process", "28 ms wall per process (25 ms CPU in-process); NeMo Gym as a process on the same rollout, same run: 1189 ms, 42.4× our process; peak RSS 25.6 MiB (1.30× the file)"),
		Entry("verdict process, no Gym", saved, "verdict-process", "30 ms wall per process (23 ms CPU in-process); Gym peer not rerun here (`CAPBENCH_GYM_DIR` not set); peak RSS 26.5 MiB (1.35× the file)"),
		Entry("store, Gym run", "testdata/saved-gym", "store-put", "NeMo Gym's `TokenCaptureStore` on the same records, alternating rounds: 1.3k puts/s vs our 11.8k (Gym's time 11.2× ours; with `begin_call` before each put 10.6×) |"),
		Entry("store, no Gym", saved, "store-put", "NeMo Gym's store not rerun here (`CAPBENCH_GYM_DIR` not set"),
		Entry("fake vs llm-d-inference-sim, sim run", saved, "llm-d-sim", "| non-streaming 47.4k vs 24.3k req/s (2.0×); streaming 461k vs 98k tok/s (4.7×) |"),
		Entry("fake vs llm-d-inference-sim, no sim", "testdata/saved-nosim", "llm-d-sim", "| the fake alone: 41.3k req/s non-streaming, 425k tok/s streaming; the peer not rerun here (`CAPBENCH_SIM_BIN` not set, docs/inference-sim-peer.md; an earlier run: 1.8× and 2.6×) |"),
	)

	It("--from: renders from the outputs a run left, running nothing", func() {
		cfg, out, errOut := setup(readmeText, figures.Saved{Dir: saved})
		cfg.OutDir = saved
		Expect(figures.Generate(ctx, cfg, figures.Rows())).To(Succeed())
		Expect(out.String()).To(ContainSubstring("2 sessions, 38 calls, prompts up to 34,087 tokens, 0 masked, 38/38 calls exact"))
		Expect(errOut.String()).To(ContainSubstring("reading stream-ttft"))
	})

	DescribeTable("a failure fails the whole regeneration, names the row and leaves README unchanged",
		func(rows []figures.Row, fail map[string]error, want ...string) {
			fr := &fakeRunner{src: saved, fail: fail}
			cfg, out, _ := setup(readmeText, fr)
			err := figures.Generate(ctx, cfg, rows)
			Expect(err).To(HaveOccurred())
			for _, w := range want {
				Expect(err.Error()).To(ContainSubstring(w))
			}
			Expect(err.Error()).To(ContainSubstring(cfg.README + " is unchanged"))
			Expect(read(cfg.README)).To(Equal(readmeText))
			Expect(out.String()).To(BeEmpty())
		},
		Entry("a command that fails", figures.Rows(),
			map[string]error{"long-rollout": errors.New("exit status 1")},
			"row long-rollout: run long-rollout failed: exit status 1"),
		Entry("a shared run that fails names every row using it", figures.Rows(),
			map[string]error{"chaos": errors.New("exit status 2")},
			"row chaos-kill:", "row chaos-idle-conns:", "row chaos-watch:"),
		Entry("a benchmark the output no longer has",
			[]figures.Row{goRow("long-rollout", "LongRollout", `{{.Med "LongRollout/nats" "added/direct@200" | f 1}}`)}, nil,
			"row long-rollout", `no benchmark "LongRollout/nats"`, "LongRollout/file, LongRollout/file-delta, LongRollout/memory, LongRollout/messages"),
		Entry("a run with no benchmark lines (skipped or renamed)",
			[]figures.Row{{Name: "chaos", What: "w", Figure: "x", Runs: []figures.Run{{Kind: figures.GoTest, Args: []string{"test"}}}}}, nil,
			"row chaos", "no benchmark result lines"),
		Entry("a capbench row whose result lacks what the figure reads",
			[]figures.Row{{Name: "bench-sessions", What: "w", Figure: `{{.Overhead.Pairs}}`, Runs: []figures.Run{{Kind: figures.CapbenchBench, Args: []string{"bench"}}}}}, nil,
			"row bench-sessions", "no paired overhead"),
		Entry("a chaos scenario that is not there",
			[]figures.Row{{Name: "chaos", What: "w", Figure: `{{(.Scenario "teleport").Lost}}`, Runs: []figures.Run{{Kind: figures.CapbenchChaos, Args: []string{"chaos"}}}}}, nil,
			"row chaos", `no scenario starting "teleport"`, `"kill -9 ×3"`),
	)

	DescribeTable("markers: a clear error naming the file and the markers, before anything runs",
		func(text string, want string) {
			fr := &fakeRunner{src: saved}
			cfg, _, _ := setup(text, fr)
			err := figures.Generate(ctx, cfg, figures.Rows())
			Expect(err).To(MatchError(And(ContainSubstring(cfg.README), ContainSubstring(want), ContainSubstring(figures.EndMarker))))
			Expect(fr.calls).To(BeEmpty())
			Expect(read(cfg.README)).To(Equal(text))
		},
		Entry("none", "# project\n\n| what | command | figure |\n", "has no figures markers"),
		Entry("no end", "# p\n"+figures.BeginMarker+"\n\n| t |\n", "no \"<!-- figures:end -->\""),
		Entry("no begin", "# p\n\n| t |\n"+figures.EndMarker+"\n", "no begin marker"),
		Entry("end before begin", "# p\n"+figures.EndMarker+"\n"+figures.BeginMarker+"\n", "before its begin marker"),
		Entry("two pairs", readmeText+readmeText, "more than one pair"),
		Entry("on one line", "# p\n"+figures.BeginMarker+" "+figures.EndMarker+"\n", "lines of their own"),
	)

	It("--rows: renders only the selected rows, in table order, and leaves README alone", func() {
		fr := &fakeRunner{src: saved}
		cfg, out, errOut := setup(readmeText, fr)
		cfg.Rows = regexp.MustCompile(`^(bench-sessions|stream-ttft)$`)
		Expect(figures.Generate(ctx, cfg, figures.Rows())).To(Succeed())
		Expect(fr.calls).To(Equal([]string{"stream-ttft", "bench-sessions"}))
		Expect(strings.Count(out.String(), "\n")).To(Equal(4))
		Expect(read(cfg.README)).To(Equal(readmeText))
		Expect(errOut.String()).To(ContainSubstring("not written: --rows"))
	})

	It("--skip: leaves rows out, and README alone", func() {
		fr := &fakeRunner{src: saved}
		cfg, out, _ := setup(readmeText, fr)
		cfg.Skip = regexp.MustCompile(`^chaos|^bench-|^shards$`)
		Expect(figures.Generate(ctx, cfg, figures.Rows())).To(Succeed())
		for _, id := range []string{"chaos", "shards", "bench-sessions", "bench-overhead"} {
			Expect(fr.calls).NotTo(ContainElement(id))
		}
		Expect(fr.calls).To(ContainElement("stream-ttft"))
		Expect(out.String()).NotTo(ContainSubstring("make chaos"))
		Expect(read(cfg.README)).To(Equal(readmeText))
	})

	It("--rows matching nothing is an error that lists the rows", func() {
		cfg, _, _ := setup(readmeText, &fakeRunner{src: saved})
		cfg.Rows = regexp.MustCompile(`^nope$`)
		Expect(figures.Generate(ctx, cfg, figures.Rows())).To(MatchError(And(ContainSubstring("--rows ^nope$ leaves no row"), ContainSubstring("stream-ttft"))))
	})

	It("--dry-run prints each run once and runs nothing", func() {
		fr := &fakeRunner{src: saved}
		cfg, out, _ := setup(readmeText, fr)
		cfg.DryRun = true
		cfg.Show = figures.Exec{Go: "go", Capbench: "/bin/capbench"}.Show
		Expect(figures.Generate(ctx, cfg, figures.Rows())).To(Succeed())
		Expect(fr.calls).To(BeEmpty())
		Expect(out.String()).To(ContainSubstring("stream-ttft: go test ./capture/proxy -run '^$' -bench StreamTTFT -benchtime 8x\n"))
		Expect(out.String()).To(ContainSubstring("bench-sessions: /bin/capbench bench --workload sessions --sessions 8 --concurrency 4 --progress off --out " + filepath.Join(cfg.OutDir, "bench-sessions", "out") + "\n"))
		Expect(strings.Count(out.String(), "chaos: ")).To(Equal(1))
		Expect(read(cfg.README)).To(Equal(readmeText))
	})

	DescribeTable("bad row declarations are refused before anything runs",
		func(rows []figures.Row, want string) {
			fr := &fakeRunner{src: saved}
			cfg, _, _ := setup(readmeText, fr)
			Expect(figures.Generate(ctx, cfg, rows)).To(MatchError(ContainSubstring(want)))
			Expect(fr.calls).To(BeEmpty())
		},
		Entry("a static row without a command text", []figures.Row{{Name: "a", What: "w", Static: "not rerun"}}, "row a: a static row needs a Command text"),
		Entry("neither runs nor static", []figures.Row{{Name: "a", What: "w"}}, "neither Runs nor Static"),
		Entry("both", []figures.Row{{Name: "a", What: "w", Static: "s", Figure: "f", Runs: []figures.Run{{Kind: figures.GoTest}}}}, "both Runs and Static"),
		Entry("a template that does not parse", []figures.Row{goRow("a", "A", "{{.Med")}, "row a: template"),
		Entry("two rows of one name", []figures.Row{goRow("a", "A", "x"), goRow("a", "A", "x")}, "two rows are named a"),
		Entry("one run ID, two commands", []figures.Row{goRow("a", "A", "x"), {Name: "b", What: "w", Figure: "x", Runs: []figures.Run{{ID: "a", Kind: figures.GoTest, Args: []string{"test", "./y"}}}}}, "run a is declared with two commands"),
		Entry("a bad name", []figures.Row{goRow("A b", "A", "x")}, `row name "A b"`),
	)

	It("the repository's README has the markers and every real row is valid", func() {
		b, err := os.ReadFile("../../README.md")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Count(string(b), figures.BeginMarker)).To(Equal(1))
		Expect(strings.Count(string(b), figures.EndMarker)).To(Equal(1))
		cfg, _, _ := setup(readmeText, &fakeRunner{src: saved})
		cfg.DryRun = true
		Expect(figures.Generate(ctx, cfg, figures.Rows())).To(Succeed())
	})
})
