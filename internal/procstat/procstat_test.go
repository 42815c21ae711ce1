package procstat_test

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"runtime"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/procstat"
)

var _ = Describe("CPU", func() {
	It("grows with the work the process does, and grows less while it sleeps", func() {
		before := procstat.CPU()
		buf := make([]byte, 1<<20)
		for range 64 { // 64 MiB hashed: tens of milliseconds of CPU
			sum := sha256.Sum256(buf)
			buf[0] = sum[0]
		}
		busy := procstat.CPU() - before
		Expect(busy).To(BeNumerically(">", 0))

		before = procstat.CPU()
		time.Sleep(20 * time.Millisecond)
		Expect(procstat.CPU() - before).To(BeNumerically("<", busy))
	})
})

var _ = Describe("LiveHeap", func() {
	It("counts what is still reachable, not what was dropped", func() {
		base := procstat.LiveHeap()
		held := make([][]byte, 64)
		for i := range held {
			held[i] = make([]byte, 1<<20)
		}
		Expect(procstat.LiveHeap()).To(BeNumerically(">=", base+60<<20))
		runtime.KeepAlive(held)
		Expect(procstat.LiveHeap()).To(BeNumerically("<", base+8<<20))
	})
})

var _ = Describe("OpenDescriptors", func() {
	It("counts one more for each file held open, and not the count's own", func() {
		before, err := procstat.OpenDescriptors()
		Expect(err).NotTo(HaveOccurred())
		again, err := procstat.OpenDescriptors()
		Expect(err).NotTo(HaveOccurred())
		Expect(again).To(Equal(before))
		var files []*os.File
		for i := range 3 {
			f, err := os.Create(filepath.Join(GinkgoT().TempDir(), "f"+string(rune('a'+i))))
			Expect(err).NotTo(HaveOccurred())
			files = append(files, f)
		}
		Expect(procstat.OpenDescriptors()).To(Equal(before + 3))
		for _, f := range files {
			Expect(f.Close()).To(Succeed())
		}
		Expect(procstat.OpenDescriptors()).To(Equal(before))
	})
})
