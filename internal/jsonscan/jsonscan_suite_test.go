package jsonscan_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestJsonscan(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "JSON Scanner Suite")
}
