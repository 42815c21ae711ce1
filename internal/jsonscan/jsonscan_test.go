package jsonscan_test

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/jsonscan"
)

var documents = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `-0.5e+3`, `1E9`, `true`, `false`, `null`, ` {"a" : [1, {"b": "\u00e9\n"}], "c": null} `,
	"\"\xff\"", `"\ud800"`, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `+1`, `1e`, `"\x"`, `"\u12g4"`, "\"a\tb\"",
	`{"a"}`, `{"a":}`, `{1:2}`, `[1 2]`, `tru`, `nul`, `{"a":1}}`, `[`, ``, `  `, `"`, `{"a":"b"`,
	strings.Repeat("[", 600) + strings.Repeat("]", 600),
}

var _ = Describe("Document", func() {
	It("accepts exactly what encoding/json accepts, short of the nesting limit", func() {
		for _, d := range documents {
			want := json.Valid([]byte(d))
			if strings.HasPrefix(d, strings.Repeat("[", jsonscan.MaxDepth+1)) {
				want = false // deeper than the scanner goes: the caller falls back
			}
			Expect(jsonscan.Document([]byte(d))).To(Equal(want), d)
		}
	})

	DescribeTable("PlainString decodes only strings that need no unescaping",
		func(raw string, want string, ok bool) {
			got, gotOK := jsonscan.PlainString([]byte(raw))
			Expect(gotOK).To(Equal(ok))
			Expect(got).To(Equal(want))
		},
		Entry("plain", `"hello"`, "hello", true),
		Entry("non-ASCII", `"héllo"`, "héllo", true),
		Entry("escaped", `"a\"b"`, "", false),
		Entry("invalid UTF-8 (encoding/json substitutes U+FFFD)", "\"\xff\"", "", false),
		Entry("not a string", `12`, "", false),
	)

	DescribeTable("PlainKey tells keys that can only match a field exactly",
		func(key string, escaped, want bool) {
			Expect(jsonscan.PlainKey([]byte(key), escaped)).To(Equal(want))
		},
		Entry("lower-case", "max_tokens", false, true),
		Entry("upper-case letters", "Model", false, false),
		Entry("non-ASCII (the Kelvin sign folds to k)", "\u212aey", false, false),
		Entry("escaped", "model", true, false),
	)

	It("lets ObjectAt's and ArrayAt's readers say where each value ends", func() {
		b := []byte(`{"a": [1, {"x": "y"}], "b" : null}`)
		var keys, elems []string
		end, ok := jsonscan.ObjectAt(b, 0, func(key []byte, _ bool, v int) (int, bool) {
			keys = append(keys, string(key))
			if string(key) != "a" {
				return jsonscan.ValueDepth(b, v, 1)
			}
			return jsonscan.ArrayAt(b, v, func(e int) (int, bool) {
				eEnd, ok := jsonscan.ValueDepth(b, e, 2)
				elems = append(elems, string(b[e:eEnd]))
				return eEnd, ok
			})
		})
		Expect(ok).To(BeTrue())
		Expect(end).To(Equal(len(b)))
		Expect(keys).To(Equal([]string{"a", "b"}))
		Expect(elems).To(Equal([]string{`1`, `{"x": "y"}`}))
	})

	DescribeTable("ObjectAt and ArrayAt fail when a reader stops short of a value's end",
		func(doc string, walk func(b []byte) bool) {
			Expect(walk([]byte(doc))).To(BeFalse())
		},
		Entry("an object value read one byte short", `{"a":12}`, func(b []byte) bool {
			_, ok := jsonscan.ObjectAt(b, 0, func(_ []byte, _ bool, v int) (int, bool) { return v + 1, true })
			return ok
		}),
		Entry("an array element read one byte short", `[12,3]`, func(b []byte) bool {
			_, ok := jsonscan.ArrayAt(b, 0, func(v int) (int, bool) { return v + 1, true })
			return ok
		}),
		Entry("a reader that refuses", `[1]`, func(b []byte) bool {
			_, ok := jsonscan.ArrayAt(b, 0, func(v int) (int, bool) { return v + 1, false })
			return ok
		}),
	)

	// known is how many bytes of doc an earlier scan checked (up to the end
	// of an element); ArrayFrom agrees with Value on the whole array.
	DescribeTable("ArrayFrom ends an array where Value does, from a known element's end",
		func(doc string, known int, wantOK bool) {
			b := []byte(doc + ` , "after"`)
			end, ok := jsonscan.ArrayFrom(b, known, 1)
			Expect(ok).To(Equal(wantOK))
			if wantOK {
				whole, wholeOK := jsonscan.Value(b, 0)
				Expect(wholeOK).To(BeTrue())
				Expect(end).To(Equal(whole))
				Expect(end).To(Equal(len(doc)))
			}
		},
		Entry("the same list", `[{"a":1},{"b":2}]`, len(`[{"a":1},{"b":2}`), true),
		Entry("two elements more", `[{"a":1}, {"b":2} ,[3, "x"]]`, len(`[{"a":1}`), true),
		Entry("whitespace before the bracket", "[1,2 \n]", len(`[1,2`), true),
		Entry("a known number that goes on", `[1,23]`, len(`[1,2`), false),
		Entry("a bad element after the known ones", `[{"a":1},{"b":}]`, len(`[{"a":1}`), false),
		Entry("a trailing comma", `[{"a":1},]`, len(`[{"a":1}`), false),
		Entry("no closing bracket", `[{"a":1},{"b":2}`, len(`[{"a":1}`), false),
	)
})

// FuzzDocument checks the scanner's grammar against encoding/json's.
func FuzzDocument(f *testing.F) {
	for _, d := range documents {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := jsonscan.Document(b), json.Valid(b)
		if got && !want {
			t.Fatalf("scanner accepts %q, encoding/json does not", b)
		}
		if !got && want && !strings.Contains(string(b), strings.Repeat("[", 100)) && !strings.Contains(string(b), strings.Repeat("{", 100)) {
			// Only nesting deeper than MaxDepth may be declined.
			depth, maxDepth := 0, 0
			for _, c := range b {
				switch c {
				case '[', '{':
					depth++
					maxDepth = max(maxDepth, depth)
				case ']', '}':
					depth--
				}
			}
			if maxDepth <= jsonscan.MaxDepth {
				t.Fatalf("scanner rejects %q, encoding/json accepts it", b)
			}
		}
	})
}

// BenchmarkValue skips a 200-message conversation of about 130 KB, as a
// proxy skips a request member it does not read.
func BenchmarkValue(b *testing.B) {
	var msgs []map[string]any
	for range 200 {
		msgs = append(msgs, map[string]any{"role": "user", "content": strings.Repeat("check the build log and report what failed ", 15)})
	}
	doc, err := json.Marshal(map[string]any{"messages": msgs})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if end, ok := jsonscan.Value(doc, 0); !ok || end != len(doc) {
			b.Fatal("not scanned whole")
		}
	}
}
