package e2e_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/reporters"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness/env"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	// The consumer warns about every masked rollout; keep that in Ginkgo's
	// buffer (shown on failure or with -v) instead of the terminal.
	slog.SetDefault(slog.New(slog.NewTextHandler(GinkgoWriter, nil)))
	RunSpecs(t, "E2E Suite (process and container backends)")
}

// binary is one static capbench build shared by the process backend and the
// FROM-scratch image.
var binary string

var _ = BeforeSuite(func(ctx SpecContext) {
	if testing.Short() {
		Skip("e2e backends are skipped with -short")
	}
	dir, err := os.MkdirTemp("", "capbench-e2e-bin-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	binary, err = env.BuildBinary(ctx, dir, true)
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(5*time.Minute))

var _ = ReportAfterSuite("capbench JUnit and JSON reports", func(r Report) {
	dir := os.Getenv("CAPBENCH_REPORT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "capbench-reports")
	}
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	Expect(reporters.GenerateJUnitReport(r, filepath.Join(dir, "e2e-junit.xml"))).To(Succeed())
	Expect(reporters.GenerateJSONReport(r, filepath.Join(dir, "e2e-report.json"))).To(Succeed())
})
