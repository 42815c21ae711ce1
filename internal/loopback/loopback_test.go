package loopback_test

import (
	"net"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/loopback"
)

var _ = Describe("FreePort", func() {
	It("names a loopback port a server can then listen on", func() {
		port, err := loopback.FreePort()
		Expect(err).NotTo(HaveOccurred())
		Expect(port).To(BeNumerically(">", 0))
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		Expect(err).NotTo(HaveOccurred())
		Expect(ln.Close()).To(Succeed())
	})
})
