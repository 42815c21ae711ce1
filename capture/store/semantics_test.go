package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

var snapshotIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

type storeKind struct {
	name string
	open func(dir string) testStore
}

var storeKinds = []storeKind{
	{"file store (lazy state)", func(dir string) testStore {
		s, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		return s
	}},
	{"file store (state every put)", func(dir string) testStore {
		s, err := store.NewFileStore(dir, store.WithStateWriteEveryPut())
		Expect(err).NotTo(HaveOccurred())
		return s
	}},
	{"memory store", func(string) testStore { return store.NewMemoryStore() }},
}

func callIDs(snap *store.Snapshot) []string {
	out := make([]string, 0, len(snap.Entries))
	for _, e := range snap.Entries {
		out = append(out, e.ModelCallID)
	}
	return out
}

func canonical(e *record.Entry) string {
	b, err := e.MarshalCanonical()
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

var _ = Describe("store semantics", func() {
	for _, kind := range storeKinds {
		Context(kind.name, func() {
			var (
				ctx context.Context
				dir string
				s   testStore
			)
			BeforeEach(func() {
				ctx = context.Background()
				dir = GinkgoT().TempDir()
				s = kind.open(dir)
				DeferCleanup(func() { Expect(s.Close()).To(Succeed()) })
			})

			// A large line's digest is computed beside its write and sync
			// (the file store); every size indexes the digest of its bytes.
			DescribeTable("indexes each line's entry digest, whatever its size",
				func(tokens int) {
					gen := make([]int, tokens)
					for i := range gen {
						gen[i] = 1000 + i
					}
					e := newEntry("r-size", "c1", gen...)
					Expect(len(canonical(e))).To(BeNumerically(">", 8*tokens), "the line is as large as the entry says")
					Expect(s.Put(ctx, e)).To(Succeed())
					st, err := s.State(ctx, "r-size")
					Expect(err).NotTo(HaveOccurred())
					Expect(st.EntryDigests).To(HaveKeyWithValue("c1", record.EntryDigest([]byte(canonical(e)))))
					Expect(s.Put(ctx, newEntry("r-size", "c1", gen...))).To(Succeed(), "an identical re-put")
					Expect(s.Put(ctx, newEntry("r-size", "c1", gen[:tokens-1]...))).To(MatchError(store.ErrConflict))
				},
				Entry("a small line", 3),
				Entry("a line hashed beside its sync", 20000),
			)

			It("follows the worked example's version steps and lifecycle errors", func() {
				Expect(s.BeginCall(ctx, "r-1", "c1")).To(Succeed())
				Expect(s.Put(ctx, newEntry("r-1", "c1"))).To(Succeed())
				st, err := s.State(ctx, "r-1")
				Expect(err).NotTo(HaveOccurred())
				Expect(st.Version).To(Equal(1))
				Expect(st.EntryDigests).To(HaveKey("c1"))

				By("an identical re-put changes nothing")
				Expect(s.Put(ctx, newEntry("r-1", "c1"))).To(Succeed())
				st, _ = s.State(ctx, "r-1")
				Expect(st.Version).To(Equal(1))

				By("a conflicting re-put fails, marks incomplete and bumps the version")
				err = s.Put(ctx, newEntry("r-1", "c1", 1, 2))
				Expect(err).To(MatchError(store.ErrConflict))
				st, _ = s.State(ctx, "r-1")
				Expect(st.Incomplete).To(BeTrue())
				Expect(st.Version).To(Equal(2))
				incomplete, err := s.IsIncomplete(ctx, "r-1")
				Expect(err).NotTo(HaveOccurred())
				Expect(incomplete).To(BeTrue())

				By("freeze mints a snapshot; a second freeze returns the same one")
				snap, err := s.Freeze(ctx, "r-1")
				Expect(err).NotTo(HaveOccurred())
				Expect(snap.Version).To(Equal(3))
				Expect(snap.Incomplete).To(BeTrue())
				Expect(snap.SnapshotID).To(MatchRegexp(snapshotIDPattern.String()))
				Expect(callIDs(snap)).To(Equal([]string{"c1"}))
				Expect(canonical(snap.Entries[0])).To(Equal(canonical(newEntry("r-1", "c1"))))
				again, err := s.Freeze(ctx, "r-1")
				Expect(err).NotTo(HaveOccurred())
				Expect(again.SnapshotID).To(Equal(snap.SnapshotID))
				Expect(again.Version).To(Equal(3))

				By("writes after the freeze fail as frozen")
				Expect(s.Put(ctx, newEntry("r-1", "c2"))).To(MatchError(store.ErrFrozen))
				Expect(s.BeginCall(ctx, "r-1", "c3")).To(MatchError(store.ErrFrozen))

				By("a late loss still counts after the freeze")
				Expect(s.MarkIncomplete(ctx, "r-1", "c3")).To(Succeed())
				st, _ = s.State(ctx, "r-1")
				Expect(st.Version).To(Equal(4))

				By("only the exact snapshot id and version retire")
				ok, err := s.Drop(ctx, "r-1", snap.SnapshotID, 3)
				Expect(err).NotTo(HaveOccurred())
				Expect(ok).To(BeFalse())
				ok, err = s.Drop(ctx, "r-1", "00000000000000000000000000000000", 4)
				Expect(err).NotTo(HaveOccurred())
				Expect(ok).To(BeFalse())
				ok, err = s.Drop(ctx, "r-1", snap.SnapshotID, 4)
				Expect(err).NotTo(HaveOccurred())
				Expect(ok).To(BeTrue())
				st, _ = s.State(ctx, "r-1")
				Expect(st.Retired).To(BeTrue())
				Expect(st.Frozen).To(BeTrue())
				Expect(st.Version).To(Equal(4))
				Expect(st.EntryDigests).To(BeEmpty())
				Expect(st.IndexedSize).To(BeZero())
				Expect(st.SnapshotID).To(Equal(snap.SnapshotID))

				By("the tombstone refuses everything with the distinct retired error")
				for _, err := range []error{
					s.Put(ctx, newEntry("r-1", "c1")),
					s.BeginCall(ctx, "r-1", "c9"),
					s.MarkIncomplete(ctx, "r-1", "c9"),
				} {
					Expect(err).To(MatchError(store.ErrRetired))
					Expect(errors.Is(err, store.ErrFrozen)).To(BeFalse())
				}
				_, err = s.Freeze(ctx, "r-1")
				Expect(err).To(MatchError(store.ErrRetired))
				ok, err = s.Drop(ctx, "r-1", snap.SnapshotID, 4)
				Expect(err).NotTo(HaveOccurred())
				Expect(ok).To(BeFalse(), "a retired rollout cannot be retired twice")
			})

			It("reports a dangling intent at freeze but not in the incomplete flag", func() {
				for _, c := range []string{"a", "b", "c"} {
					Expect(s.BeginCall(ctx, "r-2", c)).To(Succeed())
				}
				Expect(s.Put(ctx, newEntry("r-2", "a"))).To(Succeed())
				Expect(s.Put(ctx, newEntry("r-2", "b"))).To(Succeed())
				incomplete, err := s.IsIncomplete(ctx, "r-2")
				Expect(err).NotTo(HaveOccurred())
				Expect(incomplete).To(BeFalse())
				snap, err := s.Freeze(ctx, "r-2")
				Expect(err).NotTo(HaveOccurred())
				Expect(snap.Incomplete).To(BeTrue())
				Expect(snap.Version).To(Equal(3))
				Expect(callIDs(snap)).To(Equal([]string{"a", "b"}))
			})

			It("freezes a rollout that has nothing as an empty frozen snapshot at version 1", func() {
				snap, err := s.Freeze(ctx, "empty")
				Expect(err).NotTo(HaveOccurred())
				Expect(snap.Entries).To(BeEmpty())
				Expect(snap.Incomplete).To(BeFalse())
				Expect(snap.Version).To(Equal(1))
				Expect(snap.SnapshotID).To(MatchRegexp(snapshotIDPattern.String()))
			})

			It("lets delete clear a rollout so its id starts over", func() {
				Expect(s.Put(ctx, newEntry("r-3", "a"))).To(Succeed())
				_, err := s.Freeze(ctx, "r-3")
				Expect(err).NotTo(HaveOccurred())
				Expect(s.Delete(ctx, "r-3")).To(Succeed())
				Expect(s.Put(ctx, newEntry("r-3", "b"))).To(Succeed())
				snap, err := s.Freeze(ctx, "r-3")
				Expect(err).NotTo(HaveOccurred())
				Expect(callIDs(snap)).To(Equal([]string{"b"}))
				Expect(snap.Version).To(Equal(2))
			})

			It("sweeps only retired tombstones older than the cutoff", func() {
				Expect(s.Put(ctx, newEntry("old", "a"))).To(Succeed())
				snap, err := s.Freeze(ctx, "old")
				Expect(err).NotTo(HaveOccurred())
				Expect(s.Drop(ctx, "old", snap.SnapshotID, snap.Version)).To(BeTrue())
				Expect(s.Put(ctx, newEntry("live", "a"))).To(Succeed())
				_, err = s.Freeze(ctx, "frozen-only")
				Expect(err).NotTo(HaveOccurred())

				n, err := s.SweepRetired(ctx, time.Hour)
				Expect(err).NotTo(HaveOccurred())
				Expect(n).To(BeZero())
				n, err = s.SweepRetired(ctx, 0)
				Expect(err).NotTo(HaveOccurred())
				Expect(n).To(Equal(1))
				ids, err := s.Rollouts(ctx)
				Expect(err).NotTo(HaveOccurred())
				Expect(ids).To(Equal([]string{"frozen-only", "live"}))
				By("after the sweep the id is fresh again")
				Expect(s.Put(ctx, newEntry("old", "z"))).To(Succeed())
				st, err := s.State(ctx, "old")
				Expect(err).NotTo(HaveOccurred())
				Expect(st.Retired).To(BeFalse())
				Expect(st.Version).To(Equal(1))
			})

			It("reads committed entries back in put order without freezing", func() {
				for i := range 5 {
					Expect(s.Put(ctx, newEntry("r-4", fmt.Sprintf("c%d", i), i, i+1))).To(Succeed())
				}
				got, err := s.ReadEntries(ctx, "r-4")
				Expect(err).NotTo(HaveOccurred())
				Expect(got).To(HaveLen(5))
				for i, e := range got {
					Expect(canonical(e)).To(Equal(canonical(newEntry("r-4", fmt.Sprintf("c%d", i), i, i+1))))
				}
				st, _ := s.State(ctx, "r-4")
				Expect(st.Frozen).To(BeFalse())
				Expect(s.Put(ctx, newEntry("r-4", "c9"))).To(Succeed())
			})

			DescribeTable("rejects a rollout id that could escape the directory, touching nothing",
				func(id string) {
					e := newEntry(id, "c1")
					Expect(s.Put(ctx, e)).To(MatchError(store.ErrInvalidRolloutID))
					Expect(s.BeginCall(ctx, id, "c1")).To(MatchError(store.ErrInvalidRolloutID))
					Expect(s.MarkIncomplete(ctx, id, "c1")).To(MatchError(store.ErrInvalidRolloutID))
					_, err := s.Freeze(ctx, id)
					Expect(err).To(MatchError(store.ErrInvalidRolloutID))
					_, err = s.Drop(ctx, id, "x", 1)
					Expect(err).To(MatchError(store.ErrInvalidRolloutID))
					Expect(s.Delete(ctx, id)).To(MatchError(store.ErrInvalidRolloutID))
					_, err = s.ReadEntries(ctx, id)
					Expect(err).To(MatchError(store.ErrInvalidRolloutID))
					_, err = s.State(ctx, id)
					Expect(err).To(MatchError(store.ErrInvalidRolloutID))
					_, err = s.IsIncomplete(ctx, id)
					Expect(err).To(MatchError(store.ErrInvalidRolloutID))
					Expect(dirNames(dir)).To(BeEmpty())
					Expect(os.Stat(filepath.Join(filepath.Dir(dir), "x.tokens.lock"))).Error().To(HaveOccurred())
				},
				Entry("parent directory", "../x"),
				Entry("slash", "a/b"),
				Entry("empty", ""),
				Entry("NUL byte", "a\x00b"),
				Entry("space", "a b"),
				Entry("non-ASCII letter", "é"),
				Entry("backslash", `a\b`),
			)

			It("accepts the store rule's leading dot and dash, as Gym does", func() {
				Expect(s.Put(ctx, newEntry(".hidden-0", "c1"))).To(Succeed())
				Expect(s.Put(ctx, newEntry("-x_y.z", "c1"))).To(Succeed())
			})

			DescribeTable("refuses an invalid record with a clear error and writes nothing",
				func(mutate func(*record.Entry), want error) {
					e := newEntry("bad", "c1")
					mutate(e)
					err := s.Put(ctx, e)
					Expect(err).To(MatchError(want))
					st, err := s.State(ctx, "bad")
					Expect(err).NotTo(HaveOccurred())
					Expect(st.Version).To(BeZero())
					Expect(st.EntryDigests).To(BeEmpty())
					Expect(filepath.Join(dir, "bad.tokens.jsonl")).NotTo(BeAnExistingFile())
				},
				Entry("NaN log-prob", func(e *record.Entry) { e.GenerationLogProbs[1] = math.NaN() }, record.ErrInvalid),
				Entry("infinite log-prob", func(e *record.Entry) { e.GenerationLogProbs[0] = math.Inf(-1) }, record.ErrInvalid),
				Entry("log-prob count differs", func(e *record.Entry) { e.GenerationLogProbs = e.GenerationLogProbs[:1] }, record.ErrInvalid),
				Entry("newer schema", func(e *record.Entry) { e.SchemaVersion = record.SchemaVersion + 1 }, record.ErrSchemaTooNew),
				Entry("older schema", func(e *record.Entry) { e.SchemaVersion = 1 }, record.ErrSchemaTooOld),
				Entry("root with a parent", func(e *record.Entry) { e.ParentCallID = ptr("p") }, record.ErrInvalid),
			)

			It("refuses call ids that would split an intents line", func() {
				Expect(s.BeginCall(ctx, "r-5", "a\nb")).To(MatchError(store.ErrInvalidCallID))
				Expect(s.MarkIncomplete(ctx, "r-5", "a\rb")).To(MatchError(store.ErrInvalidCallID))
				Expect(filepath.Join(dir, "r-5.tokens.intents")).NotTo(BeAnExistingFile())
			})

			It("writes an empty call id of mark_incomplete as Gym does", func() {
				Expect(s.MarkIncomplete(ctx, "r-6", "")).To(Succeed())
				snap, err := s.Freeze(ctx, "r-6")
				Expect(err).NotTo(HaveOccurred())
				Expect(snap.Incomplete).To(BeTrue())
				Expect(snap.Version).To(Equal(2))
			})

			It("stops on a cancelled context", func() {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				Expect(s.Put(cctx, newEntry("r-7", "c1"))).To(MatchError(context.Canceled))
				_, err := s.Freeze(cctx, "r-7")
				Expect(err).To(MatchError(context.Canceled))
			})

			It("serialises concurrent goroutines: every record exactly once, one version per record", func() {
				const writers, perWriter = 8, 12
				var wg sync.WaitGroup
				errs := make(chan error, writers*perWriter*2)
				for w := range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range perWriter {
							call := fmt.Sprintf("w%d-c%d", w, i)
							if err := s.BeginCall(ctx, "shared", call); err != nil {
								errs <- err
							}
							if err := s.Put(ctx, newEntry("shared", call, w, i)); err != nil {
								errs <- err
							}
							// every writer also re-puts its own record: idempotent
							if err := s.Put(ctx, newEntry("shared", call, w, i)); err != nil {
								errs <- err
							}
							if err := s.Put(ctx, newEntry(fmt.Sprintf("own-%d", w), call)); err != nil {
								errs <- err
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					Expect(err).NotTo(HaveOccurred())
				}
				snap, err := s.Freeze(ctx, "shared")
				Expect(err).NotTo(HaveOccurred())
				Expect(snap.Entries).To(HaveLen(writers * perWriter))
				Expect(snap.Incomplete).To(BeFalse())
				Expect(snap.Version).To(Equal(writers*perWriter + 1))
				seen := map[string]bool{}
				for _, e := range snap.Entries {
					Expect(seen).NotTo(HaveKey(e.ModelCallID))
					seen[e.ModelCallID] = true
				}
				for w := range writers {
					got, err := s.ReadEntries(ctx, fmt.Sprintf("own-%d", w))
					Expect(err).NotTo(HaveOccurred())
					Expect(got).To(HaveLen(perWriter))
				}
			})
		})
	}
})

var _ = Describe("memory store bookkeeping", func() {
	ctx := context.Background()

	It("forgets rollouts it holds nothing for: deleted ids and reads of unknown ids", func() {
		m := store.NewMemoryStore()
		Expect(m.Put(ctx, newEntry("kept", "c1"))).To(Succeed())
		Expect(m.Put(ctx, newEntry("gone", "c1"))).To(Succeed())
		Expect(m.TrackedRollouts()).To(Equal(2))

		Expect(m.Delete(ctx, "gone")).To(Succeed())
		_, err := m.ReadEntries(ctx, "never-written")
		Expect(err).NotTo(HaveOccurred())
		_, err = m.State(ctx, "never-written-2")
		Expect(err).NotTo(HaveOccurred())
		dropped, err := m.Drop(ctx, "never-written-3", "x", 1)
		Expect(err).NotTo(HaveOccurred())
		Expect(dropped).To(BeFalse())
		Expect(m.TrackedRollouts()).To(Equal(1), "only the rollout that still holds a record is tracked")

		// A deleted id starts over from version 0.
		Expect(m.Put(ctx, newEntry("gone", "c2"))).To(Succeed())
		st, err := m.State(ctx, "gone")
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Version).To(Equal(1))
		ids, err := m.Rollouts(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(ids).To(Equal([]string{"gone", "kept"}))
	})
})
