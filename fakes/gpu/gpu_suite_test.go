package gpu_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestGPU(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "GPU Memory Model Suite")
}
