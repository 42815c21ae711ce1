package chaos_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness/chaos"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/reports"
)

// The bounded form CI runs: two seconds per timed scenario, under a minute
// in all on two cores (build included).
var (
	cfg  chaos.Config
	rows []chaos.Row
)

// buildOnce builds capbench for the attack specs (the counts spec needs none).
func buildOnce(ctx SpecContext) {
	if testing.Short() {
		Skip("the chaos scenarios build capbench and run proxy processes; skipped with -short")
	}
	bin, err := env.BuildBinary(ctx, GinkgoT().TempDir(), false)
	Expect(err).NotTo(HaveOccurred())
	cfg = chaos.Config{Binary: bin, Dir: GinkgoT().TempDir(), Concurrency: 8, Duration: 2 * time.Second, Kills: 3, BodyBytes: 4 << 20,
		WatchCalls: 1000, FloodConns: 1100, RequireTmpfs: os.Getenv("CI") == "true", Log: GinkgoWriter}
}

var _ = AfterSuite(func() {
	if len(rows) == 0 {
		return
	}
	var b strings.Builder
	Expect(reports.Chaos(&b, chaos.Result{Version: chaos.ResultVersion, Rows: rows})).To(Succeed())
	AddReportEntry("chaos table", b.String())
	GinkgoWriter.Println(b.String())
})

// run runs one scenario, keeps its row for the table and checks the
// invariants every scenario shares: calls were acknowledged, none lost,
// none corrupt, and the counts add up.
func run(ctx context.Context, scenario func(context.Context, chaos.Config) (chaos.Row, error)) chaos.Row {
	row, err := scenario(ctx, cfg)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	rows = append(rows, row)
	if row.Skipped != "" {
		Skip(row.Scenario + ": " + row.Skipped)
	}
	GinkgoWriter.Printf("%+v\n", row)
	ExpectWithOffset(1, row.Acknowledged).To(BeNumerically(">", 0), "no call was acknowledged")
	ExpectWithOffset(1, row.Lost).To(BeZero(), "acknowledged calls missing from unmasked rollouts")
	ExpectWithOffset(1, row.Corrupt).To(BeZero(), "records that differ from the engine's tokens, or duplicates")
	ExpectWithOffset(1, row.Stored).To(BeNumerically("<=", row.Acknowledged))
	ExpectWithOffset(1, row.Acknowledged).To(BeNumerically("<=", row.Tried))
	return row
}

var _ = Describe("the capture stack under attack", Label("chaos"), Serial, Ordered, ContinueOnFailure, func() {
	BeforeAll(buildOnce, NodeTimeout(3*time.Minute))

	It("keeps every acknowledged call through kill -9 of the proxy", func(ctx SpecContext) {
		row := run(ctx, chaos.KillUnderLoad)
		Expect(row.Stored + row.Masked).To(BeNumerically(">=", row.Acknowledged))
	}, SpecTimeout(time.Minute))

	It("keeps two proxies on one directory consistent", func(ctx SpecContext) {
		row := run(ctx, chaos.TwoProxies)
		Expect(row.Stored).To(Equal(row.Acknowledged), "no fault was injected: every call must be stored")
		Expect(row.Masked).To(BeZero())
	}, SpecTimeout(time.Minute))

	It("loses nothing acknowledged when the capture disk fills", func(ctx SpecContext) {
		row := run(ctx, chaos.FullDisk)
		Expect(row.Tried).To(BeNumerically(">", row.Acknowledged), "the disk never filled: grow --duration or shrink the tmpfs")
	}, SpecTimeout(time.Minute))

	It("stores or masks every call through every upstream fault", func(ctx SpecContext) {
		row := run(ctx, chaos.UpstreamFaults)
		Expect(row.Stored + row.Masked).To(BeNumerically(">=", row.Acknowledged))
		Expect(row.Tried).To(BeNumerically(">", row.Acknowledged), "no fault reached the callers")
	}, SpecTimeout(time.Minute))

	It("serves real callers through a flood of idle connections", func(ctx SpecContext) {
		row := run(ctx, chaos.SlowClientFlood)
		Expect(row.Stored).To(Equal(row.Acknowledged))
		Expect(row.Acknowledged).To(BeNumerically(">=", 20), "real callers were locked out")
	}, SpecTimeout(time.Minute))

	It("bounds the memory a burst of big bodies takes, with the in-flight budget", func(ctx SpecContext) {
		row := run(ctx, chaos.BigBodies)
		Expect(row.Stored).To(Equal(row.Acknowledged))
		Expect(row.Acknowledged).To(Equal(row.Tried), "a big body was refused: the budget queues, it must not drop")
		Expect(row.PeakRSSBytes).To(BeNumerically("<", row.PeerPeakRSSBytes*3/4),
			"the default budget did not lower the peak below that of a budget admitting every body")
	}, SpecTimeout(2*time.Minute))

	It("returns to its descriptors after many calls", func(ctx SpecContext) {
		row := run(ctx, chaos.Watch)
		Expect(row.Acknowledged).To(Equal(cfg.WatchCalls))
		Expect(row.Stored).To(Equal(row.Acknowledged))
		Expect(row.Usage).NotTo(BeNil())
		// The upstream keep-alive pool may keep one connection per caller, and
		// the file store three descriptors for each rollout it keeps open.
		Expect(row.Usage.FDsAfter).To(BeNumerically("<=", row.Usage.FDsBefore+cfg.Concurrency+4+3*chaos.WatchOpenRollouts), "descriptors leaked")
	}, SpecTimeout(2*time.Minute))
})
