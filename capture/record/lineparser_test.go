package record_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

// chainLine renders a record line with the given token array texts (the
// bytes between the brackets), so tests control the exact bytes.
func chainLine(id, prompt, gen, logProbs string) []byte {
	return []byte(fmt.Sprintf(`{"rollout_id":"r","model_call_id":%q,"prompt_token_ids":[%s],"generation_token_ids":[%s],"generation_log_probs":[%s]}`,
		id, prompt, gen, logProbs))
}

// parseBoth parses lines in order with one LineParser and, separately, with
// ParseLine, and requires identical entries and identical errors.
func parseBoth(lines ...[]byte) []*record.Entry {
	var p record.LineParser
	var out []*record.Entry
	for i, l := range lines {
		want, wantErr := record.ParseLine(l)
		got, gotErr := p.Parse(l)
		if wantErr != nil {
			ExpectWithOffset(1, gotErr).To(HaveOccurred(), "line %d", i)
			ExpectWithOffset(1, gotErr.Error()).To(Equal(wantErr.Error()), "line %d", i)
			ExpectWithOffset(1, got).To(BeNil())
			out = append(out, nil)
			continue
		}
		ExpectWithOffset(1, gotErr).NotTo(HaveOccurred(), "line %d", i)
		ExpectWithOffset(1, got).To(Equal(want), "line %d", i)
		out = append(out, got)
	}
	return out
}

var _ = Describe("LineParser", func() {
	It("reads a chained rollout exactly as ParseLine does, continuing one array", func() {
		es := parseBoth(
			chainLine("a", "1,2,3", "4,5", "-0.5,-1"),
			chainLine("b", "1,2,3,4,5,6,7", "8", "-0.25"),
			chainLine("c", "1,2,3,4,5,6,7,8,9", "10,11", "0,-2"),
		)
		Expect(es[2].PromptTokenIDs).To(Equal([]int{1, 2, 3, 4, 5, 6, 7, 8, 9}))
		// The chain's prompts and generations live in one array...
		Expect(&es[2].PromptTokenIDs[0]).To(BeIdenticalTo(&es[0].PromptTokenIDs[0]))
		Expect(&es[2].PromptTokenIDs[3]).To(BeIdenticalTo(&es[0].GenerationTokenIDs[0]))
		// ...and appending to one entry's ids never changes another's.
		for _, e := range es {
			Expect(cap(e.PromptTokenIDs)).To(Equal(len(e.PromptTokenIDs)))
			Expect(cap(e.GenerationTokenIDs)).To(Equal(len(e.GenerationTokenIDs)))
		}
		_ = append(es[0].PromptTokenIDs, 99)
		_ = append(es[0].GenerationTokenIDs, 99)
		Expect(es[1].PromptTokenIDs).To(Equal([]int{1, 2, 3, 4, 5, 6, 7}))
		Expect(es[2].PromptTokenIDs).To(Equal([]int{1, 2, 3, 4, 5, 6, 7, 8, 9}))
	})

	It("starts a new array for a retry and for a branch, leaving earlier entries intact", func() {
		es := parseBoth(
			chainLine("a", "1,2,3", "4,5", "-0.5,-1"),
			chainLine("b", "1,2,3,4,5,6", "7", "-1"),
			chainLine("b-retry", "1,2,3,4,5,6", "70", "-1"),
			chainLine("c", "1,2,3,4,5,6,70,8", "9", "-1"),
			chainLine("b-branch", "1,2,3,4,5,60", "61", "-1"),
			chainLine("d", "1,2,3,4,5,60,61,62", "63", "-1"),
		)
		Expect(es[0].PromptTokenIDs).To(Equal([]int{1, 2, 3}))
		Expect(es[0].GenerationTokenIDs).To(Equal([]int{4, 5}))
		Expect(es[1].PromptTokenIDs).To(Equal([]int{1, 2, 3, 4, 5, 6}))
		Expect(es[1].GenerationTokenIDs).To(Equal([]int{7}))
		Expect(es[2].GenerationTokenIDs).To(Equal([]int{70}))
		Expect(es[3].PromptTokenIDs).To(Equal([]int{1, 2, 3, 4, 5, 6, 70, 8}))
		Expect(es[4].PromptTokenIDs).To(Equal([]int{1, 2, 3, 4, 5, 60}))
		Expect(es[5].PromptTokenIDs).To(Equal([]int{1, 2, 3, 4, 5, 60, 61, 62}))
	})

	DescribeTable("gives ParseLine's result whatever follows the previous line's text",
		func(second string) {
			parseBoth(chainLine("a", "1,2,3", "4,5", "-0.5,-1"), chainLine("b", second, "9", "-1"))
		},
		Entry("the whole previous prompt", "1,2,3"),
		Entry("prompt and generation", "1,2,3,4,5"),
		Entry("prompt, generation and more", "1,2,3,4,5,6"),
		Entry("a longer last id (not a boundary)", "1,2,34,5"),
		Entry("a longer last generation id", "1,2,3,4,56"),
		Entry("a shorter prefix", "1,2"),
		Entry("a different array", "7,8,9"),
		Entry("spaces after the reused text", "1,2,3, 4,5 ,6"),
		Entry("a trailing comma after the reused text", "1,2,3,"),
		Entry("a trailing comma after the generation", "1,2,3,4,5,"),
		Entry("an invalid element after the reused text", "1,2,3,x"),
		Entry("a lenient element after the reused text", `1,2,3,"4",5.0`),
		Entry("an empty array", ""),
	)

	It("reuses text that was itself read leniently", func() {
		parseBoth(
			chainLine("a", ` 1, "2" ,3.0 `, `4 `, "-0.5"),
			chainLine("b", ` 1, "2" ,3.0 ,4 ,5`, "6", "-1"),
			chainLine("c", ` 1, "2" ,3.0 ,4 ,5,6,7`, "8", "-1"),
		)
	})

	It("does not treat an empty previous array as a piece", func() {
		// "[,1]" is not JSON: an empty previous prompt must not make it one.
		parseBoth(chainLine("a", "", "4", "-0.5"), chainLine("b", ",1", "2", "-1"))
		parseBoth(chainLine("a", " ", "", ""), chainLine("b", " ,1", "2", "-1"))
	})

	It("compares with nothing after a refused line", func() {
		bad := []byte(strings.Replace(string(chainLine("x", "1,2,3", "4,5", "-0.5")), `"generation_log_probs":[-0.5]`, `"generation_log_probs":[]`, 1))
		es := parseBoth(chainLine("a", "1,2,3", "4,5", "-0.5,-1"), bad, chainLine("b", "1,2,3,4,5,6", "7", "-1"))
		Expect(es[1]).To(BeNil())
		Expect(es[2].PromptTokenIDs).To(Equal([]int{1, 2, 3, 4, 5, 6}))
	})

	It("reports a bad record after a reused prefix as ParseLine does", func() {
		parseBoth(chainLine("a", "1,2,3", "4,5", "-0.5,-1"), chainLine("b", "1,2,3,4,5,-", "6", "-1"))
		parseBoth(chainLine("a", "1,2,3", "4,5", "-0.5,-1"), []byte(`{"rollout_id":"r","model_call_id":"b","prompt_token_ids":[1,2,3,4,5`))
	})
})

// FuzzLineParser checks that parsing lines in order with a LineParser gives,
// for each, exactly ParseLine's entry or error, and that later lines never
// change entries returned earlier. Each line is built from the previous
// one's token text so that reuse actually happens.
func FuzzLineParser(f *testing.F) {
	f.Add("1,2,3", "4,5", "6,7", "", "8")
	f.Add(" 1, \"2\" ", "3.0 ", "4", " ", "")
	f.Add("1", "", "", "0", ",")
	f.Add("1,2", "3", "", ",", "]")
	f.Fuzz(func(t *testing.T, prompt, gen, more, sep, more2 string) {
		second := prompt + sep + gen + more
		lines := [][]byte{
			chainLine("a", prompt, gen, strings.Repeat("-1,", strings.Count(gen, ","))+"-1"),
			chainLine("b", second, "9", "-1"),
			chainLine("c", second+",9"+more2, "8", "-1"),
			chainLine("b2", second, "10", "-1"),
			chainLine("d", second+",10", "11", "-1"),
		}
		var p record.LineParser
		got := make([]*record.Entry, len(lines))
		for i, l := range lines {
			want, wantErr := record.ParseLine(l)
			e, gotErr := p.Parse(l)
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("line %d: ParseLine error %v, LineParser error %v", i, wantErr, gotErr)
			}
			if wantErr != nil {
				if wantErr.Error() != gotErr.Error() {
					t.Fatalf("line %d: errors differ:\n%v\n%v", i, wantErr, gotErr)
				}
				continue
			}
			if !reflect.DeepEqual(want, e) {
				t.Fatalf("line %d: entries differ:\n%#v\n%#v", i, want, e)
			}
			got[i] = e
		}
		for i, e := range got {
			if e == nil {
				continue
			}
			want, _ := record.ParseLine(lines[i])
			if !reflect.DeepEqual(want, e) {
				t.Fatalf("entry %d changed after later lines:\n%#v\n%#v", i, want, e)
			}
		}
	})
}
