package main

import (
	"os"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/scenarios"
)

var _ = Describe("docs/scenarios.md", func() {
	It("names every catalog scenario and every row the catalog uses", func() {
		raw, err := os.ReadFile("../../docs/scenarios.md")
		Expect(err).NotTo(HaveOccurred())
		doc := string(raw)
		for _, s := range scenarios.All() {
			Expect(doc).To(ContainSubstring("`"+s.Name+"`"), "docs/scenarios.md does not list scenario %s", s.Name)
			if s.Row != "" {
				Expect(doc).To(ContainSubstring("\n| "+string(s.Row)+" |"), "docs/scenarios.md has no row %s (scenario %s)", s.Row, s.Name)
			}
		}
		Expect(strings.Count(doc, "\n| ")).To(BeNumerically(">", 30))
	})
})
