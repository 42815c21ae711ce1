package gympeer_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestGympeer(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Gym Peer Suite")
}
