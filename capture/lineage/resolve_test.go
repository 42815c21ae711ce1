package lineage_test

import (
	"errors"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
)

// world is a small rollout: records captured through Stamp and indexed.
type world struct {
	ix      *lineage.Index
	records map[string]*record.Entry
}

func newWorld() *world {
	return &world{ix: lineage.NewIndex(), records: map[string]*record.Entry{}}
}

// capture records one call the way the proxy does: resolve, stamp, index.
func (w *world) capture(callID string, request []any, outputs string, prompt, gen []int) (*record.Entry, lineage.Decision) {
	GinkgoHelper()
	d := w.ix.Resolve(request, w.cumulative)
	e := &record.Entry{
		SchemaVersion: record.SchemaVersion, RolloutID: "r", ModelCallID: callID,
		PromptTokenIDs: prompt, GenerationTokenIDs: gen, GenerationLogProbs: make([]float64, len(gen)),
	}
	for _, it := range items(outputs) {
		e.OutputItems = append(e.OutputItems, it.(map[string]any))
	}
	Expect(lineage.Stamp(e, request, d)).To(Succeed())
	Expect(e.Validate()).To(Succeed())
	Expect(w.ix.Add(e)).To(Succeed())
	w.records[callID] = e
	return e, d
}

func (w *world) cumulative(callID string) ([]int, error) {
	e, ok := w.records[callID]
	if !ok {
		return nil, fmt.Errorf("no record %s", callID)
	}
	return e.Cumulative(), nil
}

// join concatenates JSON arrays of items.
func join(parts ...[]any) []any {
	var out []any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var (
	task      = decodeItems(`[{"role":"system","content":"You are terse."},{"role":"user","content":"Fix the test."}]`)
	stepOne   = `[{"type":"reasoning","summary":[{"type":"summary_text","text":"look first"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Running tests."}]},{"type":"function_call","call_id":"c1","name":"bash","arguments":"{\"cmd\": \"pytest\"}"}]`
	toolOut   = decodeItems(`[{"type":"function_call_output","call_id":"c1","output":"1 failed"}]`)
	finalTurn = `[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Fixed."}]}]`
)

var _ = Describe("Index.Resolve", func() {
	var w *world
	BeforeEach(func() { w = newWorld() })

	It("makes a request without model-authored items a ROOT", func() {
		_, d := w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		Expect(d).To(Equal(lineage.Decision{Resolution: record.ResolutionRoot}))
	})

	It("resolves a continuation that echoes the parent's turns and appends tool results", func() {
		a, _ := w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		b, d := w.capture("b", join(task, items(stepOne), toolOut), finalTurn, []int{1, 2, 3, 4, 5}, []int{6})
		Expect(d.Resolution).To(Equal(record.ResolutionResolved))
		Expect(d.ParentCallID).To(Equal("a"))
		Expect(d.ParentCumulative).To(Equal([]int{1, 2, 3, 4}))
		Expect(d.ParentDigest).To(Equal(*a.Digest))
		Expect(d.Reason).To(BeEmpty())
		Expect(*b.ParentCallID).To(Equal("a"))
		Expect(*b.ParentResolution).To(Equal(record.ResolutionResolved))
	})

	It("ignores a reasoning-only difference in the echo", func() {
		w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		echo := items(stepOne)[1:] // reasoning dropped
		d := w.ix.Resolve(join(task, echo, toolOut), w.cumulative)
		Expect(d.Resolution).To(Equal(record.ResolutionResolved))
		Expect(d.ParentCallID).To(Equal("a"))
	})

	It("ignores a changed system prompt (instruction content is not digested)", func() {
		w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		changed := items(`[{"role":"system","content":"Today is another day."},{"role":"user","content":"Fix the test."}]`)
		d := w.ix.Resolve(join(changed, items(stepOne), toolOut), w.cumulative)
		Expect(d.Resolution).To(Equal(record.ResolutionResolved))
	})

	It("does not resolve when the parent's context was rewritten", func() {
		w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		rewritten := items(`[{"role":"system","content":"You are terse."},{"role":"user","content":"Summary of earlier work."}]`)
		d := w.ix.Resolve(join(rewritten, items(stepOne), toolOut), w.cumulative)
		Expect(d).To(Equal(lineage.Decision{Resolution: record.ResolutionUnresolved, Reason: lineage.ReasonNoMatch}))
	})

	It("does not resolve when the echoed assistant turn differs", func() {
		w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		edited := items(`[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Running tests!"}]},{"type":"function_call","call_id":"c1","name":"bash","arguments":"{\"cmd\": \"pytest\"}"}]`)
		d := w.ix.Resolve(join(task, edited, toolOut), w.cumulative)
		Expect(d.Resolution).To(Equal(record.ResolutionUnresolved))
		Expect(d.Reason).To(Equal(lineage.ReasonNoMatch))
	})

	It("does not resolve when the request is shorter than the parent's context", func() {
		w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		d := w.ix.Resolve(items(stepOne), w.cumulative)
		Expect(d.Reason).To(Equal(lineage.ReasonNoMatch))
	})

	It("calls the same text at two token sequences ambiguous", func() {
		w.capture("a1", task, stepOne, []int{1, 2}, []int{3, 4})
		w.capture("a2", task, stepOne, []int{1, 2}, []int{3, 9})
		d := w.ix.Resolve(join(task, items(stepOne), toolOut), w.cumulative)
		Expect(d).To(Equal(lineage.Decision{Resolution: record.ResolutionUnresolved, Reason: lineage.ReasonAmbiguous}))
	})

	It("collapses identical retries to the smallest call id", func() {
		w.capture("b-retry", task, stepOne, []int{1, 2}, []int{3, 4})
		w.capture("a-first", task, stepOne, []int{1, 2}, []int{3, 4})
		d := w.ix.Resolve(join(task, items(stepOne), toolOut), w.cumulative)
		Expect(d.Resolution).To(Equal(record.ResolutionResolved))
		Expect(d.ParentCallID).To(Equal("a-first"))
	})

	It("makes every request after an empty assistant turn ambiguous (§3.8 consequence)", func() {
		w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		afterTool := join(task, items(stepOne), toolOut)
		_, d := w.capture("empty", afterTool, `[{"type":"message","role":"assistant","content":[]}]`, []int{1, 2, 3, 4, 5}, []int{})
		Expect(d.ParentCallID).To(Equal("a"))
		Expect(w.records["empty"].ContinuationFingerprint).To(Equal(w.records["a"].ContinuationFingerprint))

		echoed := join(afterTool, items(`[{"type":"message","role":"assistant","content":[]},{"role":"user","content":"go on"}]`))
		Expect(w.ix.Resolve(echoed, w.cumulative).Reason).To(Equal(lineage.ReasonAmbiguous))
		Expect(w.ix.Resolve(afterTool, w.cumulative).Reason).To(Equal(lineage.ReasonAmbiguous), "a plain retry")
	})

	It("reports lookup_error when the parent's tokens cannot be read or do not match", func() {
		w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		req := join(task, items(stepOne), toolOut)
		failing := func(string) ([]int, error) { return nil, errors.New("disk gone") }
		Expect(w.ix.Resolve(req, failing).Reason).To(Equal(lineage.ReasonLookupError))
		wrong := func(string) ([]int, error) { return []int{1, 2, 3, 5}, nil }
		Expect(w.ix.Resolve(req, wrong).Reason).To(Equal(lineage.ReasonLookupError))
		Expect(w.ix.Resolve(req, nil).Reason).To(Equal(lineage.ReasonLookupError))
	})

	It("takes a known digest that is the parent's for the hash, and hashes any other", func() {
		w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		req := join(task, items(stepOne), toolOut)
		digest := *w.records["a"].Digest
		resolve := func(tokens []int, known string) lineage.Decision {
			return w.ix.ResolveKnown(lineage.Prepare(req), func(string) ([]int, string, error) { return tokens, known, nil })
		}
		d := resolve([]int{1, 2, 3, 4}, digest)
		Expect(d.Resolution).To(Equal(record.ResolutionResolved))
		Expect(d.ParentCumulative).To(Equal([]int{1, 2, 3, 4}))
		Expect(resolve([]int{1, 2, 3, 5}, digest).Resolution).To(Equal(record.ResolutionResolved),
			"the caller vouches for a known digest: it is not hashed again")
		Expect(resolve([]int{1, 2, 3}, digest).Reason).To(Equal(lineage.ReasonLookupError), "the length is still checked")
		Expect(resolve([]int{1, 2, 3, 5}, "not-the-digest").Reason).To(Equal(lineage.ReasonLookupError), "another digest: the tokens are hashed")
		Expect(resolve([]int{1, 2, 3, 4}, "not-the-digest").Resolution).To(Equal(record.ResolutionResolved))
		Expect(resolve([]int{1, 2, 3, 5}, "").Reason).To(Equal(lineage.ReasonLookupError))
	})

	It("reports lookup_error for an unfingerprintable request and resolver_unavailable without an index", func() {
		d := w.ix.Resolve([]any{"not an item"}, w.cumulative)
		Expect(d).To(Equal(lineage.Decision{Resolution: record.ResolutionUnresolved, Reason: lineage.ReasonLookupError}))
		var none *lineage.Index
		Expect(none.Resolve(join(task, items(stepOne)), w.cumulative).Reason).To(Equal(lineage.ReasonResolverUnavailable))
		Expect(none.Resolve(task, w.cumulative).Resolution).To(Equal(record.ResolutionRoot))
	})
})

var _ = Describe("Index.Add", func() {
	stamped := func(callID string, gen []int) *record.Entry {
		e := &record.Entry{SchemaVersion: 5, RolloutID: "r", ModelCallID: callID, PromptTokenIDs: []int{1}, GenerationTokenIDs: gen, GenerationLogProbs: make([]float64, len(gen))}
		e.OutputItems = []record.Item{{"role": "assistant", "content": "x"}}
		Expect(lineage.Stamp(e, task, lineage.Decision{Resolution: record.ResolutionRoot})).To(Succeed())
		return e
	}

	It("skips records without a fingerprint or with another fingerprint version", func() {
		ix := lineage.NewIndex()
		Expect(ix.Add(&record.Entry{ModelCallID: "none"})).To(Succeed())
		old := stamped("old", []int{2})
		v := 2
		old.FingerprintVersion = &v
		Expect(ix.Add(old)).To(Succeed())
		Expect(ix.Len()).To(Equal(0))
		unversioned := stamped("pre", []int{2})
		unversioned.FingerprintVersion = nil
		Expect(ix.Add(unversioned)).To(Succeed())
		Expect(ix.Len()).To(Equal(1))
	})

	It("accepts the same node twice but not a changed one", func() {
		ix := lineage.NewIndex()
		e := stamped("a", []int{2})
		Expect(ix.Add(e)).To(Succeed())
		Expect(ix.Add(e.Clone())).To(Succeed())
		Expect(ix.Len()).To(Equal(1))
		Expect(ix.Add(stamped("a", []int{3}))).To(MatchError(lineage.ErrReindex))
	})
})

var _ = Describe("Index under concurrent use", func() {
	It("serves Resolve while records are added", func() {
		w := newWorld()
		a, _ := w.capture("a", task, stepOne, []int{1, 2}, []int{3, 4})
		req := join(task, items(stepOne), toolOut)
		cum := a.Cumulative()
		lookup := func(string) ([]int, error) { return cum, nil }
		done := make(chan lineage.Decision, 8)
		for range 8 {
			go func() {
				defer GinkgoRecover()
				done <- w.ix.Resolve(req, lookup)
			}()
		}
		for i := range 20 {
			e := a.Clone()
			e.ModelCallID = fmt.Sprintf("other-%d", i)
			e.ContinuationFingerprint = fmt.Sprintf("fp-%d", i)
			Expect(w.ix.Add(e)).To(Succeed())
		}
		for range 8 {
			d := <-done
			Expect(d.ParentCallID).To(Equal("a"))
		}
		Expect(w.ix.Len()).To(Equal(21))
	})
})

var _ = Describe("Stamp", func() {
	newEntry := func() *record.Entry {
		return &record.Entry{
			SchemaVersion: 5, RolloutID: "r", ModelCallID: "c", PromptTokenIDs: []int{1, 2}, GenerationTokenIDs: []int{3},
			GenerationLogProbs: []float64{-1}, OutputItems: []record.Item{{"type": "message", "role": "assistant", "content": "hi"}},
		}
	}

	It("stamps unresolved/not_attempted when no decision was made", func() {
		e := newEntry()
		Expect(lineage.Stamp(e, task, lineage.Decision{})).To(Succeed())
		Expect(*e.ParentResolution).To(Equal(record.ResolutionUnresolved))
		Expect(e.ParentResolutionReason).To(Equal(lineage.ReasonNotAttempted))
		Expect(e.ParentCallID).To(BeNil())
		Expect(*e.FingerprintVersion).To(Equal(lineage.FingerprintVersion))
		Expect(e.ContinuationContextLen).To(Equal(2))
		wantCtx, _ := lineage.ConversationDigest(task)
		Expect(e.ContinuationContextDigest).To(Equal(wantCtx))
		wantFP, _ := lineage.AssistantFingerprint([]any{map[string]any{"role": "assistant", "content": "hi"}})
		Expect(e.ContinuationFingerprint).To(Equal(wantFP))
		Expect(*e.CumLen).To(Equal(3))
		wantDigest, _ := record.TokenDigest([]int{1, 2, 3})
		Expect(*e.Digest).To(Equal(wantDigest))
		Expect(e.Validate()).To(Succeed())
	})

	It("stamps a resolved decision and supports the delta transform", func() {
		e := newEntry()
		d := lineage.Decision{Resolution: record.ResolutionResolved, ParentCallID: "p", ParentCumulative: []int{1}}
		Expect(lineage.Stamp(e, task, d)).To(Succeed())
		Expect(*e.ParentCallID).To(Equal("p"))
		Expect(lineage.ApplyDelta(e, d)).To(BeTrue())
		Expect(e.PromptTokenIDs).To(Equal([]int{2}))
		Expect(e.PromptIsDelta).To(BeTrue())
		Expect(*e.CumLen).To(Equal(3), "cum_len still describes the full sequence")
		Expect(e.Validate()).To(Succeed())
		Expect(lineage.ApplyDelta(e, d)).To(BeFalse(), "already a delta")
	})

	It("keeps the full prompt when the parent is not a prefix or the call is not resolved", func() {
		e := newEntry()
		Expect(lineage.ApplyDelta(e, lineage.Decision{Resolution: record.ResolutionResolved, ParentCallID: "p", ParentCumulative: []int{9}})).To(BeFalse())
		Expect(lineage.ApplyDelta(e, lineage.Decision{Resolution: record.ResolutionRoot})).To(BeFalse())
		Expect(e.PromptTokenIDs).To(Equal([]int{1, 2}))
	})

	It("stamps a delta record from the parent cumulative", func() {
		e := newEntry()
		e.PromptIsDelta = true
		d := lineage.Decision{Resolution: record.ResolutionResolved, ParentCallID: "p", ParentCumulative: []int{7, 8}}
		Expect(lineage.Stamp(e, task, d)).To(Succeed())
		Expect(*e.CumLen).To(Equal(5))
		want, _ := record.TokenDigest([]int{7, 8, 1, 2, 3})
		Expect(*e.Digest).To(Equal(want))
	})

	DescribeTable("leaves the record unchanged on error",
		func(request []any, d lineage.Decision, mutate func(*record.Entry)) {
			e := newEntry()
			mutate(e)
			before := e.Clone()
			Expect(lineage.Stamp(e, request, d)).NotTo(Succeed())
			Expect(e).To(Equal(before))
		},
		Entry("unfingerprintable request", []any{"x"}, lineage.Decision{}, func(*record.Entry) {}),
		Entry("resolved without parent", task, lineage.Decision{Resolution: record.ResolutionResolved}, func(*record.Entry) {}),
		Entry("root with parent", task, lineage.Decision{Resolution: record.ResolutionRoot, ParentCallID: "p"}, func(*record.Entry) {}),
		Entry("negative token id", task, lineage.Decision{}, func(e *record.Entry) { e.PromptTokenIDs = []int{-1} }),
		Entry("delta without resolved parent", task, lineage.Decision{}, func(e *record.Entry) { e.PromptIsDelta = true }),
		Entry("unfingerprintable output item", task, lineage.Decision{}, func(e *record.Entry) {
			e.OutputItems = []record.Item{{"role": "assistant", "content": 5}}
		}),
	)
})
