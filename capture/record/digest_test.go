package record_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

var _ = Describe("TokenDigest", func() {
	DescribeTable("matches the digest vectors of docs/record.md",
		func(ids []int, want string) {
			got, err := record.TokenDigest(ids)
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(want))
		},
		Entry("empty", []int{}, "2e222d36d0c6ae1db1ec18b3f96d9a46df5db61b40137bbfbac4cdf0acde9763"),
		Entry("nil is empty", nil, "2e222d36d0c6ae1db1ec18b3f96d9a46df5db61b40137bbfbac4cdf0acde9763"),
		Entry("[7]", []int{7}, "dd1f1f1ca38c499635d56a4a3e9cbbfa4334af8efddb87a3672315c9e6439af0"),
		Entry("[5,6,7]", []int{5, 6, 7}, "02da03bb33de15af849c7050a7043ac4dbd6533d59d60bf74235e88dbb55fe7f"),
		Entry("[1,2,3,4]", []int{1, 2, 3, 4}, "c3afc5aea22e622bfc7d2885d06eba877f9d41fdc84f081a54d1f7087fc23494"),
	)

	It("hashes long sequences across its internal chunks consistently", func() {
		ids := make([]int, 1500)
		for i := range ids {
			ids[i] = i * 7
		}
		// Independent construction of the token digest over the whole buffer at once.
		buf := []byte("nemo-gym-tokens\x01")
		buf = appendUint64(buf, uint64(len(ids)))
		for _, id := range ids {
			buf = appendUint64(buf, uint64(id))
		}
		sum := sha256.Sum256(buf)
		got, err := record.TokenDigest(ids)
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(hex.EncodeToString(sum[:])))
	})

	It("refuses negative ids", func() {
		_, err := record.TokenDigest([]int{1, -2})
		Expect(err).To(MatchError(record.ErrInvalid))
		Expect(err.Error()).To(ContainSubstring("-2"))
	})

	It("agrees with every digest Gym stamped in the fixtures", func() {
		root := fixturesDir()
		if root == "" {
			Skip("shared/fixtures not found next to the repository root")
		}
		lines, err := jsonlLines(root, "gym-store/docs-extras/*/files/*.jsonl", "gym-consumer/*/capture/*.jsonl")
		Expect(err).NotTo(HaveOccurred())
		checked := 0
		for _, l := range lines {
			e, err := record.ParseLine(l.data)
			if err != nil || e.Digest == nil || e.PromptIsDelta {
				continue
			}
			got, err := record.TokenDigest(e.Cumulative())
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(*e.Digest), "%s:%d", l.file, l.num)
			Expect(*e.CumLen).To(Equal(len(e.Cumulative())))
			checked++
		}
		Expect(checked).To(BeNumerically(">", 100))
	})
})

func appendUint64(b []byte, v uint64) []byte {
	return append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

var _ = Describe("EntryDigest", func() {
	It("is the SHA-256 hex of the canonical bytes", func() {
		sum := sha256.Sum256([]byte(`{"a":1}`))
		Expect(record.EntryDigest([]byte(`{"a":1}`))).To(Equal(hex.EncodeToString(sum[:])))
	})
})

var _ = Describe("StampLineage", func() {
	var e *record.Entry
	BeforeEach(func() {
		e = &record.Entry{SchemaVersion: record.SchemaVersion, RolloutID: "r", ModelCallID: "c", PromptTokenIDs: []int{1, 2}, GenerationTokenIDs: []int{3}, GenerationLogProbs: []float64{-1}}
	})

	It("stamps cum_len, digest and a resolved parent", func() {
		Expect(e.StampLineage(record.ResolutionResolved, "p", "", nil)).To(Succeed())
		Expect(*e.CumLen).To(Equal(3))
		want, _ := record.TokenDigest([]int{1, 2, 3})
		Expect(*e.Digest).To(Equal(want))
		Expect(*e.ParentCallID).To(Equal("p"))
		Expect(*e.ParentResolution).To(Equal(record.ResolutionResolved))
		Expect(e.Validate()).To(Succeed())
	})

	It("uses an explicit cumulative for a delta record", func() {
		e.PromptIsDelta = true
		Expect(e.StampLineage(record.ResolutionResolved, "p", "", []int{9, 1, 2, 3})).To(Succeed())
		Expect(*e.CumLen).To(Equal(4))
	})

	DescribeTable("hashes a cumulative given in parts as the joined sequence",
		func(parts [][]int, wantErr bool) {
			e.PromptIsDelta = true
			err := e.StampLineage(record.ResolutionResolved, "p", "", parts...)
			if wantErr {
				Expect(err).To(MatchError(record.ErrInvalid))
				Expect(err.Error()).To(ContainSubstring("negative token id -4 at index 3"))
				return
			}
			Expect(err).NotTo(HaveOccurred())
			joined := slices.Concat(parts...)
			want, _ := record.TokenDigest(joined)
			Expect(*e.Digest).To(Equal(want))
			Expect(*e.CumLen).To(Equal(len(joined)))
		},
		Entry("parent, prompt suffix and generation", [][]int{{9, 8}, {1, 2}, {3}}, false),
		Entry("an empty parent part", [][]int{{}, {1, 2}, {3}}, false),
		Entry("a nil middle part", [][]int{{9}, nil, {3}}, false),
		Entry("more than 512 ids across the chunk boundary", [][]int{make([]int, 511), {5, 6}, {7}}, false),
		Entry("a negative id in a later part, by its index in the whole", [][]int{{9, 8}, {1, -4}}, true),
	)

	DescribeTable("refuses verdicts that break rules 5–6 and leaves the record unchanged",
		func(res record.Resolution, parent string) {
			Expect(e.StampLineage(res, parent, "x", nil)).To(MatchError(record.ErrInvalid))
			Expect(e.CumLen).To(BeNil())
			Expect(e.Digest).To(BeNil())
			Expect(e.ParentResolution).To(BeNil())
			Expect(e.ParentResolutionReason).To(BeEmpty())
		},
		Entry("resolved without parent", record.ResolutionResolved, ""),
		Entry("root with parent", record.ResolutionRoot, "p"),
		Entry("unresolved with parent", record.ResolutionUnresolved, "p"),
		Entry("unknown verdict", record.Resolution("maybe"), ""),
	)

	It("refuses a delta record without its full cumulative, and negative ids", func() {
		e.PromptIsDelta = true
		Expect(e.StampLineage(record.ResolutionResolved, "p", "", nil)).To(MatchError(record.ErrInvalid))
		e.PromptIsDelta = false
		e.PromptTokenIDs = []int{-1}
		Expect(e.StampLineage(record.ResolutionRoot, "", "", nil)).To(MatchError(record.ErrInvalid))
		Expect(e.Digest).To(BeNil())
	})
})

var _ = Describe("Clone and Cumulative", func() {
	It("deep-copies everything", func() {
		idx, id := 0, "resp"
		e := &record.Entry{
			RolloutID: "r", ModelCallID: "c", PromptTokenIDs: []int{1}, GenerationTokenIDs: []int{2},
			GenerationLogProbs: []float64{-1}, RoutedExperts: json.RawMessage(`[1]`),
			OutputItems:    []record.Item{{"content": []any{map[string]any{"text": "a"}}}},
			TokenItemIndex: &idx, ResponseID: &id,
			Extra: map[string]json.RawMessage{"x": json.RawMessage(`1`)},
		}
		c := e.Clone()
		c.PromptTokenIDs[0] = 9
		c.GenerationLogProbs[0] = 0
		c.RoutedExperts[1] = '7'
		c.OutputItems[0]["content"].([]any)[0].(map[string]any)["text"] = "b"
		*c.TokenItemIndex = 5
		*c.ResponseID = "other"
		c.Extra["x"][0] = '2'
		Expect(e.PromptTokenIDs).To(Equal([]int{1}))
		Expect(e.GenerationLogProbs).To(Equal([]float64{-1}))
		Expect(string(e.RoutedExperts)).To(Equal(`[1]`))
		Expect(e.OutputItems[0]["content"].([]any)[0].(map[string]any)["text"]).To(Equal("a"))
		Expect(*e.TokenItemIndex).To(Equal(0))
		Expect(*e.ResponseID).To(Equal("resp"))
		Expect(string(e.Extra["x"])).To(Equal("1"))
		Expect((*record.Entry)(nil).Clone()).To(BeNil())
	})

	It("concatenates prompt and generation into a fresh slice", func() {
		e := &record.Entry{PromptTokenIDs: make([]int, 2, 10), GenerationTokenIDs: []int{3}}
		cum := e.Cumulative()
		Expect(cum).To(Equal([]int{0, 0, 3}))
		cum[0] = 7
		Expect(e.PromptTokenIDs[0]).To(Equal(0))
	})
})
