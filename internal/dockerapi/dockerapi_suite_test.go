package dockerapi_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestDockerAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Docker Engine API Client Suite")
}
