package reports

import (
	"fmt"
	"io"
	"strings"
)

// FigureRow is one row of the README's "Measured figures" table, each cell
// already Markdown (internal/figures fills them; docs/figures.md).
type FigureRow struct {
	What    string
	Command string
	Figure  string
}

// FiguresMarkdown writes the figures table: a header and one line per row.
// Cells are kept on one line and their pipes escaped, so a figure text
// cannot break the table.
func FiguresMarkdown(w io.Writer, rows []FigureRow) error {
	if _, err := fmt.Fprint(w, "| what | command | figure |\n|---|---|---|\n"); err != nil {
		return err
	}
	for _, r := range rows {
		cells := []string{r.What, r.Command, r.Figure}
		for i, c := range cells {
			cells[i] = mdEscape(strings.TrimSpace(c))
		}
		if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")); err != nil {
			return err
		}
	}
	return nil
}
