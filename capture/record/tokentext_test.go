package record_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

// withPrompt is a valid entry whose prompt ids are ids, with the text they
// were parsed from when tt is not zero.
func withPrompt(ids []int, tt record.TokenText) *record.Entry {
	e := validEntry()
	e.PromptTokenIDs = ids
	e.UsePromptText(tt)
	return e
}

// marshalled is e's canonical line; a test failure when it has none.
func marshalled(e *record.Entry) []byte {
	GinkgoHelper()
	line, err := e.MarshalCanonical()
	Expect(err).NotTo(HaveOccurred())
	return line
}

var _ = Describe("ParseTokenIDs and a record's prompt text", func() {
	DescribeTable("reads integer arrays as encoding/json does, and keeps the text only when it is canonical",
		func(raw string, want []int, canonical bool) {
			ids, tt, ok := record.ParseTokenIDs([]byte(raw))
			Expect(ok).To(BeTrue())
			Expect(ids).To(Equal(want))
			var ref []int
			Expect(json.Unmarshal([]byte(raw), &ref)).To(Succeed())
			Expect(ids).To(Equal(ref))
			plain, ok := record.ParseIntArray([]byte(raw))
			Expect(ok).To(BeTrue())
			Expect(plain).To(Equal(ids))

			formatted := marshalled(withPrompt(ids, record.TokenText{}))
			Expect(marshalled(withPrompt(ids, tt))).To(Equal(formatted), "the text never changes the line")
			if canonical {
				Expect(bytes.Contains(formatted, []byte(`"prompt_token_ids":`+strings.TrimSpace(raw)))).To(BeTrue())
			} else {
				Expect(tt).To(Equal(record.TokenText{}))
			}
		},
		Entry("short ids, read a word at a time", `[0,1,22,333,4444,55555,666666,7777777]`, []int{0, 1, 22, 333, 4444, 55555, 666666, 7777777}, true),
		Entry("ids of 8 to 18 digits, read a digit at a time", `[12345678,123456789012345678]`, []int{12345678, 123456789012345678}, true),
		Entry("negative ids", `[-5,7]`, []int{-5, 7}, true),
		Entry("an empty array", `[]`, []int{}, true),
		Entry("spaces outside the array", " \n[1,2]\t", []int{1, 2}, true),
		Entry("spaces inside the array", `[1, 2]`, []int{1, 2}, false),
		Entry("spaces inside an empty array", `[ ]`, []int{}, false),
		Entry("-0, which is written 0", `[-0,1]`, []int{0, 1}, false),
		Entry("an id at the end of the input, shorter than a word", `[5]`, []int{5}, true),
		Entry("ids ending on a word boundary", `[1234567,123456]`, []int{1234567, 123456}, true),
		Entry("a 7-digit id at the end of the input", `[1,2,3,4,5,6,7,8,9,1234567]`, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 1234567}, true),
		Entry("short ids followed by a long one", `[1,22,333,4444,55555,666666,7777777,12345678]`, []int{1, 22, 333, 4444, 55555, 666666, 7777777, 12345678}, true),
	)

	It("reads a long prompt's ids as encoding/json does", func() {
		r := rand.New(rand.NewPCG(7, 7))
		for range 200 {
			ids := make([]int, r.IntN(400))
			for i := range ids {
				ids[i] = r.IntN([]int{10, 1000, 151936, 9999999}[r.IntN(4)])
			}
			raw, err := json.Marshal(ids)
			Expect(err).NotTo(HaveOccurred())
			got, tt, ok := record.ParseTokenIDs(raw)
			Expect(ok).To(BeTrue(), "%s", raw)
			Expect(got).To(Equal(ids))
			Expect(tt).NotTo(Equal(record.TokenText{}), "compact ids keep their text")
		}
	})

	DescribeTable("refuses what is not a plain integer array (callers decode it generically)",
		func(raw string) {
			_, tt, ok := record.ParseTokenIDs([]byte(raw))
			Expect(ok).To(BeFalse())
			Expect(tt).To(Equal(record.TokenText{}))
			_, ok = record.ParseIntArray([]byte(raw))
			Expect(ok).To(BeFalse())
		},
		Entry("a leading zero", `[01,2]`),
		Entry("a leading zero in a long number", `[0123456789]`),
		Entry("a fraction", `[1.0]`),
		Entry("an exponent", `[1e3]`),
		Entry("19 digits", `[1234567890123456789]`),
		Entry("a trailing comma", `[1,2,]`),
		Entry("a missing comma", `[1 2]`),
		Entry("a lone sign", `[-]`),
		Entry("a cut array", `[1,2`),
		Entry("trailing data", `[1,2]x`),
		Entry("not an array", `{"a":1}`),
		Entry("a string element", `[1,"2"]`),
		Entry("a leading zero after a word of ids", `[1234567,1234567,01]`),
		Entry("an empty element between ids", `[1234567,,1]`),
		Entry("a non-digit inside a word", `[123a567,1]`),
		Entry("a byte above 0x7f", "[12\xb3,1]"),
	)

	DescribeTable("ParseTokenIDsAfter reads what ParseTokenIDs reads, whatever the previous prompt was",
		func(prev, raw string) {
			_, prevText, ok := record.ParseTokenIDs([]byte(prev))
			Expect(ok).To(BeTrue())
			want, wantText, wantOK := record.ParseTokenIDs([]byte(raw))
			got, gotText, gotOK := record.ParseTokenIDsAfter([]byte(raw), prevText)
			Expect(gotOK).To(Equal(wantOK))
			Expect(got).To(Equal(want))
			Expect(gotText.Text()).To(Equal(wantText.Text()))
		},
		Entry("the previous prompt and more", `[1,22,333]`, `[1,22,333,4444,5]`),
		Entry("the previous prompt's last id going on", `[1,22,333]`, `[1,22,3334,5]`),
		Entry("the same prompt", `[1,22,333]`, `[1,22,333]`),
		Entry("a shorter prompt", `[1,22,333]`, `[1,22]`),
		Entry("a prompt that differs in its first id", `[1,22,333]`, `[7,22,333]`),
		Entry("a one-id prompt", `[5]`, `[5,6]`),
		Entry("spaces after the shared part", `[1,22,333]`, `[1,22,333, 4]`),
		Entry("a bad element after the shared part", `[1,22,333]`, `[1,22,333,x]`),
		Entry("a cut prompt", `[1,22,333]`, `[1,22,333,4`),
		Entry("an empty previous prompt", `[]`, `[1,2]`),
		Entry("spaces before the array", `[1,22,333]`, ` [1,22,333,4]`),
		Entry("ids of more than 7 digits", `[12345678,2]`, `[12345678,2,123456789]`),
	)

	It("ParseTokenIDsAfter reads the whole array without a previous text", func() {
		got, tt, ok := record.ParseTokenIDsAfter([]byte(`[1,2]`), record.TokenText{})
		Expect(ok).To(BeTrue())
		Expect(got).To(Equal([]int{1, 2}))
		Expect(tt.Text()).To(Equal([]byte(`[1,2]`)))
	})

	It("formats the ids again once they no longer equal the text's", func() {
		raw := []byte(`[10,20,30]`)
		ids, tt, ok := record.ParseTokenIDs(raw)
		Expect(ok).To(BeTrue())
		e := withPrompt(ids, tt)
		ids[1] = 21 // in place, behind the entry's back
		Expect(marshalled(e)).To(ContainSubstring(`"prompt_token_ids":[10,21,30]`))
		e.PromptTokenIDs = []int{10, 20} // a new slice
		Expect(marshalled(e)).To(ContainSubstring(`"prompt_token_ids":[10,20]`))
		Expect(e.Clone().MarshalCanonical()).To(Equal(marshalled(e)))
	})
})

// FuzzParseTokenIDs checks ParseTokenIDs against encoding/json and that a
// record written with the text it returns is byte for byte the record
// written by formatting the ids.
func FuzzParseTokenIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[0]`, `[-0]`, `[ 1 ,2 ]`, `[01]`, `[1e2]`, `[]`, `[123456789012345678]`,
		`[1234567,12345678]`, `[9999999,10000000]`, `[1,`, `[-9223372036854775807]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ids, tt, ok := record.ParseTokenIDs(raw)
		plain, plainOK := record.ParseIntArray(raw)
		if ok != plainOK || !slices.Equal(ids, plain) {
			t.Fatalf("ParseTokenIDs and ParseIntArray disagree on %q", raw)
		}
		if !ok {
			return
		}
		var ref []int
		if err := json.Unmarshal(raw, &ref); err != nil || !slices.Equal(ids, ref) {
			t.Fatalf("%q read as %v; encoding/json: %v, %v", raw, ids, ref, err)
		}
		e := record.Entry{SchemaVersion: record.SchemaVersion, RolloutID: "r", ModelCallID: "c", PromptTokenIDs: ids}
		formatted, err := e.MarshalCanonical()
		if err != nil {
			t.Fatal(err)
		}
		e.UsePromptText(tt)
		if withText, err := e.MarshalCanonical(); err != nil || !bytes.Equal(withText, formatted) {
			t.Fatalf("%q: the line with its text differs:\n%s\n%s", raw, withText, formatted)
		}
	})
}

// FuzzParseTokenIDsAfter checks that reading ids after a previous prompt's
// text gives exactly what reading them alone gives.
func FuzzParseTokenIDsAfter(f *testing.F) {
	f.Add([]byte(`[1,22,333]`), []byte(`[1,22,333,4444]`))
	f.Add([]byte(`[1,22,333]`), []byte(`[1,22,3334]`))
	f.Add([]byte(`[151644,1812,10,852,4585,151645,10,151644,1816,10]`), []byte(`[151644,1812,10,852,4585,151645,10,151644,1816,10,77,0]`))
	f.Add([]byte(`[0]`), []byte(`[0, 1]`))
	f.Fuzz(func(t *testing.T, prev, raw []byte) {
		_, prevText, ok := record.ParseTokenIDs(prev)
		if !ok {
			return
		}
		want, wantText, wantOK := record.ParseTokenIDs(raw)
		got, gotText, gotOK := record.ParseTokenIDsAfter(raw, prevText)
		if gotOK != wantOK || !slices.Equal(got, want) || !bytes.Equal(gotText.Text(), wantText.Text()) {
			t.Fatalf("after %q, %q read as %v %q %v; alone %v %q %v", prev, raw, got, gotText.Text(), gotOK, want, wantText.Text(), wantOK)
		}
	})
}
