package jsonscan_test

import (
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/jsonscan"
)

// stringRunByByte is StringRun's definition, one byte at a time.
func stringRunByByte(b []byte, i int, nonASCII bool) int {
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || (nonASCII && c >= 0x80) {
			return i
		}
	}
	return len(b)
}

var _ = Describe("StringRun", func() {
	DescribeTable("stops at the first byte of its classes, wherever it falls in a word",
		func(stop byte, nonASCII, stops bool) {
			for n := range 20 { // the stop at every offset of two and a half words
				for from := range min(n+1, 9) {
					b := []byte(strings.Repeat("a", n) + string([]byte{stop}) + "\"tail")
					want := n
					if !stops {
						want = n + 1 // the quote after it
					}
					Expect(jsonscan.StringRun(b, from, nonASCII)).To(Equal(want), "%q from %d", b, from)
				}
			}
		},
		Entry("a quote", byte('"'), false, true),
		Entry("a backslash", byte('\\'), false, true),
		Entry("a control character", byte('\n'), false, true),
		Entry("NUL", byte(0), false, true),
		Entry("0x1f, the last control character", byte(0x1f), false, true),
		Entry("a space (not a control character)", byte(' '), false, false),
		Entry("0x7f (not a JSON control character)", byte(0x7f), false, false),
		Entry("a UTF-8 lead byte, looking for non-ASCII", byte(0xc3), true, true),
		Entry("a UTF-8 lead byte, not looking for non-ASCII", byte(0xc3), false, false),
		Entry("0xff, looking for non-ASCII", byte(0xff), true, true),
	)

	It("returns the length when nothing stops it", func() {
		for n := range 20 {
			Expect(jsonscan.StringRun([]byte(strings.Repeat("x", n)), 0, true)).To(Equal(n))
		}
	})

	It("is not misled by a borrow across bytes (a match below other bytes of the class)", func() {
		b := []byte("ab\x00\x1f\"\\\xffz") // every class in one word, lowest first
		for from := range b {
			Expect(jsonscan.StringRun(b, from, true)).To(Equal(stringRunByByte(b, from, true)), "from %d", from)
			Expect(jsonscan.StringRun(b, from, false)).To(Equal(stringRunByByte(b, from, false)), "from %d", from)
		}
	})
})

// FuzzStringRun checks the word-at-a-time scan against its byte-by-byte
// definition.
func FuzzStringRun(f *testing.F) {
	for _, s := range []string{"", "plain text that runs on", "a\"b", "é\\\x01", "\x80\x7f\x20\x1f"} {
		f.Add([]byte(s), 0, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, from int, nonASCII bool) {
		if from < 0 || from > len(b) {
			return
		}
		if got, want := jsonscan.StringRun(b, from, nonASCII), stringRunByByte(b, from, nonASCII); got != want {
			t.Fatalf("StringRun(%q, %d, %v) = %d, want %d", b, from, nonASCII, got, want)
		}
	})
}
