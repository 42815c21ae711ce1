package cputime_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestCPUTime(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "cputime")
}
