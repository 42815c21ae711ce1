package vllm_test

import (
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
)

func TestVLLM(t *testing.T) {
	RegisterFailHandler(Fail)
	// Shared CI machines are slow at times; a poll that is merely late must
	// not fail a spec.
	SetDefaultEventuallyTimeout(10 * time.Second)
	RunSpecs(t, "Fake vLLM Suite")
}

var baseline goleak.Option

var _ = BeforeSuite(func() { baseline = goleak.IgnoreCurrent() })

// Every server a spec started must have stopped all its goroutines.
var _ = AfterSuite(func() {
	http.DefaultClient.CloseIdleConnections()
	Eventually(func() error { return goleak.Find(baseline) }).WithTimeout(5 * time.Second).Should(Succeed())
})
