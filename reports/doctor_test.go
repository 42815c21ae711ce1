package reports_test

import (
	"bytes"
	"encoding/xml"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/reports"
	"github.com/capbench/capbench/walkthrough"
)

var _ = Describe("doctor reports", func() {
	rep := func() *doctor.Report {
		r := doctor.NewReport("page", "p.mdx")
		r.Add(doctor.Finding{Rule: "serve/tool-parser-alone", Severity: doctor.Error, File: "p.mdx", Line: 17, Subject: "--tool-call-parser",
			Message: "a | b", Cause: "why", Fix: "add --enable-auto-tool-choice"})
		r.Add(doctor.Finding{Rule: "page/overlay-not-shown", Severity: doctor.Info, File: "p.mdx", Line: 42, Message: "x"})
		return r
	}

	It("renders findings with file:line, cause and fix, and the verdict", func() {
		var b bytes.Buffer
		Expect(reports.DoctorText(&b, rep())).To(Succeed())
		Expect(b.String()).To(ContainSubstring("p.mdx:17: error serve/tool-parser-alone [--tool-call-parser]: a | b\n    likely cause: why\n    fix: add --enable-auto-tool-choice\n"))
		Expect(b.String()).To(HaveSuffix("FAILED: 1 error(s), 0 warning(s), 1 note(s)\n"))
	})

	It("escapes table cells in Markdown", func() {
		var b bytes.Buffer
		Expect(reports.DoctorMarkdown(&b, rep())).To(Succeed())
		Expect(b.String()).To(ContainSubstring(`| p.mdx:17 | error | ` + "`serve/tool-parser-alone`" + ` | a \| b | why |`))
	})
})

var _ = Describe("walkthrough reports", func() {
	res := &walkthrough.Result{Page: "p.mdx", GPU: "48GiB",
		Steps: []walkthrough.Step{
			{Name: "Serve the policy", Line: 15, Status: walkthrough.Fail, Detail: "vLLM refuses <to> start & \"quotes\""},
			{Name: "Check the rows", Line: 49, Status: walkthrough.Pass, Detail: "ok"},
		},
		Mistakes: []walkthrough.Mistake{{Name: "m1", Symptom: "s", Status: walkthrough.Pass, Detail: "seen"}, {Name: "m2", Status: walkthrough.Skip, Detail: "needs the fake"}},
	}

	It("writes JUnit XML a CI job can read back, with counts", func() {
		var b bytes.Buffer
		Expect(reports.WalkthroughJUnit(&b, res)).To(Succeed())
		var j struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Skipped  int `xml:"skipped,attr"`
			Suites   []struct {
				Cases []struct {
					Name    string `xml:"name,attr"`
					Failure *struct {
						Text string `xml:",chardata"`
					} `xml:"failure"`
				} `xml:"testcase"`
			} `xml:"testsuite"`
		}
		Expect(xml.Unmarshal(b.Bytes(), &j)).To(Succeed())
		Expect([]int{j.Tests, j.Failures, j.Skipped}).To(Equal([]int{4, 1, 1}))
		Expect(j.Suites[0].Cases[0].Name).To(Equal("Serve the policy (line 15)"))
		Expect(j.Suites[0].Cases[0].Failure.Text).To(Equal("vLLM refuses <to> start & \"quotes\""))
	})

	It("writes a Markdown report naming the broken step", func() {
		var b bytes.Buffer
		Expect(reports.WalkthroughMarkdown(&b, res)).To(Succeed())
		Expect(b.String()).To(HavePrefix("# Walkthrough `p.mdx`: failed"))
		Expect(strings.Count(b.String(), "| fail |")).To(Equal(1))
	})
})
