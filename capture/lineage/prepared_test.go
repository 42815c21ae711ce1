package lineage_test

import (
	"encoding/json"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
)

// digestOrError is a digest, or the error text when there is none.
func digestOrError(d string, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return d
}

var _ = Describe("Prepared", func() {
	DescribeTable("gives the plain functions' answers, whatever order the prefixes are asked in",
		func(text string) {
			all := items(text)
			p := lineage.Prepare(all)
			Expect(digestOrError(p.Fingerprint())).To(Equal(digestOrError(lineage.AssistantFingerprint(all))))
			order := []int{}
			for n := range len(all) + 1 {
				order = append(order, n)
			}
			for n := len(all); n >= 0; n-- {
				order = append(order, n)
			}
			for _, n := range append(order, 1, len(all), 0, len(all)) {
				Expect(digestOrError(p.ConversationDigest(n))).To(Equal(digestOrError(lineage.ConversationDigest(all[:n]))), "first %d items", n)
			}
		},
		Entry("a tool exchange", chatToolExchange),
		Entry("Anthropic blocks", anthropicToolExchange),
		Entry("Responses items", responsesToolExchange),
		Entry("an unfingerprintable item in the middle", `[{"role":"user","content":"a"},{"role":"assistant","content":[5]},{"role":"user","content":"b"}]`),
		Entry("a non-object item last", `[{"role":"user","content":"a"},{"role":"assistant","content":"x"},"oops"]`),
	)

	It("stamps what Stamp stamps after the prefix digests of a resolution, and again on a second stamp", func() {
		request := items(chatToolExchange)
		d := lineage.Decision{Resolution: record.ResolutionResolved, ParentCallID: "p", ParentCumulative: []int{1}}
		fresh := &record.Entry{SchemaVersion: 5, RolloutID: "r", ModelCallID: "c", PromptTokenIDs: []int{1, 2}, GenerationTokenIDs: []int{3},
			GenerationLogProbs: []float64{-1}, OutputItems: []record.Item{{"role": "assistant", "content": "done"}}}
		want := fresh.Clone()
		Expect(lineage.Stamp(want, request, d)).To(Succeed())

		p := lineage.Prepare(request)
		_, err := p.ConversationDigest(2) // what Resolve asks for a parent two items back
		Expect(err).NotTo(HaveOccurred())
		for range 2 {
			got := fresh.Clone()
			Expect(p.Stamp(got, d)).To(Succeed())
			Expect(got).To(Equal(want))
		}
	})

	It("names the output item a fingerprint refuses by its place after the request items", func() {
		e := &record.Entry{SchemaVersion: 5, RolloutID: "r", ModelCallID: "c", PromptTokenIDs: []int{1}, GenerationTokenIDs: []int{2},
			GenerationLogProbs: []float64{-1}, OutputItems: []record.Item{{"role": "assistant", "content": 5}}}
		err := lineage.Prepare(items(chatToolExchange)).Stamp(e, lineage.Decision{})
		Expect(err).To(MatchError(lineage.ErrUnfingerprintable))
		Expect(err).To(MatchError(ContainSubstring("item 3")))
	})

	// samePrepared expects got to answer every question want answers, as
	// the plain functions do.
	samePrepared := func(got, want *lineage.Prepared, all []any) {
		GinkgoHelper()
		Expect(digestOrError(got.Fingerprint())).To(Equal(digestOrError(want.Fingerprint())))
		for n := len(all); n >= 0; n-- {
			Expect(digestOrError(got.ConversationDigest(n))).To(Equal(digestOrError(lineage.ConversationDigest(all[:n]))), "first %d items", n)
		}
		e := &record.Entry{SchemaVersion: 5, RolloutID: "r", ModelCallID: "c", PromptTokenIDs: []int{1, 2}, GenerationTokenIDs: []int{3},
			GenerationLogProbs: []float64{-1}, OutputItems: []record.Item{{"role": "assistant", "content": "done"}}}
		wantEntry, gotEntry := e.Clone(), e.Clone()
		wantErr := want.Stamp(wantEntry, lineage.Decision{Resolution: record.ResolutionRoot})
		gotErr := got.Stamp(gotEntry, lineage.Decision{Resolution: record.ResolutionRoot})
		Expect(fmt.Sprint(gotErr)).To(Equal(fmt.Sprint(wantErr)))
		Expect(gotEntry).To(Equal(wantEntry))
	}

	DescribeTable("resumed from an earlier request's checkpoint, gives Prepare's answers for the longer request",
		func(text string) {
			all := items(text)
			for k := range len(all) + 1 {
				cp, ok := lineage.Prepare(all[:k]).Checkpoint()
				if !ok {
					continue // the earlier items do not hash: nothing to resume from
				}
				// Twice from one checkpoint: resuming must not change it.
				for range 2 {
					samePrepared(lineage.PrepareAfter(cp, all), lineage.Prepare(all), all)
				}
			}
		},
		Entry("a tool exchange", chatToolExchange),
		Entry("Anthropic blocks", anthropicToolExchange),
		Entry("Responses items", responsesToolExchange),
		Entry("an unfingerprintable item after the checkpoints that hash", `[{"role":"user","content":"a"},{"role":"assistant","content":"x"},{"role":"assistant","content":[5]},{"role":"user","content":"b"}]`),
	)

	It("gives no checkpoint for items that do not hash", func() {
		_, ok := lineage.Prepare(items(`[{"role":"user","content":"a"},{"role":"assistant","content":[5]}]`)).Checkpoint()
		Expect(ok).To(BeFalse())
		_, ok = lineage.Prepare(items(`[{"role":"user","content":"a"},"oops"]`)).Checkpoint()
		Expect(ok).To(BeFalse())
	})

	DescribeTable("hashes everything again when the envelope changed or the request is shorter than the checkpoint's",
		func(earlier, later string) {
			decode := func(body string) []any {
				GinkgoHelper()
				var m map[string]any
				Expect(json.Unmarshal([]byte(body), &m)).To(Succeed())
				out, err := lineage.RequestItems(lineage.DialectChat, m)
				Expect(err).NotTo(HaveOccurred())
				return out
			}
			cp, ok := lineage.Prepare(decode(earlier)).Checkpoint()
			Expect(ok).To(BeTrue())
			all := decode(later)
			samePrepared(lineage.PrepareAfter(cp, all), lineage.Prepare(all), all)
		},
		Entry("tools added",
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"}]}`,
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"},{"role":"user","content":"b"}],"tools":[{"type":"function","function":{"name":"ls"}}]}`),
		Entry("tools changed",
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"}],"tools":[{"type":"function","function":{"name":"ls"}}]}`,
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"},{"role":"user","content":"b"}],"tools":[{"type":"function","function":{"name":"cat"}}]}`),
		Entry("tools dropped",
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"}],"tools":[{"type":"function","function":{"name":"ls"}}]}`,
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"},{"role":"user","content":"b"}]}`),
		Entry("the same tools",
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"}],"tools":[{"type":"function","function":{"name":"ls"}}]}`,
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"},{"role":"user","content":"b"}],"tools":[{"type":"function","function":{"name":"ls"}}]}`),
		Entry("fewer items",
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"},{"role":"user","content":"b"}]}`,
			`{"messages":[{"role":"user","content":"a"}]}`),
	)
})
