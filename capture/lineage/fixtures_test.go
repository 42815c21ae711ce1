package lineage_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"sort"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"

	"github.com/capbench/capbench/internal/fixtures"
)

// fixturesDir is the shared fixtures folder next to the repository, or "".
func fixturesDir() string {
	dir, _ := fixtures.Dir()
	return dir
}

// readRecords parses every readable record of one JSONL file, in order.
func readRecords(path string) []*record.Entry {
	GinkgoHelper()
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	var out []*record.Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<28)
	for sc.Scan() {
		if e, err := record.ParseLine(sc.Bytes()); err == nil {
			out = append(out, e)
		}
	}
	Expect(sc.Err()).NotTo(HaveOccurred())
	return out
}

var _ = Describe("Gym-stamped continuation fingerprints", func() {
	// The fixtures keep no request bodies, but a continuation fingerprint
	// depends only on model-authored items, and every harness in them echoes
	// the outputs of earlier calls verbatim. So a record's fingerprint must
	// equal the fingerprint of the output items along its resolved chain,
	// root first; for a root it is the fingerprint of its own outputs.
	It("equals the fingerprint of the outputs along each record's resolved chain", func() {
		root := fixturesDir()
		if root == "" {
			Skip("shared/fixtures not found next to the repository root")
		}
		var files []string
		for _, g := range []string{"gym-consumer/*/capture/*.jsonl", "gym-rollouts/capture/*.jsonl", "gym-store/docs-extras/*/files/*.jsonl"} {
			m, err := filepath.Glob(filepath.Join(root, g))
			Expect(err).NotTo(HaveOccurred())
			files = append(files, m...)
		}
		sort.Strings(files)
		Expect(files).NotTo(BeEmpty())
		checked := 0
		for _, f := range files {
			records := readRecords(f)
			byID := map[string]*record.Entry{}
			for _, e := range records {
				byID[e.ModelCallID] = e
			}
			for _, e := range records {
				chain, ok := resolvedChain(e, byID)
				if !ok {
					continue // unresolved somewhere: no request to reconstruct
				}
				var all []any
				for _, c := range chain {
					for _, it := range c.OutputItems {
						all = append(all, map[string]any(it))
					}
				}
				fp, err := lineage.AssistantFingerprint(all)
				Expect(err).NotTo(HaveOccurred(), "%s %s", f, e.ModelCallID)
				Expect(fp).To(Equal(e.ContinuationFingerprint), "%s %s", f, e.ModelCallID)
				checked++
			}
		}
		Expect(checked).To(BeNumerically(">", 150))
	})
})

// resolvedChain walks parent links to a ROOT record; false when a link is
// not RESOLVED or its parent is missing.
func resolvedChain(e *record.Entry, byID map[string]*record.Entry) ([]*record.Entry, bool) {
	var chain []*record.Entry
	for cur := e; ; {
		chain = append([]*record.Entry{cur}, chain...)
		if cur.ParentResolution == nil {
			return nil, false
		}
		switch *cur.ParentResolution {
		case record.ResolutionRoot:
			return chain, true
		case record.ResolutionResolved:
			next := byID[*cur.ParentCallID]
			if next == nil || len(chain) > len(byID) {
				return nil, false
			}
			cur = next
		default:
			return nil, false
		}
	}
}
