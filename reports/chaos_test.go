package reports_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness/chaos"
	"github.com/capbench/capbench/reports"
)

var _ = Describe("the chaos table", func() {
	It("has one header with every column and one line per scenario, skips included", func() {
		res := chaos.Result{Version: chaos.ResultVersion, Rows: []chaos.Row{
			{Scenario: "kill -9 ×3", Load: "8 callers, 3s", Faults: "SIGKILL of the proxy", Tried: 120, Acknowledged: 110,
				Stored: 108, Lost: 0, Corrupt: 0, Masked: 7, PeakRSSBytes: 40 << 20, Notes: "refused: 10 conn errors"},
			{Scenario: "capture disk fills", Load: "8 callers, 3s", Faults: "2048 KiB tmpfs", Skipped: "cannot mount a tmpfs"},
		}}
		var b strings.Builder
		Expect(reports.Chaos(&b, res)).To(Succeed())
		lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
		Expect(lines).To(HaveLen(3))
		for _, col := range []string{"load", "faults", "inputs tried", "acknowledged", "stored", "lost", "corrupt", "masked", "peak RSS"} {
			Expect(lines[0]).To(ContainSubstring(col))
		}
		Expect(strings.Fields(lines[1])).To(ContainElements("120", "110", "108", "7", "40"))
		Expect(lines[2]).To(ContainSubstring("skipped: cannot mount a tmpfs"))
	})
})
