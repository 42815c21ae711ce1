package proxy_test

import (
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestProxy(t *testing.T) {
	RegisterFailHandler(Fail)
	// Shared CI machines are slow at times; a poll that is merely late must
	// not fail a spec.
	SetDefaultEventuallyTimeout(10 * time.Second)
	RunSpecs(t, "Proxy Suite")
}
