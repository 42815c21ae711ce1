package reports_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Every capbench command links reports, so its package init runs on every
// start (`capbench verdict` included); templates and tables are built at
// first use instead.
var _ = Describe("the reports package's init", func() {
	It("does next to no work (templates are parsed at first use)", func(ctx SpecContext) {
		self, err := os.Executable()
		Expect(err).NotTo(HaveOccurred())
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		// This test binary, run with no test selected, only initialises its
		// packages; the runtime reports each package's init.
		cmd := exec.CommandContext(rctx, self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(string(out)).To(MatchRegexp(`(?m)^init \S+ @`), "the runtime printed no init trace")
		m := regexp.MustCompile(`(?m)^init github\.com/capbench/capbench/reports @\S+ ms, \S+ ms clock, \d+ bytes, (\d+) allocs$`).FindSubmatch(out)
		if m == nil {
			// The runtime prints no line for a package with nothing to run.
			return
		}
		allocs, err := strconv.Atoi(string(m[1]))
		Expect(err).NotTo(HaveOccurred())
		Expect(allocs).To(BeNumerically("<", 50), "reports allocates at init: build templates and tables at first use (sync.OnceValue)")
	}, SpecTimeout(2*time.Minute))
})
