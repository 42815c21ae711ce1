package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"

	"github.com/capbench/capbench/capture/store"
)

// tmpfileOrSkip skips a spec where dir's file system makes no unnamed
// files (O_TMPFILE): the store then creates every file by name.
func tmpfileOrSkip(dir string) {
	fd, err := unix.Open(dir, unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		Skip(fmt.Sprintf("the file system of %s makes no O_TMPFILE files (%v): the store creates files by name there", dir, err))
	}
	_ = unix.Close(fd)
}

// dirNames lists dir's entries, sorted.
func dirNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

var _ = Describe("file store: creating a rollout's files while others are created", func() {
	var (
		ctx context.Context
		dir string
	)
	BeforeEach(func() {
		ctx = context.Background()
		dir = filepath.Join(GinkgoT().TempDir(), "capture")
		Expect(os.Mkdir(dir, 0o700)).To(Succeed())
		tmpfileOrSkip(dir)
	})

	open := func(opts ...store.FileOption) *store.FileStore {
		s, err := store.NewFileStore(dir, opts...)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(s.Close)
		return s
	}

	It("links the new files into place, private to their owner, and reads them back", func() {
		s := open()
		release := store.HoldCreation(s)
		defer release()
		Expect(s.BeginCall(ctx, "r1", "c1")).To(Succeed())
		Expect(s.Put(ctx, newEntry("r1", "c1"))).To(Succeed())
		linked, synced := s.LinkedFiles()
		Expect(linked).To(BeEquivalentTo(2), "the intents and records files (a lock file's entry need not last)")
		Expect(synced).To(Equal(linked), "their directory entries were made durable before the put returned")
		Expect(dirNames(dir)).To(Equal([]string{"r1.tokens.intents", "r1.tokens.jsonl", "r1.tokens.lock"}))
		for _, name := range dirNames(dir) {
			fi, err := os.Stat(filepath.Join(dir, name))
			Expect(err).NotTo(HaveOccurred())
			Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)), name)
		}
		snap, err := s.Freeze(ctx, "r1")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(1))
		intents, err := os.ReadFile(filepath.Join(dir, "r1.tokens.intents"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(intents)).To(Equal("c1\n"))
	})

	It("creates by name when no other creation runs, as Gym's store does", func() {
		s := open()
		Expect(s.BeginCall(ctx, "r1", "c1")).To(Succeed())
		Expect(s.Put(ctx, newEntry("r1", "c1"))).To(Succeed())
		linked, _ := s.LinkedFiles()
		Expect(linked).To(BeZero())
	})

	It("never replaces a file that appeared under the name, and leaves no unnamed file behind", func() {
		s := open()
		path := filepath.Join(dir, "r1.tokens.jsonl")
		Expect(os.WriteFile(path, []byte("someone else's line\n"), 0o600)).To(Succeed())
		f, ok := store.LinkNew(s, path)
		Expect(ok).To(BeFalse())
		Expect(f).To(BeNil())
		b, err := os.ReadFile(path)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(b)).To(Equal("someone else's line\n"))
		Expect(dirNames(dir)).To(Equal([]string{"r1.tokens.jsonl"}))
	})

	It("does not create the target of a dangling symlink planted under the name", func() {
		s := open()
		target := filepath.Join(filepath.Dir(dir), "created-through-link")
		Expect(os.Symlink(target, filepath.Join(dir, "r1.tokens.jsonl"))).To(Succeed())
		release := store.HoldCreation(s)
		defer release()
		err := s.Put(ctx, newEntry("r1", "c1"))
		Expect(err).To(MatchError(ContainSubstring("not a regular file")))
		_, err = os.Lstat(target)
		Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue())
	})

	DescribeTable("makes a linked file's directory entry durable once, unless a sync of the whole file system did",
		func(opts func(dirSyncs *atomic.Int64) []store.FileOption, want int64) {
			var dirSyncs atomic.Int64
			s := open(opts(&dirSyncs)...)
			release := store.HoldCreation(s)
			Expect(s.BeginCall(ctx, "r1", "c1")).To(Succeed()) // links intents, syncs them
			Expect(s.Put(ctx, newEntry("r1", "c1"))).To(Succeed())
			release()
			Expect(s.BeginCall(ctx, "r1", "c2")).To(Succeed())
			Expect(s.Put(ctx, newEntry("r1", "c2"))).To(Succeed())
			Expect(dirSyncs.Load()).To(Equal(want))
			linked, synced := s.LinkedFiles()
			Expect(synced).To(Equal(linked))
		},
		Entry("a writer alone, synced with its file's fdatasync: one directory sync per linked file's first sync",
			func(n *atomic.Int64) []store.FileOption {
				return []store.FileOption{store.WithDirSync(func() error { n.Add(1); return nil })}
			}, int64(2)),
		Entry("per-file fdatasync (--sync file)",
			func(n *atomic.Int64) []store.FileOption {
				return []store.FileOption{store.WithPerFileSync(), store.WithDirSync(func() error { n.Add(1); return nil })}
			}, int64(2)),
	)

	It("counts a sync of the whole file system as covering the entries linked before it", func() {
		var dirSyncs atomic.Int64
		s := open(store.WithDirSync(func() error { dirSyncs.Add(1); return nil }))
		release := store.HoldCreation(s)
		defer release()
		Expect(s.WriteIntent(ctx, "r1", "c1")).To(Succeed()) // links the intents file, syncs nothing
		Expect(store.EntriesDurable(s, 1, true)).To(Succeed())
		Expect(store.EntriesDurable(s, 1, false)).To(Succeed())
		Expect(dirSyncs.Load()).To(BeZero())
		Expect(s.WriteIntent(ctx, "r2", "c1")).To(Succeed())
		Expect(store.EntriesDurable(s, 2, false)).To(Succeed())
		Expect(dirSyncs.Load()).To(BeEquivalentTo(1))
		linked, synced := s.LinkedFiles()
		Expect([]uint64{linked, synced}).To(Equal([]uint64{2, 2}))
	})

	It("fails the put whose linked file's directory entry could not be synced", func() {
		boom := errors.New("directory write-back failed")
		s := open(store.WithDirSync(func() error { return boom }))
		release := store.HoldCreation(s)
		defer release()
		Expect(s.WriteIntent(ctx, "r1", "c1")).To(Succeed()) // written, not synced
		err := s.Put(ctx, newEntry("r1", "c1"))
		Expect(err).To(MatchError(boom))
		linked, synced := s.LinkedFiles()
		Expect(synced).To(BeNumerically("<", linked), "nothing counts as durable after the failure")
	})

	It("keeps every record and intent of 64 rollouts created at once", func() {
		s := open()
		release := store.HoldCreation(s)
		defer release()
		var wg sync.WaitGroup
		for w := range 64 {
			wg.Go(func() {
				defer GinkgoRecover()
				id := fmt.Sprintf("r%02d", w)
				for c := range 3 {
					call := fmt.Sprintf("c%d", c)
					Expect(s.BeginCall(ctx, id, call)).To(Succeed())
					Expect(s.Put(ctx, newEntry(id, call))).To(Succeed())
				}
			})
		}
		wg.Wait()
		Expect(dirNames(dir)).To(HaveLen(64 * 3))
		for w := range 64 {
			id := fmt.Sprintf("r%02d", w)
			snap, err := s.Freeze(ctx, id)
			Expect(err).NotTo(HaveOccurred())
			Expect(snap.Entries).To(HaveLen(3), id)
			b, err := os.ReadFile(filepath.Join(dir, id+".tokens.intents"))
			Expect(err).NotTo(HaveOccurred())
			Expect(string(b)).To(Equal("c0\nc1\nc2\n"), id)
		}
		linked, synced := s.LinkedFiles()
		Expect(linked).To(BeEquivalentTo(64 * 2))
		Expect(synced).To(Equal(linked))
	})
})
