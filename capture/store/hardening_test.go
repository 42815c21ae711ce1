package store_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("file store: files it must not trust", func() {
	var (
		ctx     context.Context
		dir     string
		outside string
		fs      *store.FileStore
	)
	BeforeEach(func() {
		ctx = context.Background()
		root := GinkgoT().TempDir()
		dir = filepath.Join(root, "capture")
		outside = filepath.Join(root, "victim")
		Expect(os.WriteFile(outside, []byte("precious line one\nprecious line two"), 0o600)).To(Succeed())
		var err error
		fs, err = store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
	})

	victimUntouched := func() {
		b, err := os.ReadFile(outside)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(b)).To(Equal("precious line one\nprecious line two"))
	}

	DescribeTable("refuses a symlink planted as a rollout file, naming it, and leaves its target alone",
		func(suffix string, op func(ctx context.Context, fs *store.FileStore) error) {
			link := filepath.Join(dir, "r1"+suffix)
			Expect(os.Symlink(outside, link)).To(Succeed())
			err := op(ctx, fs)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring("r1" + suffix))
			Expect(err.Error()).To(ContainSubstring("not a regular file"))
			victimUntouched()
		},
		Entry("records, on put", ".tokens.jsonl", func(ctx context.Context, fs *store.FileStore) error {
			return fs.Put(ctx, newEntry("r1", "c1"))
		}),
		Entry("records, on freeze (which would cut a torn tail)", ".tokens.jsonl", func(ctx context.Context, fs *store.FileStore) error {
			_, err := fs.Freeze(ctx, "r1")
			return err
		}),
		Entry("intents, on begin_call", ".tokens.intents", func(ctx context.Context, fs *store.FileStore) error {
			return fs.BeginCall(ctx, "r1", "c1")
		}),
		Entry("intents, written ahead", ".tokens.intents", func(ctx context.Context, fs *store.FileStore) error {
			return fs.WriteIntent(ctx, "r1", "c1")
		}),
		Entry("intents, on their sync", ".tokens.intents", func(ctx context.Context, fs *store.FileStore) error {
			return fs.SyncIntents(ctx, "r1")
		}),
		Entry("incomplete marker, on mark_incomplete", ".tokens.incomplete", func(ctx context.Context, fs *store.FileStore) error {
			return fs.MarkIncomplete(ctx, "r1", "c1")
		}),
		Entry("lock", ".tokens.lock", func(ctx context.Context, fs *store.FileStore) error {
			return fs.BeginCall(ctx, "r1", "c1")
		}),
		Entry("state, on freeze", ".tokens.state.json", func(ctx context.Context, fs *store.FileStore) error {
			_, err := fs.Freeze(ctx, "r1")
			return err
		}),
	)

	It("does not create the target of a dangling symlink", func() {
		target := filepath.Join(filepath.Dir(dir), "created-through-link")
		Expect(os.Symlink(target, filepath.Join(dir, "r1.tokens.jsonl"))).To(Succeed())
		Expect(fs.Put(ctx, newEntry("r1", "c1"))).NotTo(Succeed())
		_, err := os.Lstat(target)
		Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue())
	})

	It("refuses a FIFO without blocking on it", func() {
		Expect(syscall.Mkfifo(filepath.Join(dir, "r1.tokens.intents"), 0o600)).To(Succeed())
		done := make(chan error, 1)
		go func() { done <- fs.BeginCall(ctx, "r1", "c1") }()
		var err error
		Eventually(done).Should(Receive(&err))
		Expect(err).To(MatchError(ContainSubstring("r1.tokens.intents is not a regular file")))
	})

	It("creates its directory 0700 and every file 0600", func() {
		fi, err := os.Stat(dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o700)))
		Expect(fs.BeginCall(ctx, "r1", "c1")).To(Succeed())
		Expect(fs.Put(ctx, newEntry("r1", "c1"))).To(Succeed())
		Expect(fs.MarkIncomplete(ctx, "r1", "c2")).To(Succeed())
		_, err = fs.Freeze(ctx, "r1")
		Expect(err).NotTo(HaveOccurred())
		names, err := filepath.Glob(filepath.Join(dir, "r1.*"))
		Expect(err).NotTo(HaveOccurred())
		Expect(names).To(HaveLen(5))
		for _, n := range names {
			fi, err := os.Stat(n)
			Expect(err).NotTo(HaveOccurred())
			Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)), n)
		}
	})

	It("warns when the directory is writable by others", func() {
		shared := filepath.Join(GinkgoT().TempDir(), "shared")
		Expect(os.Mkdir(shared, 0o777)).To(Succeed())
		Expect(os.Chmod(shared, 0o1777)).To(Succeed())
		var logs bytes.Buffer
		_, err := store.NewFileStore(shared, store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		Expect(err).NotTo(HaveOccurred())
		Expect(logs.String()).To(ContainSubstring("writable by other users"))
		Expect(logs.String()).To(ContainSubstring(shared))
		logs.Reset()
		_, err = store.NewFileStore(dir, store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		Expect(err).NotTo(HaveOccurred())
		Expect(logs.String()).To(BeEmpty())
	})

	DescribeTable("rolls ids too long for a file name back before touching anything",
		func(n int, ok bool) {
			id := strings.Repeat("a", n)
			err := store.ValidateRolloutID(id)
			if ok {
				Expect(err).NotTo(HaveOccurred())
				Expect(fs.BeginCall(ctx, id, "c1")).To(Succeed())
				Expect(fs.Put(ctx, newEntry(id, "c1"))).To(Succeed())
				_, err := fs.Freeze(ctx, id)
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(MatchError(store.ErrInvalidRolloutID))
			Expect(err.Error()).To(ContainSubstring("at most 237"))
			Expect(fs.BeginCall(ctx, id, "c1")).To(MatchError(store.ErrInvalidRolloutID))
			Expect(fs.Put(ctx, newEntry(id, "c1"))).To(MatchError(store.ErrInvalidRolloutID))
			Expect(dirNames(dir)).To(BeEmpty())
		},
		Entry("237 bytes: the longest that fits with every suffix", 237, true),
		Entry("238 bytes", 238, false),
		Entry("300 bytes", 300, false),
	)

	It("removes state temp files a killed writer left, once they are stale", func() {
		stale := filepath.Join(dir, ".tokens-state-123456")
		fresh := filepath.Join(dir, ".tokens-state-999999")
		Expect(os.WriteFile(stale, []byte("{"), 0o600)).To(Succeed())
		Expect(os.WriteFile(fresh, []byte("{"), 0o600)).To(Succeed())
		old := time.Now().Add(-2 * time.Hour)
		Expect(os.Chtimes(stale, old, old)).To(Succeed())
		_, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		_, err = os.Stat(stale)
		Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue())
		// A temp file that young may be another live writer's: left alone.
		_, err = os.Stat(fresh)
		Expect(err).NotTo(HaveOccurred())
	})
})
