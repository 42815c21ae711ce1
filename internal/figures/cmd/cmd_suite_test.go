package main

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestFiguresCmd(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Figures Command Suite")
}
