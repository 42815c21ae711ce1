package syncfloor_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestSyncfloor(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "syncfloor")
}
