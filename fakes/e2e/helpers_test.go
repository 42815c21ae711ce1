package e2e_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// unavailable skips a spec for a missing prerequisite, but fails it in CI,
// where every prerequisite must be present.
func unavailable(why string) {
	GinkgoHelper()
	if os.Getenv("CI") == "true" {
		Fail("CI=true but " + why)
	}
	Skip(why)
}

// skipInShortMode keeps `go test -short` free of containers and node.
func skipInShortMode() {
	GinkgoHelper()
	if testing.Short() {
		Skip("skipped in -short mode")
	}
}

// repoRoot walks up from the package directory to the module root.
func repoRoot() string {
	GinkgoHelper()
	dir, err := os.Getwd()
	Expect(err).NotTo(HaveOccurred())
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		Expect(parent).NotTo(Equal(dir), "go.mod not found above the test directory")
		dir = parent
	}
}
