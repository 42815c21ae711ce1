package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("capbench verdict and explain", func() {
	It("prints one verdict line per rollout, in id order, without retiring anything", func(ctx SpecContext) {
		dir := filepath.Join(copyFixture("gym-consumer/03-retry-middle"), "capture")
		out, err := capbench(ctx, "verdict", "--capture-dir", dir)
		Expect(err).NotTo(HaveOccurred())
		sc := bufio.NewScanner(strings.NewReader(out))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		var lines []map[string]any
		for sc.Scan() {
			var m map[string]any
			Expect(json.Unmarshal(sc.Bytes(), &m)).To(Succeed())
			lines = append(lines, m)
		}
		Expect(lines).To(HaveLen(1))
		Expect(lines[0]).To(HaveKeyWithValue("rollout_id", "3-0"))
		Expect(lines[0]).To(HaveKeyWithValue("mask_sample", false))
		metrics := lines[0]["metrics"].(map[string]any)
		Expect(metrics).To(HaveKeyWithValue("n_calls", BeNumerically("==", 4)))
		Expect(metrics).To(HaveKeyWithValue("quarantined_calls", BeNumerically("==", 1)))
		Expect(filepath.Join(dir, "3-0.tokens.jsonl")).To(BeARegularFile(), "the records must still be there")
	})

	It("finalizes rollout records, writes them and retires only what was consumed", func(ctx SpecContext) {
		root := copyFixture("gym-rollouts")
		out := filepath.Join(GinkgoT().TempDir(), "out.jsonl")
		_, err := capbench(ctx, "verdict", "--capture-dir", filepath.Join(root, "capture"),
			"--rollouts", filepath.Join(root, "inputs.jsonl"), "--out", out)
		Expect(err).NotTo(HaveOccurred())
		got := readJSONL(out)
		want := readJSONL(filepath.Join(root, "rollouts.jsonl"))
		Expect(got).To(HaveLen(len(want)))
		for i := range want {
			fixture := got[i]["_fixture"].(map[string]any) // only the inputs carry it
			delete(got[i], "_fixture")
			delete(want[i], "_fixture")
			if fixture["finalize"] == true {
				Expect(got[i]).To(Equal(want[i]), "row %d (%s) differs from Gym's finalized record", i, fixture["case"])
				continue
			}
			// Gym's collector skips rows that do not take part in capture; the
			// CLI finalizes every row it is given, so an uncaptured row is masked.
			Expect(got[i]).To(HaveKeyWithValue("mask_sample", true))
		}
		Expect(filepath.Join(root, "capture", "101-0.tokens.jsonl")).NotTo(BeAnExistingFile(), "a consumed, written, unmasked snapshot is retired")
		Expect(filepath.Join(root, "capture", "102-0.tokens.jsonl")).To(BeARegularFile(), "masked evidence is kept")
	})

	It("explains in plain words why a rollout is or is not masked", func(ctx SpecContext) {
		dir := filepath.Join(copyFixture("gym-consumer/03-retry-middle"), "capture")
		out, err := capbench(ctx, "explain", "--capture-dir", dir, "3-0")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("quarantined retries"))
		Expect(out).To(ContainSubstring("Not masked"))
	})

	DescribeTable("refuses bad invocations with a message that says what to fix",
		func(ctx SpecContext, args []string, want string) {
			_, err := capbench(ctx, args...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("verdict without a directory", []string{"verdict"}, "capture-dir"),
		Entry("explain without a rollout id", []string{"explain", "--capture-dir", "."}, "arg"),
		Entry("verdict with --rollouts but no --out", []string{"verdict", "--capture-dir", ".", "--rollouts", "x.jsonl"}, "--out"),
		Entry("verdict with a percentage for a fraction", []string{"verdict", "--capture-dir", ".", "--rollouts", "x.jsonl", "--out", "y.jsonl", "--max-mask-fraction", "5"}, "--max-mask-fraction 5: want a fraction in [0, 1]"),
		Entry("verdict with a negative fraction", []string{"verdict", "--capture-dir", ".", "--rollouts", "x.jsonl", "--out", "y.jsonl", "--max-mask-fraction=-0.1"}, "want a fraction in [0, 1]"),
	)
})

func readJSONL(path string) []map[string]any {
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var rows []map[string]any
	for sc.Scan() {
		var m map[string]any
		Expect(json.Unmarshal(sc.Bytes(), &m)).To(Succeed())
		rows = append(rows, m)
	}
	Expect(sc.Err()).NotTo(HaveOccurred())
	return rows
}
