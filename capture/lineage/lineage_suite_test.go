package lineage_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestLineage(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Lineage Suite")
}
