package gpu_test

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness/env"
)

func TestGPU(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "GPU Suite (real vLLM)")
}

// image is the vLLM image under test (CAPBENCH_VLLM_IMAGE overrides).
var image = env.DefaultVLLMImage

var _ = BeforeSuite(func(ctx SpecContext) {
	if v := os.Getenv("CAPBENCH_VLLM_IMAGE"); v != "" {
		image = v
	}
	if ok, why := env.RealVLLMAvailable(ctx, image); !ok {
		Skip("real-vLLM backend unavailable: " + why)
	}
}, NodeTimeout(time.Minute))
