package main

import (
	"bytes"
	"context"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/fixtures"
)

// capbench runs the CLI in-process with args and returns stdout and the error.
func capbench(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(GinkgoWriter)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// fixturesDir finds the shared fixtures next to the repository, or skips.
func fixturesDir() string {
	dir, ok := fixtures.Dir()
	if !ok {
		Skip("test fixtures not found (testdata/fixtures, or ../shared/fixtures)")
	}
	return dir
}

// copyFixture copies a read-only fixture folder into a writable temp dir,
// because freezing writes the state file.
func copyFixture(rel string) string {
	dst := filepath.Join(GinkgoT().TempDir(), filepath.Base(rel))
	Expect(fixtures.CopyTree(filepath.Join(fixturesDir(), rel), dst)).To(Succeed())
	return dst
}
