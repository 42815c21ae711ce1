package harness_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/reporters"
	. "github.com/onsi/gomega"
)

func TestHarness(t *testing.T) {
	RegisterFailHandler(Fail)
	// The consumer warns about every masked rollout; keep that in Ginkgo's
	// buffer (shown on failure or with -v) instead of the terminal.
	slog.SetDefault(slog.New(slog.NewTextHandler(GinkgoWriter, nil)))
	RunSpecs(t, "Harness Suite")
}

// Reports land in $CAPBENCH_REPORT_DIR (CI) or a temp dir.
var _ = ReportAfterSuite("capbench JUnit and JSON reports", func(r Report) {
	dir := os.Getenv("CAPBENCH_REPORT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "capbench-reports")
	}
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	Expect(reporters.GenerateJUnitReport(r, filepath.Join(dir, "harness-junit.xml"))).To(Succeed())
	Expect(reporters.GenerateJSONReport(r, filepath.Join(dir, "harness-report.json"))).To(Succeed())
})
