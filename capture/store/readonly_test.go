package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
)

// dirFingerprint lists every file of dir with its size, mode, mtime and
// content hash, so any write (a new lock or state file, a rewrite, a
// truncation) changes it.
func dirFingerprint(dir string) []string {
	ents, err := os.ReadDir(dir)
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, de := range ents {
		fi, err := de.Info()
		Expect(err).NotTo(HaveOccurred())
		data, err := os.ReadFile(filepath.Join(dir, de.Name()))
		Expect(err).NotTo(HaveOccurred())
		out = append(out, fmt.Sprintf("%s %d %v %d %x", de.Name(), fi.Size(), fi.Mode(), fi.ModTime().UnixNano(), sha256.Sum256(data)))
	}
	sort.Strings(out)
	return out
}

var _ = Describe("read-only store", func() {
	var (
		ctx context.Context
		dir string
		fs  *store.FileStore
	)
	beforeEachFileStore(&ctx, &dir, &fs)
	BeforeEach(func() {
		Expect(fs.Put(ctx, newEntry("live", "c1"))).To(Succeed())
		Expect(fs.BeginCall(ctx, "live", "c2")).To(Succeed())
		Expect(fs.Put(ctx, newEntry("done", "c1"))).To(Succeed())
		snap, err := fs.Freeze(ctx, "done")
		Expect(err).NotTo(HaveOccurred())
		Expect(fs.Drop(ctx, "done", snap.SnapshotID, snap.Version)).To(BeTrue())
		Expect(fs.Close()).To(Succeed())
	})

	DescribeTable("refuses a link planted in the directory instead of reading through it",
		func(rollout, suffix string) {
			secret := filepath.Join(GinkgoT().TempDir(), "secret")
			Expect(os.WriteFile(secret, []byte("{\"not\": \"a record\"}\n"), 0o600)).To(Succeed())
			link := filepath.Join(dir, rollout+suffix)
			Expect(os.RemoveAll(link)).To(Succeed())
			Expect(os.Symlink(secret, link)).To(Succeed())
			ro, err := store.OpenReadOnly(dir)
			Expect(err).NotTo(HaveOccurred())
			_, err = ro.Look(ctx, rollout)
			Expect(err).To(MatchError(ContainSubstring("not a regular file")))
		},
		Entry("the records of an unknown rollout", "planted", ".tokens.jsonl"),
		Entry("the state of an unknown rollout", "planted", ".tokens.state.json"),
		Entry("the lock of a live rollout", "live", ".tokens.lock"),
		Entry("the records of a live rollout", "live", ".tokens.jsonl"),
	)

	It("reads a live rollout as a freeze would, and changes nothing on disk", func() {
		before := dirFingerprint(dir)
		ro, err := store.OpenReadOnly(dir)
		Expect(err).NotTo(HaveOccurred())
		ids, err := ro.Rollouts(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(ids).To(Equal([]string{"done", "live"}))
		snap, err := ro.Freeze(ctx, "live")
		Expect(err).NotTo(HaveOccurred())
		Expect(callIDs(snap)).To(Equal([]string{"c1"}))
		Expect(snap.Incomplete).To(BeTrue(), "c2 has an intent and no record")
		Expect(dirFingerprint(dir)).To(Equal(before))

		By("the harness can still write to the rollout it looked at")
		Expect(fs.Put(ctx, newEntry("live", "c2"))).To(Succeed())
	})

	It("reports a retired rollout by its state, and refuses to drop", func() {
		ro, err := store.OpenReadOnly(dir)
		Expect(err).NotTo(HaveOccurred())
		v, err := ro.Look(ctx, "done")
		Expect(err).NotTo(HaveOccurred())
		Expect(v.State.Retired).To(BeTrue())
		Expect(v.Snapshot).To(BeNil())
		_, err = ro.Freeze(ctx, "done")
		Expect(err).To(MatchError(store.ErrRetired))
		_, err = ro.Drop(ctx, "live", "x", 1)
		Expect(err).To(MatchError(store.ErrReadOnly))
	})

	It("skips an unterminated torn last line without cutting it", func() {
		jsonl := filepath.Join(dir, "live.tokens.jsonl")
		f, err := os.OpenFile(jsonl, os.O_WRONLY|os.O_APPEND, 0)
		Expect(err).NotTo(HaveOccurred())
		_, err = f.WriteString(`{"schema_version":5,"rollout_id":"li`)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Close()).To(Succeed())
		before := dirFingerprint(dir)
		ro, err := store.OpenReadOnly(dir)
		Expect(err).NotTo(HaveOccurred())
		snap, err := ro.Freeze(ctx, "live")
		Expect(err).NotTo(HaveOccurred())
		Expect(callIDs(snap)).To(Equal([]string{"c1"}))
		Expect(dirFingerprint(dir)).To(Equal(before))
	})

	DescribeTable("refuses what it cannot read, creating nothing",
		func(path func() string, id string, want error) {
			p := path()
			ro, err := store.OpenReadOnly(p)
			if id == "" {
				Expect(err).To(HaveOccurred())
				Expect(err.Error()).To(ContainSubstring(p))
				_, statErr := os.Stat(p)
				Expect(os.IsNotExist(statErr)).To(BeTrue(), "the missing directory was created")
				return
			}
			Expect(err).NotTo(HaveOccurred())
			before := dirFingerprint(p)
			_, err = ro.Look(ctx, id)
			Expect(err).To(MatchError(want))
			Expect(dirFingerprint(p)).To(Equal(before))
		},
		Entry("a missing directory", func() string { return filepath.Join(dir, "typo") }, "", nil),
		Entry("an unknown rollout id", func() string { return dir }, "nope", store.ErrNoSuchRollout),
		Entry("an invalid rollout id", func() string { return dir }, "../x", store.ErrInvalidRolloutID),
	)
})
