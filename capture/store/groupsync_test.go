package store_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"

	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("group sync", func() {
	It("returns each writer only after a sync that started after its write, with far fewer syncs than writers", func() {
		var writes, syncs atomic.Int64
		var coveredDone atomic.Int64 // the largest write index a finished sync covered
		syncFn := func(*os.File) error {
			covered := writes.Load() // every write counted before the sync starts
			syncs.Add(1)
			time.Sleep(2 * time.Millisecond)
			for {
				cur := coveredDone.Load()
				if covered <= cur || coveredDone.CompareAndSwap(cur, covered) {
					return nil
				}
			}
		}
		g := store.NewGroupSync(syncFn, syncFn, 1)
		const writers, rounds = 64, 5
		var wg sync.WaitGroup
		var early atomic.Int64
		for range writers {
			wg.Go(func() {
				defer GinkgoRecover()
				for range rounds {
					w := writes.Add(1)
					Expect(g.Wait(nil)).To(Succeed())
					if coveredDone.Load() < w {
						early.Add(1)
					}
				}
			})
		}
		wg.Wait()
		Expect(early.Load()).To(BeZero(), "a writer returned before any sync covering its write finished")
		Expect(syncs.Load()).To(BeNumerically("<", writers*rounds/4), "writers share syncs")
	})

	It("gives a failed sync's error to exactly the writers it covered", func() {
		release, started := make(chan struct{}), make(chan struct{})
		boom := errors.New("writeback failed")
		alone := func(*os.File) error { close(started); <-release; return nil }
		group := func(*os.File) error { return boom }
		g := store.NewGroupSync(group, alone, 1)
		first := make(chan error, 1)
		go func() { first <- g.Wait(nil) }()
		// The first writer is alone: its sync runs (and blocks) while the
		// others gather into the next group.
		Eventually(started).Should(BeClosed())
		const others = 15
		results := make(chan error, others)
		for range others {
			go func() { results <- g.Wait(nil) }()
		}
		Eventually(g.Waiting).Should(Equal(others))
		close(release)
		Expect(<-first).To(Succeed())
		for range others {
			Expect(<-results).To(MatchError(boom))
		}
		// The next writer starts a new group, which the failure does not touch.
		g2ok := store.NewGroupSync(func(*os.File) error { return nil }, func(*os.File) error { return nil }, 1)
		Expect(g2ok.Wait(nil)).To(Succeed())
	})

	It("syncs a writer alone with its own file's sync", func() {
		var all, one atomic.Int64
		g := store.NewGroupSync(func(*os.File) error { all.Add(1); return nil }, func(*os.File) error { one.Add(1); return nil }, 1)
		for range 10 {
			Expect(g.Wait(nil)).To(Succeed())
		}
		Expect(one.Load()).To(Equal(int64(10)))
		Expect(all.Load()).To(BeZero())
	})

	DescribeTable("is used only on kernels whose syncfs reports write-back errors (5.8 and later)",
		func(release string, want bool) {
			Expect(store.KernelAtLeast(release, 5, 8)).To(Equal(want))
		},
		Entry("this machine's kind", "6.18.44-fc-v669", true),
		Entry("5.8 itself", "5.8.0", true),
		Entry("5.4, whose syncfs returns 0 after a failed write-back", "5.4.0-150-generic", false),
		Entry("4.19", "4.19.0", false),
		Entry("a release it cannot read", "unknown", false),
	)

	It("lets writers sync their own files while fewer than the threshold are syncing, and groups the rest", func() {
		var all, one atomic.Int64
		release, leaderIn, releaseLeader := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var inOne sync.WaitGroup
		inOne.Add(3)
		g := store.NewGroupSync(
			func(*os.File) error { all.Add(1); return nil },
			func(*os.File) error {
				switch one.Add(1) {
				case 1, 2, 3:
					inOne.Done()
					<-release
				case 4:
					close(leaderIn)
					<-releaseLeader
				}
				return nil
			},
			4)
		results := make(chan error, 8)
		for range 3 {
			go func() { results <- g.Wait(nil) }()
		}
		inOne.Wait()
		Expect(one.Load()).To(Equal(int64(3)), "three writers, each in its own file's sync")
		Expect(g.Waiting()).To(BeZero())
		// The fourth writer syncing at once starts a group; alone in it, it
		// syncs its own file while the next four gather behind it.
		go func() { results <- g.Wait(nil) }()
		Eventually(leaderIn).Should(BeClosed())
		for range 4 {
			go func() { results <- g.Wait(nil) }()
		}
		Eventually(g.Waiting).Should(Equal(4))
		close(releaseLeader)
		close(release)
		for range 8 {
			Expect(<-results).To(Succeed())
		}
		Expect(one.Load()).To(Equal(int64(4)))
		Expect(all.Load()).To(Equal(int64(1)), "the four writers behind the leader shared one sync")
	})
})

var _ = Describe("a file store's sync counters", func() {
	// putAtOnce puts one record on each of n rollouts from n goroutines.
	putAtOnce := func(fs *store.FileStore, n int) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				defer GinkgoRecover()
				id := "sync-" + strconv.Itoa(i)
				Expect(fs.Put(context.Background(), newEntry(id, "c1"))).To(Succeed())
			})
		}
		wg.Wait()
	}
	syncStats := func(fs *store.FileStore) store.SyncStats {
		ds, err := fs.DiskStats()
		Expect(err).NotTo(HaveOccurred())
		return ds.Syncs
	}

	DescribeTable("count every acknowledged append once, and each sync that covered them",
		func(perFile bool) {
			var opts []store.FileOption
			if perFile {
				opts = append(opts, store.WithPerFileSync())
			}
			fs, err := store.NewFileStore(GinkgoT().TempDir(), opts...)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(fs.Close)
			Expect(syncStats(fs)).To(Equal(store.SyncStats{}))

			const n = 32
			putAtOnce(fs, n)
			st := syncStats(fs)
			Expect(st.Appends).To(Equal(uint64(n)))
			Expect(st.Busy).To(BeNumerically(">", 0))
			if perFile {
				Expect(st.FileSyncs).To(Equal(uint64(n)))
				Expect(st.FileSystemSyncs).To(BeZero())
			} else {
				Expect(st.FileSystemSyncs + st.FileSyncs).To(BeNumerically(">=", 1))
				Expect(st.FileSystemSyncs + st.FileSyncs).To(BeNumerically("<=", n))
			}
		},
		Entry("group sync (the default)", false),
		Entry("an fdatasync per append (WithPerFileSync)", true),
	)

	It("does not count an append whose sync failed, nor a lazily written intent", func() {
		fail := atomic.Bool{}
		syncFn := func(f *os.File) error {
			if fail.Load() {
				return errors.New("writeback failed")
			}
			return unix.Fdatasync(int(f.Fd()))
		}
		fs, err := store.NewFileStore(GinkgoT().TempDir(), store.WithSyncFuncs(syncFn, syncFn))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		ctx := context.Background()
		Expect(fs.WriteIntent(ctx, "counted", "c1")).To(Succeed())
		Expect(syncStats(fs).Appends).To(BeZero(), "an intent written ahead waits for no sync")
		Expect(fs.Put(ctx, newEntry("counted", "c1"))).To(Succeed())
		Expect(syncStats(fs).Appends).To(Equal(uint64(1)))
		fail.Store(true)
		Expect(fs.Put(ctx, newEntry("counted", "c2", 2))).NotTo(Succeed())
		st := syncStats(fs)
		Expect(st.Appends).To(Equal(uint64(1)))
		Expect(st.FileSyncs).To(Equal(uint64(2)), "the failed sync still ran")
	})
})

var _ = DescribeTable("sync figures between two readings",
	func(before, after store.SyncStats, want store.SyncStats, perSync float64) {
		d := after.Since(before)
		Expect(d).To(Equal(want))
		Expect(d.AppendsPerSync()).To(BeNumerically("~", perSync, 1e-12))
	},
	Entry("appends over syncs of both kinds",
		store.SyncStats{Appends: 10, FileSystemSyncs: 2, FileSyncs: 1, Busy: time.Second},
		store.SyncStats{Appends: 40, FileSystemSyncs: 7, FileSyncs: 6, Busy: 3 * time.Second},
		store.SyncStats{Appends: 30, FileSystemSyncs: 5, FileSyncs: 5, Busy: 2 * time.Second}, 3.0),
	Entry("no sync in between", store.SyncStats{Appends: 4}, store.SyncStats{Appends: 4}, store.SyncStats{}, 0.0),
)
