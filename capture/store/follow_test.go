package store_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("following a rollout's records", func() {
	var (
		ctx context.Context
		dir string
		fs  *store.FileStore
	)
	beforeEachFileStore(&ctx, &dir, &fs)

	It("reads only what was appended since the last refresh, and a call's tokens from its own line", func() {
		_, want := chainedLines("f1", 9)
		f := store.NewFollower(fs, "f1")
		added, reset, err := f.Refresh(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(reset).To(BeFalse())
		Expect(added).To(BeEmpty())
		for i, e := range want {
			Expect(fs.Put(ctx, e)).To(Succeed())
			added, reset, err := f.Refresh(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(reset).To(BeFalse())
			Expect(added).To(Equal([]*record.Entry{e}), "call %d", i)
		}
		Expect(f.Len()).To(Equal(len(want)))
		for _, e := range want {
			got, err := f.Cumulative(ctx, e.ModelCallID)
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(e.Cumulative()))
		}
		_, err = f.Cumulative(ctx, "nope")
		Expect(err).To(MatchError(ContainSubstring("not in the rollout's entries")))
	})

	It("leaves a torn last line for later and starts over when the file is replaced", func() {
		lines, want := chainedLines("f2", 4)
		writeLines(dir, "f2", lines[:3], `{"rollout_id":"f2","model_call`)
		f := store.NewFollower(fs, "f2")
		added, _, err := f.Refresh(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(added).To(Equal(want[:3]))
		By("the file being deleted and written again under the same id")
		Expect(fs.Delete(ctx, "f2")).To(Succeed())
		writeLines(dir, "f2", lines[3:], "")
		added, reset, err := f.Refresh(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(reset).To(BeTrue())
		Expect(added).To(Equal(want[3:]))
		Expect(f.Len()).To(Equal(1))
		By("a reference into a file cut back below it")
		Expect(os.Truncate(filepath.Join(dir, "f2.tokens.jsonl"), 10)).To(Succeed())
		_, err = f.Cumulative(ctx, want[3].ModelCallID)
		Expect(err).To(MatchError(store.ErrStaleRef))
	})

	It("takes the lines the last refresh read from that refresh, and older ones from the store", func() {
		_, want := chainedLines("f4", 3)
		counted := &countingReader{TailReader: fs}
		f := store.NewFollower(counted, "f4")
		for _, e := range want {
			Expect(fs.Put(ctx, e)).To(Succeed())
		}
		_, _, err := f.Refresh(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(fs.Put(ctx, nextCall(want[2], "call-003"))).To(Succeed())
		_, _, err = f.Refresh(ctx)
		Expect(err).NotTo(HaveOccurred())

		got, err := f.Cumulative(ctx, "call-003")
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(nextCall(want[2], "call-003").Cumulative()))
		Expect(counted.reads).To(Equal(0), "the line the last refresh parsed is not read again")
		Expect(counted.checks).To(Equal(1), "but its place in the file is checked")

		got, err = f.Cumulative(ctx, want[1].ModelCallID)
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(want[1].Cumulative()))
		Expect(counted.reads).To(Equal(1), "a line of an earlier refresh is read from the store")

		f.ForgetRead()
		_, err = f.Cumulative(ctx, "call-003")
		Expect(err).NotTo(HaveOccurred())
		Expect(counted.reads).To(Equal(2), "once forgotten, the last refresh's lines are read from the store too")
	})

	It("refuses to follow a planted link", func() {
		victim := filepath.Join(GinkgoT().TempDir(), "v")
		Expect(os.WriteFile(victim, []byte("x\n"), 0o600)).To(Succeed())
		Expect(os.Symlink(victim, filepath.Join(dir, "f3.tokens.jsonl"))).To(Succeed())
		_, _, err := store.NewFollower(fs, "f3").Refresh(ctx)
		Expect(err).To(MatchError(ContainSubstring("not a regular file")))
	})
})

var _ = Describe("following a rollout in the memory store", func() {
	It("reads only what was appended, and starts over after a delete", func(ctx SpecContext) {
		ms := store.NewMemoryStore()
		_, want := chainedLines("m1", 5)
		f := store.NewFollower(ms, "m1")
		for i, e := range want[:4] {
			Expect(ms.Put(ctx, e)).To(Succeed())
			added, reset, err := f.Refresh(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(reset).To(BeFalse())
			Expect(added).To(Equal([]*record.Entry{e}), "call %d", i)
		}
		for _, e := range want[:4] {
			got, err := f.Cumulative(ctx, e.ModelCallID)
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(e.Cumulative()))
		}
		By("the rollout deleted and written again under the same id")
		Expect(ms.Delete(ctx, "m1")).To(Succeed())
		_, err := f.Cumulative(ctx, want[0].ModelCallID)
		Expect(err).To(MatchError(store.ErrStaleRef))
		Expect(ms.Put(ctx, want[4])).To(Succeed())
		added, reset, err := f.Refresh(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(reset).To(BeTrue())
		Expect(added).To(Equal(want[4:]))
		Expect(f.Len()).To(Equal(1))
	})
})

// followedStores are the stores a follower reads, each opened fresh for
// an entry.
func followedStores() []TableEntry {
	return []TableEntry{
		Entry("file store", func() (store.TailReader, store.CanonicalSink) {
			fs, err := store.NewFileStore(GinkgoT().TempDir())
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(fs.Close)
			return fs, fs
		}),
		Entry("memory store", func() (store.TailReader, store.CanonicalSink) {
			ms := store.NewMemoryStore()
			return ms, ms
		}),
	}
}

// putCanonical stores e through the canonical path a proxy takes and
// returns its line.
func putCanonical(ctx context.Context, sink store.CanonicalSink, e *record.Entry) []byte {
	GinkgoHelper()
	canonical, err := store.EncodeLine(e)
	Expect(err).NotTo(HaveOccurred())
	digest, err := sink.PutCanonical(ctx, e, canonical)
	Expect(err).NotTo(HaveOccurred())
	Expect(digest).To(Equal(record.EntryDigest(canonical)))
	return canonical
}

var _ = Describe("a follower told what its process wrote", func() {
	put := putCanonical

	// handedFirst puts a rollout's first entry and hands it to a new
	// follower of that rollout.
	handedFirst := func(ctx context.Context, open func() (store.TailReader, store.CanonicalSink), rollout string) (*store.Follower, store.CanonicalSink, []*record.Entry, []byte) {
		GinkgoHelper()
		src, sink := open()
		_, want := chainedLines(rollout, 2)
		f := store.NewFollower(src, rollout)
		line := put(ctx, sink, want[0])
		f.Wrote(want[0], line)
		return f, sink, want, line
	}

	DescribeTable("takes the written entry for its line instead of parsing it, and knows its digest",
		func(ctx SpecContext, open func() (store.TailReader, store.CanonicalSink)) {
			f, sink, want, _ := handedFirst(ctx, open, "w1")
			added, _, err := f.Refresh(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(added).To(HaveLen(1))
			Expect(added[0]).To(BeIdenticalTo(want[0]), "the handed entry, not a parsed copy")
			tokens, digest, err := f.CumulativeDigest(ctx, want[0].ModelCallID)
			Expect(err).NotTo(HaveOccurred())
			Expect(tokens).To(Equal(want[0].Cumulative()))
			Expect(digest).To(Equal(*want[0].Digest))

			By("a line read back that is not the one handed over: the same length, one byte apart")
			next := nextCall(want[0], "call-009")
			other := slices.Clone(put(ctx, sink, next))
			at := bytes.Index(other, []byte(`"call-009"`)) + len(`"call-00`)
			other[at] = '8'
			f.Wrote(next, other)
			added, _, err = f.Refresh(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(added).To(HaveLen(1))
			Expect(added[0]).NotTo(BeIdenticalTo(next), "a line that differs from the one handed over is parsed")
			Expect(added[0].Cumulative()).To(Equal(next.Cumulative()))
			_, digest, err = f.CumulativeDigest(ctx, next.ModelCallID)
			Expect(err).NotTo(HaveOccurred())
			Expect(digest).To(BeEmpty(), "a parsed line's digest is hashed by whoever needs it")
		},
		followedStores(),
	)

	DescribeTable("forgets what it was handed once a refresh has passed, whether or not it saw the line",
		func(ctx SpecContext, open func() (store.TailReader, store.CanonicalSink)) {
			f, sink, want, _ := handedFirst(ctx, open, "w2")
			_, _, err := f.Refresh(ctx)
			Expect(err).NotTo(HaveOccurred())
			f.ForgetRead()
			_, digest, err := f.CumulativeDigest(ctx, want[0].ModelCallID)
			Expect(err).NotTo(HaveOccurred())
			Expect(digest).To(BeEmpty(), "after ForgetRead the line is read from the store")

			By("an entry handed over that no refresh reads")
			line, err := store.EncodeLine(want[1])
			Expect(err).NotTo(HaveOccurred())
			f.Wrote(want[1], line)
			added, _, err := f.Refresh(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(added).To(BeEmpty())
			put(ctx, sink, want[1])
			added, _, err = f.Refresh(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(added).To(HaveLen(1))
			Expect(added[0]).NotTo(BeIdenticalTo(want[1]), "the refresh that passed without it dropped it")
		},
		followedStores(),
	)
})

var _ = Describe("a follower handed a delta record with its full prompt", func() {
	// deltaOf is nextCall(parent) stored as a delta record, as the proxy's
	// delta transform leaves it, with the full prompt it was cut from.
	deltaOf := func(parent *record.Entry, parentCum []int, callID string) (*record.Entry, []int) {
		e := newEntry(parent.RolloutID, callID, 900, 901)
		full := append(slices.Clone(parentCum), 42)
		e.PromptTokenIDs = full
		Expect(e.StampLineage(record.ResolutionResolved, parent.ModelCallID, "", nil)).To(Succeed())
		e.PromptTokenIDs, e.PromptIsDelta = []int{42}, true
		Expect(e.Validate()).To(Succeed())
		return e, full
	}

	DescribeTable("answers its cumulative tokens and digest without walking the chain back",
		func(ctx SpecContext, open func() (store.TailReader, store.CanonicalSink)) {
			src, sink := open()
			put := func(e *record.Entry) []byte { return putCanonical(ctx, sink, e) }
			root := newEntry("dchain", "call-000")
			put(root)
			parent, cum := root, root.Cumulative()
			var last *record.Entry
			var lastFull []int
			for i := 1; i <= 6; i++ {
				last, lastFull = deltaOf(parent, cum, fmt.Sprintf("call-%03d", i))
				cum = append(slices.Clone(lastFull), last.GenerationTokenIDs...)
				parent = last
				if i < 6 {
					put(last)
				}
			}
			counting := &countingReader{TailReader: src}
			f := store.NewFollower(counting, "dchain")
			_, _, err := f.Refresh(ctx)
			Expect(err).NotTo(HaveOccurred())
			f.ForgetRead()

			f.WroteDelta(last, put(last), lastFull)
			_, _, err = f.Refresh(ctx)
			Expect(err).NotTo(HaveOccurred())
			tokens, digest, err := f.CumulativeDigest(ctx, last.ModelCallID)
			Expect(err).NotTo(HaveOccurred())
			Expect(tokens).To(Equal(cum))
			Expect(digest).To(Equal(*last.Digest))
			Expect(counting.reads).To(BeZero(), "no line of the chain is read back")

			By("once forgotten, the chain is walked back to its anchor, to the same tokens")
			f.ForgetRead()
			tokens, digest, err = f.CumulativeDigest(ctx, last.ModelCallID)
			Expect(err).NotTo(HaveOccurred())
			Expect(tokens).To(Equal(cum))
			Expect(digest).To(BeEmpty())
			Expect(counting.reads).To(Equal(7))
		},
		followedStores(),
	)
})

// countingReader counts the line reads and checks a Follower makes.
type countingReader struct {
	store.TailReader
	reads, checks int
}

func (c *countingReader) ReadLine(ctx context.Context, id string, at store.LineRef) (*record.Entry, error) {
	c.reads++
	return c.TailReader.ReadLine(ctx, id, at)
}

func (c *countingReader) CheckLine(ctx context.Context, id string, at store.LineRef) error {
	c.checks++
	return c.TailReader.CheckLine(ctx, id, at)
}

// nextCall is a call that continues parent: its prompt is the parent's
// whole sequence plus one token.
func nextCall(parent *record.Entry, callID string) *record.Entry {
	e := newEntry(parent.RolloutID, callID, 900, 901)
	e.PromptTokenIDs = append(parent.Cumulative(), 42)
	Expect(e.StampLineage(record.ResolutionResolved, parent.ModelCallID, "", nil)).To(Succeed())
	return e
}
