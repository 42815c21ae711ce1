package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// chainedLines renders n canonical lines of one rollout whose prompts grow
// call by call (each prompt repeats the previous prompt and generation), the
// shape the reader's prefix reuse is built for. Every third prompt instead
// starts a new root, so reuse is also refused part of the time.
func chainedLines(rollout string, n int) ([][]byte, []*record.Entry) {
	var lines [][]byte
	var entries []*record.Entry
	prompt := []int{1, 2, 3}
	for i := 0; i < n; i++ {
		gen := []int{100 + i, 200 + i}
		e := newEntry(rollout, fmt.Sprintf("call-%03d", i), gen...)
		e.PromptTokenIDs = append([]int{}, prompt...)
		line, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		lines = append(lines, line)
		want, err := record.ParseLine(line)
		Expect(err).NotTo(HaveOccurred())
		entries = append(entries, want)
		prompt = append(append(prompt, gen...), 300+i)
		if i%3 == 2 {
			prompt = []int{7, 8, 9 + i}
		}
	}
	return lines, entries
}

func writeLines(dir, rollout string, lines [][]byte, extra string) {
	var data []byte
	for _, l := range lines {
		data = append(append(data, l...), '\n')
	}
	data = append(data, extra...)
	Expect(os.WriteFile(filepath.Join(dir, rollout+".tokens.jsonl"), data, 0o644)).To(Succeed())
}

var _ = Describe("file store read path", func() {
	var (
		ctx context.Context
		dir string
		fs  *store.FileStore
	)
	beforeEachFileStore(&ctx, &dir, &fs)

	It("freezes lines another writer left unindexed to exactly what ParseLine reads, and again when indexed", func() {
		lines, want := chainedLines("r1", 12)
		writeLines(dir, "r1", lines, "")
		snap, err := fs.Freeze(ctx, "r1")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(Equal(want))
		Expect(snap.Version).To(Equal(len(lines) + 1))
		again, err := fs.Freeze(ctx, "r1")
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Entries).To(Equal(want))
	})

	It("reads an indexed head and a recovered tail as one file", func() {
		lines, want := chainedLines("r2", 9)
		for _, e := range want[:4] {
			Expect(fs.Put(ctx, e)).To(Succeed())
		}
		Expect(fs.Close()).To(Succeed()) // the state now indexes the first four lines
		writeLines(dir, "r2", lines, "")
		other, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		snap, err := other.Freeze(ctx, "r2")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(Equal(want))
	})

	It("cuts a torn tail once and returns the lines before it", func() {
		lines, want := chainedLines("r3", 5)
		writeLines(dir, "r3", lines, `{"rollout_id":"r3","model_call_id":"call-9","prompt_token_ids":[1,2,3,100`)
		snap, err := fs.Freeze(ctx, "r3")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(Equal(want))
		fi, err := os.Stat(filepath.Join(dir, "r3.tokens.jsonl"))
		Expect(err).NotTo(HaveOccurred())
		size := 0
		for _, l := range lines {
			size += len(l) + 1
		}
		Expect(fi.Size()).To(BeEquivalentTo(size))
	})

	It("fails on a record that does not validate and says where it is", func() {
		lines, _ := chainedLines("r4", 4)
		bad := []byte(`{"rollout_id":"r4","model_call_id":"x","prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[]}`)
		writeLines(dir, "r4", append(lines[:2:2], append([][]byte{bad}, lines[2:]...)...), "")
		_, err := fs.Freeze(ctx, "r4")
		Expect(err).To(MatchError(store.ErrCorrupt))
		Expect(err).To(MatchError(record.ErrInvalid))
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("line at byte %d", len(lines[0])+len(lines[1])+2)))
	})

	It("reuses its read buffer without mixing rollouts of different sizes", func() {
		bigLines, big := chainedLines("big", 30)
		smallLines, small := chainedLines("small", 2)
		writeLines(dir, "big", bigLines, "")
		writeLines(dir, "small", smallLines, "")
		for range 2 {
			got, err := fs.ReadEntries(ctx, "big")
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(big))
			got, err = fs.ReadEntries(ctx, "small")
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(small))
		}
		for _, id := range []string{"big", "small"} {
			_, err := fs.Freeze(ctx, id)
			Expect(err).NotTo(HaveOccurred())
		}
		snap, err := fs.Freeze(ctx, "big")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(Equal(big))
		snap, err = fs.Freeze(ctx, "small")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(Equal(small))
	})
})

// bigLines renders n lines of about 100 KB each (prompts of 16k tokens
// that each extend the previous one), so the file is read in two halves.
func bigLines(rollout string, n int) ([][]byte, []*record.Entry) {
	var lines [][]byte
	var entries []*record.Entry
	prompt := make([]int, 16000)
	for i := range prompt {
		prompt[i] = 100000 + i
	}
	for i := 0; i < n; i++ {
		e := newEntry(rollout, fmt.Sprintf("big-%03d", i), 5, 6+i)
		e.PromptTokenIDs = prompt
		line, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		want, err := record.ParseLine(line)
		Expect(err).NotTo(HaveOccurred())
		lines, entries = append(lines, line), append(entries, want)
		prompt = append(append(prompt[:len(prompt):len(prompt)], 5, 6+i), 7)
	}
	return lines, entries
}

var _ = Describe("file store read path on a large file", func() {
	var (
		ctx   context.Context
		dir   string
		fs    *store.FileStore
		lines [][]byte
		want  []*record.Entry
	)
	beforeEachFileStore(&ctx, &dir, &fs)
	BeforeEach(func() {
		lines, want = bigLines("big", 60)
	})
	offset := func(i int) int {
		n := 0
		for _, l := range lines[:i] {
			n += len(l) + 1
		}
		return n
	}
	invalid := func(id string) []byte {
		return []byte(`{"rollout_id":"big","model_call_id":"` + id + `","prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[]}`)
	}

	It("reads the same entries in the same order as a line-by-line read", func() {
		writeLines(dir, "big", lines, "")
		Expect(offset(len(lines))).To(BeNumerically(">", 4<<20))
		got, err := fs.ReadEntries(ctx, "big")
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(want))
		snap, err := fs.Freeze(ctx, "big")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(Equal(want))
		snap, err = fs.Freeze(ctx, "big")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(Equal(want))
	})

	It("reports a bad record late in the file at its offset", func() {
		bad := append(append(append([][]byte{}, lines[:55]...), invalid("late")), lines[55:]...)
		writeLines(dir, "big", bad, "")
		_, err := fs.ReadEntries(ctx, "big")
		Expect(err).To(MatchError(store.ErrCorrupt))
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("line at byte %d:", offset(55))))
	})

	It("reports the earlier of two bad records", func() {
		bad := append(append([][]byte{}, lines[:5]...), invalid("early"))
		bad = append(bad, lines[5:55]...)
		bad = append(bad, invalid("late"))
		bad = append(bad, lines[55:]...)
		writeLines(dir, "big", bad, "")
		_, err := fs.ReadEntries(ctx, "big")
		Expect(err).To(MatchError(store.ErrCorrupt))
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("line at byte %d:", offset(5))))
	})

	It("skips only an unterminated torn last line when reading without a lock to repair", func() {
		writeLines(dir, "big", lines, `{"rollout_id":"big","model_call_id":"torn","prompt_token_ids":[1,2`)
		got, err := fs.ReadEntries(ctx, "big")
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(want))
	})
})

var _ = Describe("reconciling a tail in chunks", func() {
	DescribeTable("reads what one whole read reads, wherever the chunks end",
		func(ctx SpecContext, chunk int) {
			lines, want := chainedLines("c", 30)
			cases := []struct {
				name, extra string
				check       func(snap *store.Snapshot, err error, dir string)
			}{
				{"clean", "", func(snap *store.Snapshot, err error, _ string) {
					Expect(err).NotTo(HaveOccurred())
					Expect(snap.Entries).To(Equal(want))
					Expect(snap.Version).To(Equal(len(want) + 1))
				}},
				{"torn tail", `{"rollout_id":"c","model_call_id":"torn","prompt_token_ids":[1,2`, func(snap *store.Snapshot, err error, dir string) {
					Expect(err).NotTo(HaveOccurred())
					Expect(snap.Entries).To(Equal(want))
					fi, err := os.Stat(filepath.Join(dir, "c.tokens.jsonl"))
					Expect(err).NotTo(HaveOccurred())
					size := 0
					for _, l := range lines {
						size += len(l) + 1
					}
					Expect(fi.Size()).To(BeEquivalentTo(size))
				}},
				{"torn line then blank lines", "{\"rollout_id\":\"c\",\"mod\n\n   \n\t", func(snap *store.Snapshot, err error, _ string) {
					Expect(err).NotTo(HaveOccurred())
					Expect(snap.Entries).To(Equal(want))
				}},
				{"bad line then a record", "{\"rollout_id\":\"c\",\"mod\n\n" + string(lines[0]) + "\n", func(_ *store.Snapshot, err error, _ string) {
					Expect(err).To(MatchError(store.ErrCorrupt))
					Expect(err.Error()).To(ContainSubstring("more content follows it"))
				}},
				{"a conflicting duplicate", string(mutated(lines[3])) + "\n", func(_ *store.Snapshot, err error, _ string) {
					var conflict *store.DurableConflictError
					Expect(errors.As(err, &conflict)).To(BeTrue())
					Expect(conflict.CallID).To(Equal("call-003"))
				}},
			}
			for _, c := range cases {
				By(c.name)
				dir := GinkgoT().TempDir()
				writeLines(dir, "c", lines, c.extra)
				fs, err := store.NewFileStore(dir, store.WithTailChunk(chunk))
				Expect(err).NotTo(HaveOccurred())
				snap, err := fs.Freeze(ctx, "c")
				c.check(snap, err, dir)
			}
		},
		Entry("chunks shorter than a line", 7),
		Entry("chunks of a few lines", 700),
		Entry("one chunk", 0),
	)
})

// mutated returns line with its first generated token changed, keeping it a
// valid record: a second payload for the same call id.
func mutated(line []byte) []byte {
	e, err := record.ParseLine(line)
	Expect(err).NotTo(HaveOccurred())
	e.GenerationTokenIDs = append([]int{}, e.GenerationTokenIDs...)
	e.GenerationTokenIDs[0]++
	b, err := e.MarshalCanonical()
	Expect(err).NotTo(HaveOccurred())
	return b
}

var _ = Describe("read-only look at a large file", func() {
	var (
		ctx   context.Context
		dir   string
		lines [][]byte
		want  []*record.Entry
	)
	BeforeEach(func() {
		ctx = context.Background()
		dir = GinkgoT().TempDir()
		lines, want = bigLines("big", 60)
	})
	look := func() (*store.Snapshot, error) {
		ro, err := store.OpenReadOnly(dir)
		Expect(err).NotTo(HaveOccurred())
		v, err := ro.Look(ctx, "big")
		if err != nil {
			return nil, err
		}
		return v.Snapshot, nil
	}
	withCall := func(i int, call string) []byte {
		e := *want[i]
		e.ModelCallID = call
		line, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		return line
	}

	DescribeTable("reads what a freeze reads",
		func(edit func() ([][]byte, string), check func(snap *store.Snapshot, err error, frozen *store.Snapshot, freezeErr error)) {
			ls, extra := edit()
			writeLines(dir, "big", ls, extra)
			size := 0
			for _, l := range ls {
				size += len(l) + 1
			}
			Expect(size).To(BeNumerically(">", 4<<20), "the file is as large as a freeze reads in two halves")
			snap, err := look()
			fs, ferr := store.NewFileStore(GinkgoT().TempDir())
			Expect(ferr).NotTo(HaveOccurred())
			copyDir := fs.Dir()
			writeLines(copyDir, "big", ls, extra)
			frozen, freezeErr := fs.Freeze(ctx, "big")
			check(snap, err, frozen, freezeErr)
		},
		Entry("every line", func() ([][]byte, string) { return lines, "" },
			func(snap *store.Snapshot, err error, frozen *store.Snapshot, _ error) {
				Expect(err).NotTo(HaveOccurred())
				Expect(snap.Entries).To(Equal(want))
				Expect(snap.Entries).To(Equal(frozen.Entries))
				Expect(snap.Version).To(Equal(len(want)), "every line counts as recovered, as in the one-pass read")
			}),
		Entry("an unterminated torn tail", func() ([][]byte, string) {
			return lines, `{"rollout_id":"big","model_call_id":"torn","prompt_token_ids":[1,2`
		}, func(snap *store.Snapshot, err error, _ *store.Snapshot, _ error) {
			Expect(err).NotTo(HaveOccurred())
			Expect(snap.Entries).To(Equal(want))
		}),
		Entry("a call stored in both halves with different payloads", func() ([][]byte, string) {
			ls := append([][]byte{}, lines...)
			ls[55] = withCall(55, want[3].ModelCallID)
			return ls, ""
		}, func(_ *store.Snapshot, err error, _ *store.Snapshot, freezeErr error) {
			var conflict *store.DurableConflictError
			Expect(errors.As(err, &conflict)).To(BeTrue(), "got %v", err)
			Expect(conflict.CallID).To(Equal(want[3].ModelCallID))
			Expect(errors.As(freezeErr, &conflict)).To(BeTrue(), "a freeze refuses it too: %v", freezeErr)
		}),
		Entry("a call stored in both halves byte for byte", func() ([][]byte, string) {
			ls := append(append([][]byte{}, lines...), lines[2])
			return ls, ""
		}, func(snap *store.Snapshot, err error, _ *store.Snapshot, _ error) {
			Expect(err).NotTo(HaveOccurred())
			Expect(snap.Entries).To(HaveLen(len(want) + 1))
			Expect(snap.Entries[len(want)].ModelCallID).To(Equal(want[2].ModelCallID))
		}),
		Entry("a bad record in each half: the earlier one", func() ([][]byte, string) {
			ls := append([][]byte{}, lines...)
			ls[5] = []byte(`{"rollout_id":"big","model_call_id":"early","prompt_token_ids":[1]}`)
			ls[55] = []byte(`{"rollout_id":"big","model_call_id":"late","prompt_token_ids":[1]}`)
			return ls, ""
		}, func(_ *store.Snapshot, err error, _ *store.Snapshot, freezeErr error) {
			Expect(err).To(MatchError(store.ErrCorrupt))
			Expect(freezeErr).To(MatchError(store.ErrCorrupt))
			Expect(err.Error()).To(Equal(freezeErr.Error()))
		}),
	)
})
