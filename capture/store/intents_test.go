package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("call intents written ahead (WriteIntent, SyncIntents)", func() {
	var (
		ctx    context.Context
		dir    string
		mu     sync.Mutex
		synced []string // base names of the files the group sync was asked to sync alone
		fail   error
		fs     *store.FileStore
	)
	BeforeEach(func() {
		ctx = context.Background()
		dir = GinkgoT().TempDir()
		synced, fail = nil, nil
		one := func(f *os.File) error {
			mu.Lock()
			defer mu.Unlock()
			synced = append(synced, filepath.Base(f.Name()))
			return fail
		}
		var err error
		fs, err = store.NewFileStore(dir, store.WithSyncFuncs(one, one))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
	})
	syncs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), synced...)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		Expect(err).NotTo(HaveOccurred())
		return string(b)
	}

	It("writes the line BeginCall writes, without a sync, and a dangling one makes the freeze incomplete", func() {
		Expect(fs.WriteIntent(ctx, "ahead", "c1")).To(Succeed())
		Expect(syncs()).To(BeEmpty())
		Expect(fs.BeginCall(ctx, "begun", "c1")).To(Succeed())
		Expect(syncs()).To(Equal([]string{"begun.tokens.intents"}))
		Expect(read("ahead.tokens.intents")).To(Equal(read("begun.tokens.intents")))
		snap, err := fs.Freeze(ctx, "ahead")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Incomplete).To(BeTrue())
	})

	It("makes the rollout's intents durable with a sync of its intents file", func() {
		Expect(fs.WriteIntent(ctx, "r", "c1")).To(Succeed())
		Expect(fs.WriteIntent(ctx, "r", "c2")).To(Succeed())
		Expect(fs.SyncIntents(ctx, "r")).To(Succeed())
		Expect(syncs()).To(Equal([]string{"r.tokens.intents"}))
		Expect(read("r.tokens.intents")).To(Equal("c1\nc2\n"))
	})

	It("reports a failed sync naming the file and counts it", func() {
		Expect(fs.WriteIntent(ctx, "r", "c1")).To(Succeed())
		fail = syscall.EIO
		err := fs.SyncIntents(ctx, "r")
		Expect(err).To(MatchError(syscall.EIO))
		var we *store.WriteError
		Expect(errors.As(err, &we)).To(BeTrue())
		Expect(we.Path).To(Equal(filepath.Join(dir, "r.tokens.intents")))
		stats, err := fs.DiskStats()
		Expect(err).NotTo(HaveOccurred())
		Expect(stats.WriteFailures).To(BeNumerically("==", 1))
	})

	It("syncs nothing and creates nothing for a rollout without intents", func() {
		Expect(fs.SyncIntents(ctx, "never-seen")).To(Succeed())
		Expect(syncs()).To(BeEmpty())
		Expect(dirNames(dir)).To(BeEmpty())
	})

	DescribeTable("refuses what BeginCall refuses, writing nothing",
		func(prepare func(), rolloutID, callID string, want error) {
			if prepare != nil {
				prepare()
			}
			before, _ := os.ReadFile(filepath.Join(dir, "r.tokens.intents"))
			errAhead := fs.WriteIntent(ctx, rolloutID, callID)
			Expect(errAhead).To(MatchError(want))
			Expect(fs.BeginCall(ctx, rolloutID, callID)).To(MatchError(want))
			after, _ := os.ReadFile(filepath.Join(dir, "r.tokens.intents"))
			Expect(after).To(Equal(before))
		},
		Entry("a frozen rollout", func() {
			Expect(fs.BeginCall(ctx, "r", "c0")).To(Succeed())
			_, err := fs.Freeze(ctx, "r")
			Expect(err).NotTo(HaveOccurred())
		}, "r", "c1", store.ErrFrozen),
		Entry("a retired rollout", func() {
			snap, err := fs.Freeze(ctx, "r")
			Expect(err).NotTo(HaveOccurred())
			ok, err := fs.Drop(ctx, "r", snap.SnapshotID, snap.Version)
			Expect(err).NotTo(HaveOccurred())
			Expect(ok).To(BeTrue())
		}, "r", "c1", store.ErrRetired),
		Entry("an invalid rollout id", nil, "bad id", "c1", store.ErrInvalidRolloutID),
		Entry("a call id with a line break", nil, "r", "c\n1", store.ErrInvalidCallID),
	)
})
