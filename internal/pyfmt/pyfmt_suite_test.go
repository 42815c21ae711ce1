package pyfmt_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestPyfmt(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Python Formatting Suite")
}
