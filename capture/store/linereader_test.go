package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing/iotest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("the chunked line reader", func() {
	// lines of random lengths, some far longer than the chunk, some empty.
	randomText := func(seed uint64, n int, terminated bool) (string, []string) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var want []string
		var b strings.Builder
		for i := range n {
			l := fmt.Sprintf("%d:%s", i, strings.Repeat(string(rune('a'+i%26)), rng.IntN(300)))
			want = append(want, l)
			b.WriteString(l)
			if i < n-1 || terminated {
				b.WriteByte('\n')
			}
		}
		return b.String(), want
	}

	DescribeTable("returns every line with its offset, and never changes the line before",
		func(chunk int, oneByte bool, terminated bool) {
			text, want := randomText(uint64(chunk), 200, terminated)
			var r = bytes.NewReader([]byte(text))
			reads, err := store.ReadLinesChunked(r, chunk)
			if oneByte {
				reads, err = store.ReadLinesChunked(iotest.OneByteReader(bytes.NewReader([]byte(text))), chunk)
			}
			Expect(err).NotTo(HaveOccurred())
			Expect(reads).To(HaveLen(len(want)))
			offset := int64(0)
			for i, rd := range reads {
				Expect(rd.Line).To(Equal(want[i]), "line %d", i)
				Expect(rd.Start).To(Equal(offset), "offset of line %d", i)
				Expect(rd.PrevIntact).To(BeTrue(), "line %d overwrote the one before", i)
				Expect(rd.Unterminated).To(Equal(!terminated && i == len(want)-1))
				offset += int64(len(rd.Line)) + 1
			}
		},
		Entry("chunks far smaller than a line", 16, false, true),
		Entry("chunks about a line long", 256, false, true),
		Entry("chunks of many lines", 8192, false, true),
		Entry("one byte per read", 64, true, true),
		Entry("an unterminated last line", 100, false, false),
	)

	It("reports a read error instead of a short file", func() {
		r := iotest.TimeoutReader(bytes.NewReader([]byte(strings.Repeat("x", 100) + "\n" + strings.Repeat("y", 100))))
		_, err := store.ReadLinesChunked(r, 16)
		Expect(errors.Is(err, iotest.ErrTimeout)).To(BeTrue(), "got %v", err)
	})

	It("reads an empty file as no lines", func() {
		reads, err := store.ReadLinesChunked(bytes.NewReader(nil), 16)
		Expect(err).NotTo(HaveOccurred())
		Expect(reads).To(BeEmpty())
	})
})
