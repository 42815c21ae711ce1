package store_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// writerProcess re-executes this test binary as a writer (see TestMain).
type writerProcess struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	acks []string
	done chan struct{}
}

func startWriter(dir, prefix string, count int, env ...string) *writerProcess {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		helperDirEnv+"="+dir, helperPrefixEnv+"="+prefix, fmt.Sprintf("%s=%d", helperCountEnv, count))
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	cmd.Stderr = GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	w := &writerProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.mu.Lock()
			w.acks = append(w.acks, sc.Text())
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writerProcess) acked() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.acks...)
}

// expectIntactFile checks that every line of the rollout's JSONL parses and
// ends with a newline.
func expectIntactFile(path string) {
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	Expect(data).To(HaveSuffix("\n"), "no torn trailing line")
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		_, err := record.ParseLine(line)
		Expect(err).NotTo(HaveOccurred(), "line %d", i)
	}
}

var _ = Describe("file store durability", func() {
	var (
		ctx context.Context
		dir string
	)
	BeforeEach(func() {
		ctx = context.Background()
		dir = GinkgoT().TempDir()
	})

	DescribeTable("keeps every acknowledged record when writer processes are SIGKILLed at random points",
		func(env []string) {
			rng := rand.New(rand.NewPCG(uint64(GinkgoRandomSeed()), 7))
			acked, intents := map[string]bool{}, map[string]bool{}
			for round := range 4 {
				w := startWriter(dir, fmt.Sprintf("round%d", round), 0, env...)
				// Let it acknowledge a random number of records, then kill it
				// wherever it happens to be.
				target := 3 + rng.IntN(25)
				Eventually(func() int { return len(w.acked()) }).WithTimeout(20 * time.Second).
					WithPolling(time.Millisecond).Should(BeNumerically(">=", target))
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				Expect(w.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
				<-w.done
				_ = w.cmd.Wait()
				for _, c := range w.acked() {
					if call, ok := strings.CutPrefix(c, "intent "); ok {
						intents[call] = true
					} else {
						acked[c] = true
					}
				}
			}
			s, err := store.NewFileStore(dir)
			Expect(err).NotTo(HaveOccurred())
			snap, err := s.Freeze(ctx, helperRollout)
			Expect(err).NotTo(HaveOccurred())
			got := map[string]*record.Entry{}
			for _, e := range snap.Entries {
				Expect(got).NotTo(HaveKey(e.ModelCallID), "each record exactly once")
				got[e.ModelCallID] = e
			}
			for c := range acked {
				Expect(got).To(HaveKey(c), "acknowledged record %s lost", c)
				Expect(canonical(got[c])).To(Equal(canonical(helperEntry(c))))
			}
			Expect(snap.Version).To(Equal(len(snap.Entries)+1), "one version per line plus the freeze, whatever the state file lagged")
			expectIntactFile(filepath.Join(dir, helperRollout+".tokens.jsonl"))
			written, err := os.ReadFile(filepath.Join(dir, helperRollout+".tokens.intents"))
			Expect(err).NotTo(HaveOccurred())
			onDisk := map[string]bool{}
			for _, l := range strings.Split(strings.TrimSuffix(string(written), "\n"), "\n") {
				onDisk[l] = true
			}
			if env != nil {
				Expect(intents).NotTo(BeEmpty(), "the writer printed the intents it wrote ahead")
			}
			for c := range intents {
				Expect(onDisk).To(HaveKey(c), "an intent written before the kill is lost: %s", c)
			}
		},
		Entry("intents made durable by BeginCall", nil),
		Entry("intents written ahead (WriteIntent), made durable with the record", []string{helperAheadEnv + "=1"}),
	)

	It("serialises two writer processes on one rollout: intact file, every record exactly once", func() {
		const perWriter = 40
		a := startWriter(dir, "alpha", perWriter)
		b := startWriter(dir, "beta", perWriter)
		for _, w := range []*writerProcess{a, b} {
			<-w.done
			Expect(w.cmd.Wait()).To(Succeed())
			Expect(w.acked()).To(HaveLen(2 * perWriter))
		}
		s, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		snap, err := s.Freeze(ctx, helperRollout)
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Incomplete).To(BeFalse())
		seen := map[string]int{}
		for _, e := range snap.Entries {
			seen[e.ModelCallID]++
			Expect(canonical(e)).To(Equal(canonical(helperEntry(e.ModelCallID))))
		}
		Expect(seen).To(HaveLen(2*perWriter + 7))
		for c, n := range seen {
			Expect(n).To(Equal(1), c)
		}
		Expect(snap.Version).To(Equal(len(snap.Entries) + 1))
		expectIntactFile(filepath.Join(dir, helperRollout+".tokens.jsonl"))
	})
})

var _ = Describe("file store repair and damage", func() {
	var (
		ctx   context.Context
		dir   string
		s     *store.FileStore
		jsonl string
	)
	BeforeEach(func() {
		ctx = context.Background()
		dir = GinkgoT().TempDir()
		var err error
		s, err = store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		jsonl = filepath.Join(dir, "r.tokens.jsonl")
		Expect(s.Put(ctx, newEntry("r", "a"))).To(Succeed())
		Expect(s.Put(ctx, newEntry("r", "b"))).To(Succeed())
	})
	appendRaw := func(b []byte) {
		f, err := os.OpenFile(jsonl, os.O_WRONLY|os.O_APPEND, 0)
		Expect(err).NotTo(HaveOccurred())
		_, err = f.Write(b)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Close()).To(Succeed())
	}
	line := func(e *record.Entry) []byte {
		b, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		return append(b, '\n')
	}

	It("truncates a torn trailing line on the next put and keeps going", func() {
		torn := line(newEntry("r", "c"))
		appendRaw(torn[:len(torn)/2])
		entries, err := s.ReadEntries(ctx, "r")
		Expect(err).NotTo(HaveOccurred(), "a reader skips the unacknowledged torn tail")
		Expect(entries).To(HaveLen(2))
		Expect(s.Put(ctx, newEntry("r", "c"))).To(Succeed())
		snap, err := s.Freeze(ctx, "r")
		Expect(err).NotTo(HaveOccurred())
		Expect(callIDs(snap)).To(Equal([]string{"a", "b", "c"}))
		Expect(snap.Version).To(Equal(4))
		expectIntactFile(jsonl)
	})

	It("fails a freeze on a corrupt middle line and changes nothing", func() {
		appendRaw([]byte("{\"rollout_id\": \"r\", \"model_ca\n"))
		appendRaw(line(newEntry("r", "c")))
		before, err := os.ReadFile(jsonl)
		Expect(err).NotTo(HaveOccurred())
		_, err = s.State(ctx, "r")
		Expect(err).To(MatchError(store.ErrCorrupt), "State reports the damage too")
		_, err = s.Freeze(ctx, "r")
		Expect(err).To(MatchError(store.ErrCorrupt))
		Expect(s.Put(ctx, newEntry("r", "d"))).To(MatchError(store.ErrCorrupt))
		after, err := os.ReadFile(jsonl)
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(Equal(before))
		fresh, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		_, err = fresh.Freeze(ctx, "r")
		Expect(err).To(MatchError(store.ErrCorrupt))
		Expect(s.Close()).To(Succeed())
		if raw, err := os.ReadFile(filepath.Join(dir, "r.tokens.state.json")); err == nil {
			st, err := store.ParseState(raw)
			Expect(err).NotTo(HaveOccurred())
			Expect(st.Frozen).To(BeFalse())
		}
	})

	It("refuses a line of a newer schema loudly, before freezing", func() {
		b := bytes.Replace(line(newEntry("r", "c")), []byte(`"schema_version":5`), []byte(`"schema_version":6`), 1)
		appendRaw(b)
		_, err := s.Freeze(ctx, "r")
		Expect(err).To(MatchError(record.ErrSchemaTooNew))
		Expect(err).To(MatchError(store.ErrCorrupt))
		st, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		_, err = st.ReadEntries(ctx, "r")
		Expect(err).To(MatchError(record.ErrSchemaTooNew))
	})

	It("reports a null log-prob line (Gym's NaN) as unreadable", func() {
		b := bytes.Replace(line(newEntry("r", "c")), []byte(`"generation_log_probs":[-0.25`), []byte(`"generation_log_probs":[null`), 1)
		Expect(b).To(ContainSubstring("[null"))
		appendRaw(b)
		_, err := s.Freeze(ctx, "r")
		Expect(err).To(MatchError(record.ErrInvalid))
	})

	It("recovers lines whose state write was lost, one version each", func() {
		Expect(s.Close()).To(Succeed())
		appendRaw(line(newEntry("r", "c")))
		appendRaw([]byte("\n"))
		appendRaw(line(newEntry("r", "d")))
		fresh, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		st, err := fresh.State(ctx, "r")
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Version).To(Equal(4))
		snap, err := fresh.Freeze(ctx, "r")
		Expect(err).NotTo(HaveOccurred())
		Expect(callIDs(snap)).To(Equal([]string{"a", "b", "c", "d"}))
		Expect(snap.Version).To(Equal(5))
	})

	It("records a conflicting durable payload found in the tail as incomplete", func() {
		Expect(s.Close()).To(Succeed())
		appendRaw(line(newEntry("r", "a", 4, 4)))
		fresh, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		_, err = fresh.Freeze(ctx, "r")
		Expect(err).To(MatchError(store.ErrConflict))
		st, err := fresh.IsIncomplete(ctx, "r")
		Expect(err).NotTo(HaveOccurred())
		Expect(st).To(BeTrue())
	})

	It("rejects an index offset beyond the file", func() {
		Expect(s.Close()).To(Succeed())
		Expect(os.Truncate(jsonl, 10)).To(Succeed())
		fresh, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(fresh.Put(ctx, newEntry("r", "x"))).To(MatchError(store.ErrCorrupt))
	})

	It("re-indexes a legacy state without counting recovered lines", func() {
		Expect(s.Close()).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "r.tokens.state.json"),
			[]byte(`{"frozen":false,"incomplete":false,"snapshot_id":"","version":7}`+"\n"), 0o600)).To(Succeed())
		fresh, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(fresh.Put(ctx, newEntry("r", "a"))).To(Succeed(), "identical re-put after re-indexing")
		st, err := fresh.State(ctx, "r")
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Version).To(Equal(7))
		Expect(st.EntryDigests).To(HaveLen(2))
		Expect(st.Legacy).To(BeFalse())
	})

	It("refuses a state file that is not a JSON object", func() {
		Expect(s.Close()).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "r.tokens.state.json"), []byte("[1,2]\n"), 0o600)).To(Succeed())
		fresh, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		_, err = fresh.Freeze(ctx, "r")
		Expect(err).To(MatchError(store.ErrCorrupt))
	})

	It("preserves unknown state keys such as refusals and tolerates cancel lines", func() {
		Expect(s.Close()).To(Succeed())
		statePath := filepath.Join(dir, "r.tokens.state.json")
		raw, err := os.ReadFile(statePath)
		Expect(err).NotTo(HaveOccurred())
		refusals := `"refusals":[{"code":"too_long","created_at":1795943062.5,"model_call_id":"z"}],`
		raw = bytes.Replace(raw, []byte(`"retired"`), []byte(refusals+`"retired"`), 1)
		Expect(os.WriteFile(statePath, raw, 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "r.tokens.intents"), []byte("a\nb\nz\n-z\n"), 0o644)).To(Succeed())

		fresh, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(fresh.MarkIncomplete(ctx, "r", "q")).To(Succeed())
		snap, err := fresh.Freeze(ctx, "r")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Incomplete).To(BeTrue()) // marked, not because of z
		Expect(fresh.Drop(ctx, "r", snap.SnapshotID, snap.Version)).To(BeTrue())
		after, err := os.ReadFile(statePath)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(after)).To(ContainSubstring(refusals))
	})

	It("does not count a cancelled intent as dangling", func() {
		Expect(os.WriteFile(filepath.Join(dir, "r.tokens.intents"), []byte("a\nb\nz\n-z\n"), 0o644)).To(Succeed())
		snap, err := s.Freeze(ctx, "r")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Incomplete).To(BeFalse())
	})

	It("leaves a lazily indexed directory that a fresh reader sees identically", func() {
		for i := range 5 {
			Expect(s.Put(ctx, newEntry("r", fmt.Sprintf("x%d", i)))).To(Succeed())
		}
		mine, err := s.State(ctx, "r")
		Expect(err).NotTo(HaveOccurred())
		Expect(mine.Version).To(Equal(7))
		fresh, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		theirs, err := fresh.State(ctx, "r")
		Expect(err).NotTo(HaveOccurred())
		Expect(stateAsJSON(theirs)).To(Equal(stateAsJSON(mine)))

		By("after Close the state file itself is current, as Gym would have left it")
		Expect(s.Close()).To(Succeed())
		raw, err := os.ReadFile(filepath.Join(dir, "r.tokens.state.json"))
		Expect(err).NotTo(HaveOccurred())
		onDisk, err := store.ParseState(raw)
		Expect(err).NotTo(HaveOccurred())
		Expect(stateAsJSON(onDisk)).To(Equal(stateAsJSON(mine)))
	})

	It("lists rollouts from the files and ignores temp and foreign files", func() {
		Expect(s.BeginCall(ctx, "only-intent", "c")).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, ".tokens-state-123"), nil, 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o600)).To(Succeed())
		ids, err := s.Rollouts(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(ids).To(Equal([]string{"only-intent", "r"}))
	})

	It("refuses a directory path that is a file", func() {
		f := filepath.Join(dir, "plain")
		Expect(os.WriteFile(f, nil, 0o600)).To(Succeed())
		_, err := store.NewFileStore(f)
		Expect(err).To(HaveOccurred())
		_, err = store.NewFileStore("")
		Expect(err).To(HaveOccurred())
		Expect(strings.Contains(err.Error(), "empty")).To(BeTrue())
	})
})
