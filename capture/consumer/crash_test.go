package consumer_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/store"
)

// Environment of the re-executed test binary acting as a finalizing
// process that kills itself (SIGKILL, as kill -9) at one point.
const (
	crashDirEnv    = "CAPBENCH_FINALIZE_CRASH_DIR"
	crashKillAtEnv = "CAPBENCH_FINALIZE_KILL_AT" // "<op>:<n>", op freeze|drop|dropped
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		os.Exit(runFinalizeProcess(dir, os.Getenv(crashKillAtEnv)))
	}
	os.Exit(m.Run())
}

// killingSource SIGKILLs its own process on the n-th call of one operation:
// before a freeze (the previous record fully done), before a drop (the
// record written, its snapshot not yet retired) or after a drop.
type killingSource struct {
	store.Source
	op      string
	n       int
	freezes atomic.Int32
	drops   atomic.Int32
}

func (k *killingSource) die(op string, count int32) {
	if op == k.op && int(count) == k.n {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

func (k *killingSource) Freeze(ctx context.Context, id string) (*store.Snapshot, error) {
	k.die("freeze", k.freezes.Add(1))
	return k.Source.Freeze(ctx, id)
}

func (k *killingSource) Drop(ctx context.Context, id, snapshotID string, version int) (bool, error) {
	n := k.drops.Add(1)
	k.die("drop", n)
	ok, err := k.Source.Drop(ctx, id, snapshotID, version)
	k.die("dropped", n)
	return ok, err
}

func (k *killingSource) State(ctx context.Context, id string) (store.State, error) {
	return k.Source.(consumer.StateReader).State(ctx, id)
}

// finalizeDir runs what `capbench verdict --rollouts in.jsonl --out
// out.jsonl` runs, over dir's capture, input and output.
func finalizeDir(dir string, wrap func(store.Source) store.Source) (consumer.FinalizeSummary, error) {
	fs, err := store.NewFileStore(filepath.Join(dir, "capture"))
	if err != nil {
		return consumer.FinalizeSummary{}, err
	}
	defer fs.Close()
	in, err := os.Open(filepath.Join(dir, "in.jsonl"))
	if err != nil {
		return consumer.FinalizeSummary{}, err
	}
	recs, err := consumer.ReadRollouts(in)
	in.Close()
	if err != nil {
		return consumer.FinalizeSummary{}, err
	}
	w, done, err := consumer.OpenWriter(filepath.Join(dir, "out.jsonl"))
	if err != nil {
		return consumer.FinalizeSummary{}, err
	}
	var src store.Source = fs
	if wrap != nil {
		src = wrap(fs)
	}
	sum, err := consumer.FinalizeRecords(context.Background(), recs, done, w, src, consumer.DefaultOptions(), nil)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return sum, err
}

func runFinalizeProcess(dir, killAt string) int {
	op, nText, _ := strings.Cut(killAt, ":")
	n, _ := strconv.Atoi(nText)
	_, err := finalizeDir(dir, func(s store.Source) store.Source { return &killingSource{Source: s, op: op, n: n} })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// crashInput writes a capture of n rollouts and their records; every third
// rollout has no records at all, so it is masked and keeps its evidence.
func crashInput(dir string, n int) {
	ctx := context.Background()
	fs, err := store.NewFileStore(filepath.Join(dir, "capture"))
	Expect(err).NotTo(HaveOccurred())
	var lines []string
	for i := range n {
		id := fmt.Sprintf("r-%d", i)
		if i%3 != 2 {
			for _, c := range chainABC() {
				e := entry(c)
				e.RolloutID = id
				Expect(fs.Put(ctx, e)).To(Succeed())
			}
		} else {
			Expect(fs.BeginCall(ctx, id, "lost")).To(Succeed())
		}
		lines = append(lines, fmt.Sprintf(`{"_ng_rollout_id":%q,"reward":%d.5,"response":{"id":"resp-c","output":[{"type":"message","role":"assistant","content":"answer c"}]}}`, id, i))
	}
	Expect(fs.Close()).To(Succeed())
	Expect(os.WriteFile(filepath.Join(dir, "in.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)).To(Succeed())
}

var _ = Describe("finalizing after a crash (kill -9, then rerun)", func() {
	const n = 7
	var reference []map[string]any

	BeforeEach(func() {
		if reference != nil {
			return
		}
		dir := GinkgoT().TempDir()
		crashInput(dir, n)
		sum, err := finalizeDir(dir, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(sum.Records).To(Equal(n))
		b, err := os.ReadFile(filepath.Join(dir, "out.jsonl"))
		Expect(err).NotTo(HaveOccurred())
		reference = jsonLines(b)
	})

	DescribeTable("ends with every input rollout finalized exactly once, as an uninterrupted run would",
		func(killAt string) {
			dir := GinkgoT().TempDir()
			crashInput(dir, n)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashKillAtEnv+"="+killAt)
			err := cmd.Run()
			var exit *exec.ExitError
			Expect(err).To(BeAssignableToTypeOf(exit), "the helper must die, not finish")
			Expect(err.(*exec.ExitError).Sys().(syscall.WaitStatus).Signal()).To(Equal(syscall.SIGKILL))

			sum, err := finalizeDir(dir, nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(sum.Resumed + sum.Records).To(Equal(n))

			b, err := os.ReadFile(filepath.Join(dir, "out.jsonl"))
			Expect(err).NotTo(HaveOccurred())
			got := jsonLines(b)
			Expect(got).To(HaveLen(n))
			for i := range got {
				Expect(generic(got[i])).To(Equal(generic(reference[i])), "record %d", i)
			}
			for i := range n {
				jsonl := filepath.Join(dir, "capture", fmt.Sprintf("r-%d.tokens.jsonl", i))
				if i%3 == 2 {
					Expect(got[i]).To(HaveKeyWithValue("mask_sample", true))
				} else {
					Expect(jsonl).NotTo(BeAnExistingFile(), "r-%d was delivered: its snapshot is retired", i)
				}
			}

			By("a second rerun finds nothing left to do")
			sum, err = finalizeDir(dir, nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(sum).To(Equal(consumer.FinalizeSummary{Resumed: n}))
			b2, err := os.ReadFile(filepath.Join(dir, "out.jsonl"))
			Expect(err).NotTo(HaveOccurred())
			Expect(b2).To(Equal(b))
		},
		Entry("before the first record", "freeze:1"),
		Entry("between records", "freeze:4"),
		Entry("after a record is written, before its retirement", "drop:1"),
		Entry("after a later record is written, before its retirement", "drop:3"),
		Entry("right after a retirement", "dropped:2"),
		Entry("before the last record", "freeze:7"),
	)

	It("cuts an append that never returned (a torn last line) and writes that record once", func() {
		dir := GinkgoT().TempDir()
		crashInput(dir, 3)
		out := filepath.Join(dir, "out.jsonl")
		Expect(os.WriteFile(out, []byte(`{"_ng_rollout_id":"r-0","respo`), 0o644)).To(Succeed())
		sum, err := finalizeDir(dir, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(sum.Records).To(Equal(3))
		b, _ := os.ReadFile(out)
		Expect(jsonLines(b)).To(HaveLen(3))
	})

	It("refuses an --out written from another input, changing nothing", func() {
		dir := GinkgoT().TempDir()
		crashInput(dir, 3)
		out := filepath.Join(dir, "out.jsonl")
		other := `{"_ng_rollout_id":"someone-else"}` + "\n"
		Expect(os.WriteFile(out, []byte(other), 0o644)).To(Succeed())
		_, err := finalizeDir(dir, nil)
		Expect(err).To(MatchError(consumer.ErrOutputMismatch))
		b, _ := os.ReadFile(out)
		Expect(string(b)).To(Equal(other))
		fs, err := store.NewFileStore(filepath.Join(dir, "capture"))
		Expect(err).NotTo(HaveOccurred())
		st, err := fs.State(context.Background(), "r-0")
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Frozen).To(BeFalse(), "nothing was frozen")
	})

	It("refuses input naming a rollout an earlier run retired, instead of masking it", func() {
		dir := GinkgoT().TempDir()
		crashInput(dir, 3)
		_, err := finalizeDir(dir, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.Remove(filepath.Join(dir, "out.jsonl"))).To(Succeed()) // a new --out
		_, err = finalizeDir(dir, nil)
		Expect(err).To(MatchError(consumer.ErrAlreadyFinalized))
		Expect(err.Error()).To(ContainSubstring("rollout r-0"))
		b, _ := os.ReadFile(filepath.Join(dir, "out.jsonl"))
		Expect(b).To(BeEmpty())
	})
})
