package procstat_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestProcstat(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "procstat")
}
