package cputime_test

import (
	"crypto/sha256"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/cputime"
)

var _ = Describe("Process", func() {
	It("grows with the work the process does, and grows less while it sleeps", func() {
		before := cputime.Process()
		buf := make([]byte, 1<<20)
		for range 64 { // 64 MiB hashed: tens of milliseconds of CPU
			sum := sha256.Sum256(buf)
			buf[0] = sum[0]
		}
		busy := cputime.Process() - before
		Expect(busy).To(BeNumerically(">", 0))

		before = cputime.Process()
		time.Sleep(20 * time.Millisecond)
		Expect(cputime.Process() - before).To(BeNumerically("<", busy))
	})
})
