package chattemplate_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestChatTemplate(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Chat Template Suite")
}
