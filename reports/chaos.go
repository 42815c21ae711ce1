package reports

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/capbench/capbench/harness/chaos"
)

// Chaos renders a chaos run as one table: what each scenario did, how many
// calls it tried, how many the clients accepted, and what the capture
// directory holds for them afterwards.
func Chaos(w io.Writer, res chaos.Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tload\tfaults\tinputs tried\tacknowledged\tstored\tlost\tcorrupt\tmasked\tpeak RSS\tnotes")
	for _, r := range res.Rows {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\tskipped: %s\n", r.Scenario, r.Load, r.Faults, r.Skipped)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Scenario, r.Load, r.Faults,
			r.Tried, r.Acknowledged, r.Stored, r.Lost, r.Corrupt, r.Masked, rssText(r.PeakRSSBytes), r.Notes)
	}
	return tw.Flush()
}

func rssText(b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}
