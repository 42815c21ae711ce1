package main

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestTestsummary(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Testsummary Suite")
}
