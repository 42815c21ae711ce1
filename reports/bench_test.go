package reports_test

import (
	"bytes"
	"encoding/xml"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/reports"
)

var _ = Describe("bench reports", func() {
	It("print a console table with every stage and path and the capture lines", func() {
		var b bytes.Buffer
		Expect(reports.BenchTable(&b, syntheticResult(1))).To(Succeed())
		out := b.String()
		Expect(out).To(ContainSubstring("TTFT ms p50/p99"))
		Expect(strings.Count(out, "c=1  ")).To(BeNumerically(">=", 2))
		Expect(out).To(ContainSubstring("capture overhead c=4: 39 pairs, E2EL proxy/direct 1.050"))
		Expect(out).To(ContainSubstring("fidelity (ledger) 80/80 exact"))
		Expect(out).To(ContainSubstring("capture syncs: 160 appends made durable by 40 syncs (30 of the file system, 10 of one file), 4.0 appends per sync; a sync was running 75% of the load's 2.0 s"))
		Expect(out).To(ContainSubstring("saturation knee"))
		Expect(out).To(ContainSubstring(`masked 1× terminal chain "broken", roots=3`))
		Expect(out).NotTo(ContainSubstring("INTERRUPTED"))
	})

	It("say so when the run was interrupted", func() {
		r := syntheticResult(1)
		r.Interrupted = true
		var b, m bytes.Buffer
		Expect(reports.BenchTable(&b, r)).To(Succeed())
		Expect(b.String()).To(ContainSubstring("INTERRUPTED"))
		Expect(reports.BenchMarkdown(&m, r)).To(Succeed())
		Expect(m.String()).To(ContainSubstring("**Interrupted**"))
	})

	It("render Markdown with one table row per summary", func() {
		var b bytes.Buffer
		r := syntheticResult(1)
		Expect(reports.BenchMarkdown(&b, r)).To(Succeed())
		rows := 0
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "| c=") {
				rows++
			}
		}
		Expect(rows).To(Equal(len(r.Summaries)))
	})

	It("write JUnit SLO gates that fail where a bound or capture check fails", func() {
		r := syntheticResult(1)
		r.Config.SLO.E2EL = 200 * 1e6 // 200 ms: the c=4 stage's p99 is above it
		r.Capture.FidelityExact = 79
		var b bytes.Buffer
		failed, err := reports.BenchJUnit(&b, r)
		Expect(err).NotTo(HaveOccurred())
		var doc struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Suites   []struct {
				Cases []struct {
					Name    string `xml:"name,attr"`
					Class   string `xml:"classname,attr"`
					Failure *struct {
						Message string `xml:"message,attr"`
					} `xml:"failure"`
				} `xml:"testcase"`
			} `xml:"testsuite"`
		}
		Expect(xml.Unmarshal(b.Bytes(), &doc)).To(Succeed())
		Expect(doc.Failures).To(Equal(failed))
		var failing []string
		for _, c := range doc.Suites[0].Cases {
			if c.Failure != nil {
				failing = append(failing, c.Class+": "+c.Name)
			}
		}
		Expect(failing).To(ConsistOf(
			"bench.c=4.direct: E2EL p99 <= 200ms", "bench.c=4.proxy: E2EL p99 <= 200ms",
			"bench.capture: captured tokens match (ledger)", "bench.sessions: no session masked"))
	})
})

var _ = Describe("compare", func() {
	It("passes two runs of the same configuration", func() {
		c, err := bench.Compare(syntheticResult(1), syntheticResult(1), 0.1)
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Regressions).To(BeZero())
		Expect(c.Changes).NotTo(BeEmpty())
	})

	It("fails an injected 20% regression of the proxied path and names it in the Markdown", func() {
		base, next := syntheticResult(1), syntheticResult(1.2)
		c, err := bench.Compare(base, next, 0.1)
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Regressions).To(BeNumerically(">", 0))
		for _, ch := range c.Changes {
			Expect(ch.Regression).To(Equal(ch.Path == bench.PathProxy), "%s %s %+v", ch.Path, ch.Metric, ch.Ratio)
		}
		var b bytes.Buffer
		Expect(reports.CompareMarkdown(&b, base, next, c)).To(Succeed())
		Expect(b.String()).To(ContainSubstring("**regression**"))
		Expect(b.String()).To(ContainSubstring("| c=1 | proxy | e2el_ms (lower is better)"))
	})

	It("refuses runs whose configurations differ", func() {
		other := syntheticResult(1)
		other.Config.Requests = 41
		_, err := bench.Compare(syntheticResult(1), other, 0.1)
		Expect(err).To(MatchError(bench.ErrNotComparable))
		Expect(err.Error()).To(ContainSubstring(`"requests":41`))
	})

	It("ignores where the load went", func() {
		other := syntheticResult(1)
		other.Config.URL = "http://elsewhere:8000"
		_, err := bench.Compare(syntheticResult(1), other, 0.1)
		Expect(err).NotTo(HaveOccurred())
	})
})
