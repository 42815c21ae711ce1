package figures_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestFigures(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Figures Suite")
}
