package figures_test

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/internal/figures"
)

var _ = Describe("shards runs", func() {
	load := func() figures.Data {
		single, err := bench.ReadResult(filepath.Join(saved, "shards", "single", "result.json"))
		Expect(err).NotTo(HaveOccurred())
		merged, err := bench.ReadResult(filepath.Join(saved, "shards", "out", "result.json"))
		Expect(err).NotTo(HaveOccurred())
		return figures.Data{Single: single, Result: merged}
	}

	It("compares the merged schedule with the single process's, request by request", func() {
		d := load()
		Expect(d.SameSchedule()).To(BeTrue())
		Expect(d.StartLagSpan(2)).To(Equal("0.19–2.01"))
		By("one request scheduled a nanosecond later is a different schedule")
		d.Result.Samples[3].ScheduledNS++
		Expect(d.SameSchedule()).To(BeFalse())
		By("no samples at all is not the same schedule")
		Expect(figures.Data{Single: &bench.Result{}, Result: &bench.Result{}}.SameSchedule()).To(BeFalse())
	})

	It("a fake that exits fails at once with its output, README unchanged", func(ctx SpecContext) {
		bin := script(`[ "$1" = fake-vllm ] && { echo "port in use" >&2; exit 1; }; exit 0` + "\n")
		cfg, _, _ := setup(readmeText, figures.Exec{Root: ".", Capbench: bin})
		rows := []figures.Row{{Name: "sh", What: "w", Figure: "x", Runs: []figures.Run{{Kind: figures.CapbenchShards, Shards: 3, Args: []string{"--requests", "6"}}}}}
		err := figures.Generate(context.WithoutCancel(ctx), cfg, rows)
		Expect(err).To(MatchError(And(ContainSubstring("row sh: run sh failed"), ContainSubstring("fake-vllm: it exited before answering"), ContainSubstring("port in use"))))
		Expect(read(cfg.README)).To(Equal(readmeText))
	}, SpecTimeout(20*time.Second))

	It("needs at least two shards", func() {
		cfg, _, _ := setup(readmeText, &fakeRunner{src: saved})
		rows := []figures.Row{{Name: "sh", What: "w", Figure: "x", Runs: []figures.Run{{Kind: figures.CapbenchShards, Shards: 1}}}}
		Expect(figures.Generate(context.Background(), cfg, rows)).To(MatchError(ContainSubstring("Shards must be at least 2")))
	})
})
