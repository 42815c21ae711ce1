package reports_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/reports"
)

var _ = Describe("FiguresMarkdown", func() {
	DescribeTable("renders one table line per row",
		func(row reports.FigureRow, want string) {
			var sb strings.Builder
			Expect(reports.FiguresMarkdown(&sb, []reports.FigureRow{row})).To(Succeed())
			Expect(sb.String()).To(Equal("| what | command | figure |\n|---|---|---|\n" + want + "\n"))
		},
		Entry("plain cells", reports.FigureRow{What: "ttft", Command: "`go test ./x`", Figure: "1 ms"},
			"| ttft | `go test ./x` | 1 ms |"),
		Entry("a pipe in a command is escaped", reports.FigureRow{What: "w", Command: "`-bench 'A|B'`", Figure: "f"},
			"| w | `-bench 'A\\|B'` | f |"),
		Entry("a multi-line figure stays on its line", reports.FigureRow{What: "w", Command: "c", Figure: "a\nb\n"},
			"| w | c | a b |"),
	)
})
