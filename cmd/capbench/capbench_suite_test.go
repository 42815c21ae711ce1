package main

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestCapbench(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "capbench CLI Suite")
}
