package claudecode_test

import (
	"log/slog"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestClaudeCode(t *testing.T) {
	RegisterFailHandler(Fail)
	// The consumer warns about masked rollouts; keep that in Ginkgo's buffer.
	slog.SetDefault(slog.New(slog.NewTextHandler(GinkgoWriter, nil)))
	RunSpecs(t, "Claude Code CLI Suite")
}
