package tokenizer_test

import (
	"fmt"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/tokenizer"
)

var _ = Describe("SegmentCache", func() {
	tok := tokenizer.New()
	turn := func(i int) string {
		return fmt.Sprintf("<|im_start|>user\nPlease read file number %d and explain what it does in detail.<|im_end|>\n", i)
	}

	It("encodes a growing conversation exactly as Encode does, on hits and misses", func() {
		cache := tokenizer.NewSegmentCache(1 << 20)
		var sb strings.Builder
		sb.WriteString("<|im_start|>system\n" + strings.Repeat("You are a careful coding agent. ", 20) + "<|im_end|>\n")
		for i := range 30 {
			sb.WriteString(turn(i))
			prompt := sb.String() + "<|im_start|>assistant\n"
			Expect(tok.EncodeCached(prompt, cache)).To(Equal(tok.Encode(prompt)))
		}
	})

	It("stays correct when its byte bound forces evictions, and encodes without one", func() {
		cache := tokenizer.NewSegmentCache(512)
		for i := range 200 {
			p := turn(i%7) + turn(i)
			Expect(slices.Equal(tok.EncodeCached(p, cache), tok.Encode(p))).To(BeTrue(), p)
		}
		Expect(tok.EncodeCached(turn(1), nil)).To(Equal(tok.Encode(turn(1))))
	})

	It("holds about maxBytes however many distinct segments pass through it", func() {
		cache := tokenizer.NewSegmentCache(64 << 10)
		for i := range 5000 {
			tok.EncodeCached(turn(i), cache)
			Expect(cache.Bytes()).To(BeNumerically("<=", 64<<10+1024))
		}
		Expect(cache.Bytes()).To(BeNumerically(">", 16<<10)) // it does keep recent segments
	})

	It("hands out copies: changing a returned slice does not change later encodings", func() {
		cache := tokenizer.NewSegmentCache(1 << 20)
		p := turn(3)
		first := tok.EncodeCached(p, cache)
		for i := range first {
			first[i] = -1
		}
		Expect(tok.EncodeCached(p, cache)).To(Equal(tok.Encode(p)))
	})
})
