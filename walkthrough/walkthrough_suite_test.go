package walkthrough_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestWalkthrough(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Walkthrough Suite")
}
