package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("capbench verdict and explain", func() {
	It("prints one JSON verdict per rollout with --json, metrics only, without retiring anything", func(ctx SpecContext) {
		dir := filepath.Join(copyFixture("gym-consumer/03-retry-middle"), "capture")
		out, err := capbench(ctx, "verdict", "--capture-dir", dir, "--json")
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
		Expect(lines[0]).NotTo(HaveKey("rebuilt_response"), "the response only when asked")
		Expect(lines[0]).NotTo(HaveKey("output"))

		out, err = capbench(ctx, "verdict", "--capture-dir", dir, "--response")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring(`"rebuilt_response":{`))
	})

	It("prints one short row per rollout by default", func(ctx SpecContext) {
		dir := filepath.Join(copyFixture("gym-consumer/03-retry-middle"), "capture")
		out, err := capbench(ctx, "verdict", "--capture-dir", dir)
		Expect(err).NotTo(HaveOccurred())
		rows := strings.Split(strings.TrimSpace(out), "\n")
		Expect(rows).To(HaveLen(2))
		Expect(strings.Fields(rows[0])).To(Equal([]string{"ROLLOUT", "MASK", "CALLS", "CHAINS", "ATTRIBUTION", "REASON"}))
		Expect(strings.Fields(rows[1])[:4]).To(Equal([]string{"3-0", "kept", "4", "1"}))
		Expect(len(out)).To(BeNumerically("<", 400))
	})

	It("only reads: the directory is byte for byte unchanged and the harness can keep writing", func(ctx SpecContext) {
		dir := filepath.Join(copyFixture("gym-consumer/07-lost-call-dangling-intent"), "capture")
		before := treeFingerprint(dir)
		_, err := capbench(ctx, "verdict", "--capture-dir", dir)
		Expect(err).NotTo(HaveOccurred())
		_, err = capbench(ctx, "verdict", "--capture-dir", dir, "--json", "--response")
		Expect(err).NotTo(HaveOccurred())
		ids, err := os.ReadDir(dir)
		Expect(err).NotTo(HaveOccurred())
		id := strings.SplitN(ids[0].Name(), ".tokens.", 2)[0]
		_, err = capbench(ctx, "explain", "--capture-dir", dir, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(treeFingerprint(dir)).To(Equal(before))
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		st, err := fs.State(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Frozen).To(BeFalse(), "looking must not freeze the rollout (the next call would get 409)")
	})

	DescribeTable("inspection errors exit non-zero and create nothing",
		func(ctx SpecContext, args func(dir string) []string, want string) {
			dir := filepath.Join(copyFixture("gym-consumer/03-retry-middle"), "capture")
			before := treeFingerprint(dir)
			_, err := capbench(ctx, args(dir)...)
			Expect(err).To(MatchError(ContainSubstring(want)))
			Expect(treeFingerprint(dir)).To(Equal(before))
			Expect(filepath.Join(dir, "typo")).NotTo(BeAnExistingFile())
		},
		Entry("verdict on a mistyped directory", func(d string) []string { return []string{"verdict", "--capture-dir", filepath.Join(d, "typo")} }, "no such file or directory"),
		Entry("explain on a mistyped directory", func(d string) []string { return []string{"explain", "--capture-dir", filepath.Join(d, "typo"), "3-0"} }, "no such file or directory"),
		Entry("verdict --rollouts on a mistyped directory", func(d string) []string {
			return []string{"verdict", "--capture-dir", filepath.Join(d, "typo"), "--rollouts", filepath.Join(d, "3-0.tokens.jsonl"), "--out", filepath.Join(d, "..", "o.jsonl")}
		}, "--capture-dir"),
		Entry("explain of an unknown rollout", func(d string) []string { return []string{"explain", "--capture-dir", d, "9-9"} }, "no such rollout"),
		Entry("verdict of an unknown rollout", func(d string) []string { return []string{"verdict", "--capture-dir", d, "9-9"} }, "no such rollout"),
		Entry("an unknown builder", func(d string) []string { return []string{"verdict", "--capture-dir", d, "--builder", "prefix-merging"} }, "--builder: unknown builder"),
		Entry("explain with an unknown builder", func(d string) []string { return []string{"explain", "--capture-dir", d, "--builder", "x", "3-0"} }, "--builder: unknown builder"),
		Entry("an empty directory", func(d string) []string {
			e := filepath.Join(d, "..", "empty")
			Expect(os.Mkdir(e, 0o755)).To(Succeed())
			return []string{"verdict", "--capture-dir", e}
		}, "holds no captured rollouts"),
	)

	It("reports a retired rollout as already finalized, and where its record went", func(ctx SpecContext) {
		root := copyFixture("gym-rollouts")
		capture := filepath.Join(root, "capture")
		out := filepath.Join(root, "rollouts.jsonl") // where capbench run keeps it: next to capture/
		Expect(os.Remove(out)).To(Succeed())
		_, err := capbench(ctx, "verdict", "--capture-dir", capture, "--rollouts", filepath.Join(root, "inputs.jsonl"), "--out", out)
		Expect(err).NotTo(HaveOccurred())
		table, err := capbench(ctx, "verdict", "--capture-dir", capture, "101-0")
		Expect(err).NotTo(HaveOccurred())
		Expect(table).To(ContainSubstring("already finalized"))
		Expect(table).To(ContainSubstring(out))
		Expect(table).NotTo(ContainSubstring("retired\n"))
		_, err = capbench(ctx, "explain", "--capture-dir", capture, "101-0")
		Expect(err).To(MatchError(And(ContainSubstring("already finalized"), ContainSubstring(out))))

		By("explain --rollouts on a finalized record says so instead of judging the rebuilt output")
		text, err := capbench(ctx, "explain", "--capture-dir", capture, "--rollouts", out, "102-0")
		Expect(err).NotTo(HaveOccurred())
		Expect(text).To(ContainSubstring("already finalized"))
		Expect(text).To(ContainSubstring("mask_sample=true"))
	})

	It("finalizing checks the whole input first and never truncates an existing --out", func(ctx SpecContext) {
		root := copyFixture("gym-rollouts")
		capture := filepath.Join(root, "capture")
		raw, err := os.ReadFile(filepath.Join(root, "inputs.jsonl"))
		Expect(err).NotTo(HaveOccurred())
		bad := filepath.Join(root, "bad.jsonl")
		Expect(os.WriteFile(bad, append(raw, []byte("{oops\n")...), 0o644)).To(Succeed())
		before := treeFingerprint(capture)
		out := filepath.Join(root, "out.jsonl")
		_, err = capbench(ctx, "verdict", "--capture-dir", capture, "--rollouts", bad, "--out", out)
		Expect(err).To(MatchError(And(ContainSubstring("line"), ContainSubstring("nothing was finalized"))))
		Expect(treeFingerprint(capture)).To(Equal(before))

		in := filepath.Join(root, "inputs.jsonl")
		_, err = capbench(ctx, "verdict", "--capture-dir", capture, "--rollouts", in, "--out", out)
		Expect(err).NotTo(HaveOccurred())
		first, err := os.ReadFile(out)
		Expect(err).NotTo(HaveOccurred())
		_, err = capbench(ctx, "verdict", "--capture-dir", capture, "--rollouts", in, "--out", out)
		Expect(err).NotTo(HaveOccurred(), "a rerun of a finished run continues with nothing left")
		again, err := os.ReadFile(out)
		Expect(err).NotTo(HaveOccurred())
		Expect(again).To(Equal(first))
		_, err = capbench(ctx, "verdict", "--capture-dir", capture, "--rollouts", in, "--out", in)
		Expect(err).To(MatchError(ContainSubstring("--out must not be the --rollouts file")))
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

// treeFingerprint lists every file below dir with its size, mode, mtime and
// content, so any write shows.
func treeFingerprint(dir string) []string {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %d %v %d", p, fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out = append(out, line)
		return nil
	})
	Expect(err).NotTo(HaveOccurred())
	return out
}

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
