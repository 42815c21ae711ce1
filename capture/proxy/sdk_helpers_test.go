package proxy_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/fakes/vllm"
)

// sdkNPMDir is testdata/npm next to this file.
func sdkNPMDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "npm")
}

// sdkNode returns the node binary once the SDK packages are installed. A
// missing toolchain skips the spec locally and fails it on CI, where `npm ci`
// is part of the run and a skip would hide a broken setup.
func sdkNode() string {
	if testing.Short() {
		Skip("the SDK wire specs run node; skipped in -short mode")
	}
	unavailable := func(why string) {
		if os.Getenv("CI") == "true" {
			Fail(why + " (required when CI=true)")
		}
		Skip(why)
	}
	dir := sdkNPMDir()
	for _, pkg := range []string{"openai", filepath.Join("@anthropic-ai", "sdk")} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			unavailable("node_modules/" + filepath.ToSlash(pkg) + " missing; run `npm ci` in " + dir)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable("node is not installed")
	}
	return node
}

// runSDKScript runs one script of testdata/npm with env added and decodes the
// JSON line it prints last into out.
func runSDKScript(ctx context.Context, node, script string, env map[string]string, out any) {
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = sdkNPMDir()
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	// Shown with a failure, so what the client saw is in the report.
	GinkgoWriter.Printf("%s stdout:\n%s\n%s stderr:\n%s\n", script, stdout, script, stderr.String())
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), "%s failed:\n%s\n%s", script, stdout, stderr.String())
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	ExpectWithOffset(1, json.Unmarshal([]byte(lines[len(lines)-1]), out)).To(Succeed(), string(stdout))
}

// ledgerIndexByPrompt finds the one ledger entry generated for a record's
// prompt. Every prompt in a spec is distinct, so a second match is an error.
func ledgerIndexByPrompt(led []vllm.LedgerEntry, e *record.Entry) int {
	found := -1
	for i := range led {
		if slices.Equal(led[i].PromptTokenIDs, e.PromptTokenIDs) {
			ExpectWithOffset(1, found).To(Equal(-1), "two ledger entries share the prompt of call %s", e.ModelCallID)
			found = i
		}
	}
	ExpectWithOffset(1, found).NotTo(Equal(-1), "no ledger entry has the prompt of call %s (%d ids)", e.ModelCallID, len(e.PromptTokenIDs))
	return found
}

// sameBits compares log-probs bit for bit: a value that lost precision on
// its way through JSON differs here even where a tolerance would pass.
func sameBits(got, want []float64) bool {
	return slices.EqualFunc(got, want, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) })
}

// rootAndChild splits a two-call chain into its root and its child.
func rootAndChild(es []*record.Entry) (root, child *record.Entry) {
	ExpectWithOffset(1, es).To(HaveLen(2))
	for _, e := range es {
		ExpectWithOffset(1, e.ParentResolution).NotTo(BeNil(), "call %s has no parent resolution", e.ModelCallID)
		if *e.ParentResolution == record.ResolutionRoot {
			root = e
		} else {
			child = e
		}
	}
	ExpectWithOffset(1, root).NotTo(BeNil(), "no root call")
	ExpectWithOffset(1, child).NotTo(BeNil(), "no child call")
	return root, child
}
