package reports

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/capbench/capbench/capture/consumer"
)

// VerdictTable renders one row per rollout: id, mask, calls, chains,
// attribution and the reason in a few words. The columns are described in
// docs/consumer.md.
func VerdictTable(w io.Writer, vs []consumer.Verdict) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLLOUT\tMASK\tCALLS\tCHAINS\tATTRIBUTION\tREASON")
	for _, v := range vs {
		if v.Status == consumer.StatusFinalized || v.Metrics == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\n", v.RolloutID, v.Reason)
			continue
		}
		chains := "-"
		if !v.Metrics.Failed {
			chains = fmt.Sprint(v.Metrics.Chains)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", v.RolloutID, maskWord(v.MaskSample),
			v.Metrics.NCalls, chains, attributionCell(v.Metrics.TerminalAttribution), v.Reason)
	}
	return tw.Flush()
}

func maskWord(masked bool) string {
	if masked {
		return "masked"
	}
	return "kept"
}

// attributionCell is "<method> <call> (<chain>)", or "none" when nothing
// named the terminal call.
func attributionCell(ta *consumer.Attribution) string {
	if ta == nil {
		return "-"
	}
	var b strings.Builder
	b.WriteString(ta.Method)
	if ta.CallID != nil {
		b.WriteString(" " + *ta.CallID)
	}
	if ta.Chain != "" {
		b.WriteString(" (" + ta.Chain + ")")
	}
	return b.String()
}

// VerdictJSON writes one JSON object per rollout and line.
func VerdictJSON(w io.Writer, vs []consumer.Verdict) error {
	for _, v := range vs {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("encode verdict of %s: %w", v.RolloutID, err)
		}
		if _, err := w.Write(b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// FinalizeSummary is the one line `capbench verdict --rollouts` prints.
func FinalizeSummary(w io.Writer, s consumer.FinalizeSummary, out string) error {
	_, err := fmt.Fprintf(w, "records %d, finalized %d, masked %d, retired %d", s.Records, s.Finalized, s.Masked, s.Retired)
	if err == nil && s.Resumed > 0 {
		_, err = fmt.Fprintf(w, "; resumed after %d records already in %s (%d retired now)", s.Resumed, out, s.RetiredLate)
	}
	if err == nil {
		_, err = fmt.Fprintln(w)
	}
	return err
}
