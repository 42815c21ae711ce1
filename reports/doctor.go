package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/capbench/capbench/doctor"
)

// DoctorJSON writes a doctor report as one JSON object.
func DoctorJSON(w io.Writer, r *doctor.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func where(f doctor.Finding) string {
	switch {
	case f.File != "" && f.Line > 0:
		return fmt.Sprintf("%s:%d", f.File, f.Line)
	case f.Line > 0:
		return fmt.Sprintf("line %d", f.Line)
	}
	return f.File
}

// DoctorText writes a doctor report for a terminal or a CI log: tables
// first, then each finding with its cause and fix.
func DoctorText(w io.Writer, r *doctor.Report) error {
	fmt.Fprintf(w, "doctor %s %s\n", r.Kind, r.Target)
	if len(r.Checks) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\ncheck\tresult\tdetail")
		for _, c := range r.Checks {
			res := "ok"
			if !c.OK {
				res = "FAIL"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, res, oneLine(c.Detail))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Rollouts) > 0 {
		if err := rolloutTable(w, r); err != nil {
			return err
		}
	}
	if len(r.Findings) > 0 {
		fmt.Fprintln(w)
	}
	for _, f := range r.Findings {
		loc := where(f)
		if loc != "" {
			loc += ": "
		}
		subj := ""
		if f.Subject != "" {
			subj = " [" + f.Subject + "]"
		}
		fmt.Fprintf(w, "%s%s %s%s: %s\n", loc, f.Severity, f.Rule, subj, f.Message)
		if f.Cause != "" {
			fmt.Fprintf(w, "    likely cause: %s\n", f.Cause)
		}
		if f.Fix != "" {
			fmt.Fprintf(w, "    fix: %s\n", f.Fix)
		}
	}
	verdict := "ok"
	if !r.OK() {
		verdict = "FAILED"
	}
	_, err := fmt.Fprintf(w, "\n%s: %d error(s), %d warning(s), %d note(s)\n", verdict, r.Count(doctor.Error), r.Count(doctor.Warning), r.Count(doctor.Info))
	return err
}

func rolloutTable(w io.Writer, r *doctor.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nrollout\tcapture\tmask\tn_calls\tchains\tchain\tdelivered\trecords\thealthy")
	for _, row := range r.Rollouts {
		records := "-"
		if row.Records >= 0 {
			records = fmt.Sprint(row.Records)
		}
		if !row.HasCapture {
			fmt.Fprintf(tw, "%s\tno\t%t\t-\t-\t-\t-\t%s\t%t\n", row.ID, row.Masked, records, row.Healthy)
			continue
		}
		fmt.Fprintf(tw, "%s\tyes\t%t\t%d\t%d\t%q\t%g\t%s\t%t\n", row.ID, row.Masked, row.NCalls, row.Chains, row.Chain, row.Delivered, records, row.Healthy)
	}
	if a := r.Aggregate; a != nil {
		fmt.Fprintf(tw, "all %d\t%d\t%d\tmean %.2f\t\t\t\t\t%d\n", a.Rows, a.WithCapture, a.Masked, a.MeanCalls, a.Healthy)
	}
	return tw.Flush()
}

// DoctorMarkdown writes a doctor report as Markdown (for a CI comment).
func DoctorMarkdown(w io.Writer, r *doctor.Report) error {
	fmt.Fprintf(w, "## doctor %s `%s`\n\n", r.Kind, r.Target)
	if len(r.Findings) == 0 {
		_, err := fmt.Fprintln(w, "No findings.")
		return err
	}
	fmt.Fprintln(w, "| where | severity | rule | finding | likely cause | fix |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, f := range r.Findings {
		fmt.Fprintf(w, "| %s | %s | `%s` | %s | %s | %s |\n", mdCell(where(f)), f.Severity, f.Rule, mdCell(f.Message), mdCell(f.Cause), mdCell(f.Fix))
	}
	return nil
}

func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
