package h1_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestH1(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "HTTP/1.1 Transport Suite")
}
