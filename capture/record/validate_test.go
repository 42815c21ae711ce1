package record_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

func ptr[T any](v T) *T { return &v }

func validEntry() *record.Entry {
	return &record.Entry{
		SchemaVersion: record.SchemaVersion, RolloutID: "r", ModelCallID: "c",
		PromptTokenIDs: []int{1}, GenerationTokenIDs: []int{2, 3}, GenerationLogProbs: []float64{-1, -2},
		OutputItems:      []record.Item{{"type": "message"}},
		TokenItemIndex:   ptr(0),
		ParentResolution: ptr(record.ResolutionRoot),
	}
}

var _ = Describe("Validate", func() {
	It("accepts a valid record and the whole schema window", func() {
		for v := record.MinSchemaVersion; v <= record.SchemaVersion; v++ {
			e := validEntry()
			e.SchemaVersion = v
			Expect(e.Validate()).To(Succeed())
		}
	})

	DescribeTable("applies the validation rules in order",
		func(mutate func(*record.Entry), sentinel error, mention string) {
			e := validEntry()
			mutate(e)
			err := e.Validate()
			Expect(err).To(MatchError(record.ErrInvalid))
			Expect(err).To(MatchError(sentinel))
			Expect(err.Error()).To(ContainSubstring(mention))
		},
		Entry("1: version above the maximum", func(e *record.Entry) { e.SchemaVersion = 6 }, record.ErrSchemaTooNew, "up to 5"),
		Entry("1 wins over later rules", func(e *record.Entry) { e.SchemaVersion = 6; e.GenerationLogProbs = nil }, record.ErrSchemaTooNew, "6"),
		Entry("2: version below the floor", func(e *record.Entry) { e.SchemaVersion = 2 }, record.ErrSchemaTooOld, "minimum 3"),
		Entry("2: schema 1", func(e *record.Entry) { e.SchemaVersion = 1 }, record.ErrSchemaTooOld, "schema_version 1"),
		Entry("3: log-prob count", func(e *record.Entry) { e.GenerationLogProbs = []float64{-1} }, record.ErrInvalid, "2 generation_token_ids but 1"),
		Entry("3 wins over 4", func(e *record.Entry) { e.GenerationLogProbs = nil; e.TokenItemIndex = ptr(9) }, record.ErrInvalid, "generation_log_probs"),
		Entry("4: index too large", func(e *record.Entry) { e.TokenItemIndex = ptr(1) }, record.ErrInvalid, "token_item_index 1"),
		Entry("4: negative index", func(e *record.Entry) { e.TokenItemIndex = ptr(-1) }, record.ErrInvalid, "token_item_index -1"),
		Entry("4: index without items", func(e *record.Entry) { e.OutputItems = nil }, record.ErrInvalid, "length 0"),
		Entry("5: resolved without parent", func(e *record.Entry) { e.ParentResolution = ptr(record.ResolutionResolved) }, record.ErrInvalid, "needs a parent_call_id"),
		Entry("5: resolved with empty parent", func(e *record.Entry) {
			e.ParentResolution = ptr(record.ResolutionResolved)
			e.ParentCallID = ptr("")
		}, record.ErrInvalid, "needs a parent_call_id"),
		Entry("6: root with parent", func(e *record.Entry) { e.ParentCallID = ptr("p") }, record.ErrInvalid, "root must not"),
		Entry("6: unresolved with empty parent", func(e *record.Entry) {
			e.ParentResolution = ptr(record.ResolutionUnresolved)
			e.ParentCallID = ptr("")
		}, record.ErrInvalid, "unresolved must not"),
		Entry("7: delta on a root", func(e *record.Entry) { e.PromptIsDelta = true }, record.ErrInvalid, "prompt_is_delta"),
		Entry("7: delta without verdict", func(e *record.Entry) { e.PromptIsDelta = true; e.ParentResolution = nil; e.ParentCallID = ptr("p") }, record.ErrInvalid, "prompt_is_delta"),
	)

	It("accepts a resolved delta record and a pre-3-style record without verdict", func() {
		e := validEntry()
		e.ParentResolution = ptr(record.ResolutionResolved)
		e.ParentCallID = ptr("p")
		e.PromptIsDelta = true
		Expect(e.Validate()).To(Succeed())
		e = validEntry()
		e.ParentResolution = nil
		e.ParentCallID = ptr("p")
		Expect(e.Validate()).To(Succeed())
	})
})
