package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/internal/tmpfs"
)

// smallDisk mounts a 1 MiB tmpfs for the spec, or skips with the reason
// (failing instead where CI=true).
func smallDisk() string {
	dir, unmount, err := tmpfs.Mount(GinkgoT().TempDir(), 1<<20)
	if err != nil {
		if os.Getenv("CI") == "true" {
			Fail("a full-disk spec needs a tmpfs mount: " + err.Error())
		}
		Skip("a full-disk spec needs a tmpfs mount (root): " + err.Error())
	}
	DeferCleanup(unmount)
	return dir
}

var _ = Describe("file store on a disk that fills", func() {
	DescribeTable("fails writes with a disk-full error naming the file, counts them, leaves nothing half-written, and recovers", func(ctx context.Context, linked bool) {
		dir := filepath.Join(smallDisk(), "capture")
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		if linked {
			DeferCleanup(store.HoldCreation(fs))
		}
		Expect(fs.BeginCall(ctx, "old", "c1")).To(Succeed())
		Expect(fs.Put(ctx, newEntry("old", "c1"))).To(Succeed())
		before, err := os.ReadFile(filepath.Join(dir, "old.tokens.jsonl"))
		Expect(err).NotTo(HaveOccurred())

		filler, err := tmpfs.Fill(filepath.Dir(dir))
		Expect(err).NotTo(HaveOccurred())
		stats, err := fs.DiskStats()
		Expect(err).NotTo(HaveOccurred())
		Expect(stats.FreeBytes).To(BeNumerically("<", 8192))
		Expect(stats.TotalBytes).To(BeNumerically("==", 1<<20))

		By("a new rollout's intent")
		err = fs.BeginCall(ctx, "new", "c1")
		Expect(err).To(MatchError(store.ErrDiskFull))
		var we *store.WriteError
		Expect(errors.As(err, &we)).To(BeTrue())
		Expect(we.Path).To(Equal(filepath.Join(dir, "new.tokens.intents")))
		Expect(we.Dir()).To(Equal(dir))
		Expect(fs.WriteIntent(ctx, "new", "c1")).To(MatchError(store.ErrDiskFull), "an intent written ahead is refused alike")

		By("a record of an existing rollout")
		big := newEntry("old", "c2")
		big.PromptTokenIDs = make([]int, 4000)
		big.CumLen, big.Digest = nil, nil
		Expect(fs.Put(ctx, big)).To(MatchError(store.ErrDiskFull))
		after, err := os.ReadFile(filepath.Join(dir, "old.tokens.jsonl"))
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(Equal(before))

		stats, err = fs.DiskStats()
		Expect(err).NotTo(HaveOccurred())
		Expect(stats.DiskFullFailures).To(BeNumerically(">=", 2))
		Expect(stats.WriteFailures).To(BeNumerically(">=", stats.DiskFullFailures))

		By("space being freed")
		Expect(os.Remove(filler)).To(Succeed())
		Expect(fs.BeginCall(ctx, "new", "c1")).To(Succeed())
		Expect(fs.Put(ctx, big)).To(Succeed())
		snap, err := fs.Freeze(ctx, "old")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(2))
		if linked {
			n, _ := fs.LinkedFiles()
			Expect(n).To(BeNumerically(">", 0), "the spec went through linked creation")
		}
	},
		Entry("files created by name", false),
		Entry("files linked into place while other rollouts are created", true),
	)
})
