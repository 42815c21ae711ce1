package tokenizer_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/tokenizer"
)

// concat joins id slices.
func concat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var _ = Describe("Tokenizer", func() {
	var tok *tokenizer.Tokenizer
	BeforeEach(func() { tok = tokenizer.New() })

	DescribeTable("round-trips any text exactly",
		func(text string) {
			ids := tok.Encode(text)
			Expect(tok.Decode(ids)).To(Equal(text))
			var surfaces strings.Builder
			for _, id := range ids {
				surfaces.WriteString(tok.TokenString(id))
			}
			Expect(surfaces.String()).To(Equal(text), "TokenString surfaces must concatenate to the text")
		},
		Entry("empty", ""),
		Entry("ascii prose", "The quick brown fox jumps over the lazy dog."),
		Entry("space runs", "a    b \t\t c  "),
		Entry("only spaces", "     "),
		Entry("newline runs", "\n\n\nline\n\n"),
		Entry("CRLF", "one\r\ntwo\r\n"),
		Entry("digits", "pi=3.14159, year 2026, -42"),
		Entry("emoji", "ok 🙂👍🏽 done 🇫🇷"),
		Entry("CJK and kana", "你好，世界。こんにちは"),
		Entry("combining marks", "e\u0301te\u0301 cafe\u0301"),
		Entry("cyrillic and greek", "Привет мир αβγ"),
		Entry("invalid UTF-8 bytes", "bad \xff\xfe bytes \xe4\xb8"),
		Entry("replacement char", "\uFFFD and \u2028 separators"),
		Entry("NUL and control bytes", "a\x00b\x01c\x7f"),
		Entry("json", `{"name": "get_weather", "arguments": {"city": "Paris"}}`),
		Entry("code", "func main() {\n\tfmt.Println(\"hi\")\n}\n"),
		Entry("special tokens inside text", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\nhm\n</think>\n\nok<|im_end|>"),
		Entry("near-special strings", "<|im_star <|im_end| <think <thinker> < think> <tool_call <|>"),
		Entry("adjacent specials", "<|im_end|><|im_start|><think></think><tool_call></tool_call>"),
		Entry("long word", strings.Repeat("supercalifragilistic", 50)),
	)

	DescribeTable("encodes added tokens to Qwen3's ids",
		func(text string, id int, special bool) {
			Expect(tok.Encode(text)).To(Equal([]int{id}))
			got, ok := tok.SpecialID(text)
			Expect(ok).To(BeTrue())
			Expect(got).To(Equal(id))
			Expect(tok.IsSpecial(id)).To(Equal(special))
			Expect(tok.IsAdded(id)).To(BeTrue())
			Expect(tok.TokenString(id)).To(Equal(text))
			Expect(tok.Encode("x" + text + "y")).To(ContainElement(id))
		},
		Entry(nil, "<|endoftext|>", 151643, true),
		Entry(nil, "<|im_start|>", 151644, true),
		Entry(nil, "<|im_end|>", 151645, true),
		Entry(nil, "<tool_call>", 151657, false),
		Entry(nil, "</tool_call>", 151658, false),
		Entry(nil, "<tool_response>", 151665, false),
		Entry(nil, "</tool_response>", 151666, false),
		Entry(nil, "<think>", 151667, false),
		Entry(nil, "</think>", 151668, false),
	)

	It("reports Qwen3's vocabulary size and chat EOS", func() {
		Expect(tok.VocabSize()).To(Equal(151936))
		eos, ok := tok.SpecialID("<|im_end|>")
		Expect(ok).To(BeTrue())
		Expect(tok.EOSID()).To(Equal(eos))
		_, ok = tok.SpecialID("<|not_a_token|>")
		Expect(ok).To(BeFalse())
		Expect(tok.IsSpecial(0)).To(BeFalse())
	})

	It("only produces ids below the vocabulary size and never padding rows", func() {
		text := "Hello <|im_start|>ünïcödé 漢字 🙂 \xff" + strings.Repeat(" words and more words\n", 20)
		for _, id := range tok.Encode(text) {
			Expect(id).To(BeNumerically(">=", 0))
			Expect(id).To(BeNumerically("<", tok.VocabSize()))
			if id >= 151643 {
				Expect(tok.IsAdded(id)).To(BeTrue(), "id %d is in the added range but not an added token", id)
			}
		}
	})

	It("decodes ids it never produces without failing", func() {
		Expect(tok.Decode([]int{-1, 151700, 151935, 151936, 1 << 40})).To(Equal(""))
		Expect(tok.TokenString(-5)).To(Equal(""))
		hi := tok.Encode("hi")
		Expect(tok.Decode(concat(hi, []int{999999}, hi))).To(Equal("hihi"))
	})

	It("has single tokens for common CJK characters and full-width forms", func() {
		// These are generated last; a vocabulary that outgrew Qwen3's
		// ordinary-token range would lose them first.
		for _, ch := range []string{"你", "好", "\u9fa5", "～", "Ω", "ж", "é"} {
			Expect(tok.Encode(ch)).To(HaveLen(1), "%q", ch)
		}
	})

	It("compresses English prose to fewer tokens than bytes", func() {
		text := strings.Repeat("The model reads the file and then writes a short summary of what it found. ", 20)
		// A real BPE reaches about four bytes per token on prose; the fake
		// should be in the same range, not byte-level.
		Expect(float64(len(text)) / float64(len(tok.Encode(text)))).To(BeNumerically(">", 2.5))
	})

	Describe("prefix stability", func() {
		DescribeTable("Encode(a+b) == Encode(a) ++ Encode(b) when a ends at a template boundary",
			func(a, b string) {
				Expect(tok.Encode(a + b)).To(Equal(concat(tok.Encode(a), tok.Encode(b))))
			},
			Entry("after a newline", "<|im_start|>user\nhello there\n", "  indented words\n"),
			Entry("newline then newline", "line one\n", "\nline three"),
			Entry("after the generation prompt", "<|im_start|>assistant\n<think>\n", "Okay, let me think.\n</think>\n\nAnswer<|im_end|>"),
			Entry("after im_end", "<|im_start|>assistant\nok<|im_end|>", "\n<|im_start|>user\nnext"),
			Entry("after a special, text continues", "prefix<|im_end|>", "suffix words"),
			Entry("spaces before the newline", "trailing   \n", "word"),
		)

		It("is not a property of arbitrary cut points", func() {
			// " world" is one token; cutting inside it gives two.
			Expect(tok.Encode(" world")).To(HaveLen(1))
			Expect(concat(tok.Encode(" wor"), tok.Encode("ld"))).NotTo(Equal(tok.Encode(" world")))
		})

		It("holds on randomly assembled chat text", func() {
			frags := []string{"<|im_start|>", "<|im_end|>", "<think>", "</think>", "\n", "\n\n", " ", "  ", "\t",
				"user", "assistant", "Hello", " world", ",", "!", "你好", "🙂", "123", "{\"a\": 1}", "x", "\xff"}
			r := rand.New(rand.NewPCG(1, 2))
			gen := func(n int) string {
				var b strings.Builder
				for range n {
					b.WriteString(frags[r.IntN(len(frags))])
				}
				return b.String()
			}
			for range 500 {
				a := gen(r.IntN(12))
				switch r.IntN(3) {
				case 0:
					a += "\n"
				case 1:
					a += "<|im_end|>"
				default:
					a += "<think>"
				}
				b := gen(r.IntN(12))
				Expect(tok.Encode(a+b)).To(Equal(concat(tok.Encode(a), tok.Encode(b))), "a=%q b=%q", a, b)
			}
		})
	})

	It("re-encodes a generation cut at any token to the same ids", func() {
		// The fake cuts generations at max_tokens and decodes the prefix; a
		// harness that echoes that text must get the same ids back.
		text := "<think>\nLet me check src/main.go: 3 files, 漢字 🙂 naïve   spacing\t\there.\n</think>\n\n" +
			"<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a b.go\"}}\n</tool_call>"
		ids := tok.Encode(text)
		for k := range len(ids) + 1 {
			Expect(tok.Encode(tok.Decode(ids[:k]))).To(Equal(ids[:k]), "prefix of %d tokens", k)
		}
	})

	It("decodes a lone byte-fallback token to U+FFFD, as vLLM's logprobs show it", func() {
		ids := tok.Encode("🙂")
		Expect(len(ids)).To(BeNumerically(">", 1), "the emoji is not a single token")
		Expect(tok.DecodedToken(ids[0])).To(Equal("\uFFFD"))
		Expect(tok.TokenString(ids[0])).NotTo(Equal(tok.DecodedToken(ids[0])))
		word := tok.Encode(" world")[0]
		Expect(tok.DecodedToken(word)).To(Equal(tok.TokenString(word)))
	})

	It("spells tokens the byte-level BPE way for token_strs", func() {
		Expect(tok.ByteLevelString(tok.Encode(" hello")[0])).To(HavePrefix("Ġ"))
		Expect(tok.ByteLevelString(tok.Encode("\n")[0])).To(Equal("Ċ"))
		Expect(tok.ByteLevelString(tok.Encode("abc")[0])).To(Equal("abc"))
		Expect(tok.ByteLevelString(tok.EOSID())).To(Equal("<|im_end|>"))
		Expect(tok.ByteLevelString(-1)).To(Equal(""))
		seen := map[string]bool{}
		for b := range 256 {
			s := tok.ByteLevelString(b) // ids 0-255 are the single bytes
			Expect(seen[s]).To(BeFalse(), "byte %d maps to a rune another byte already uses", b)
			seen[s] = true
		}
	})

	It("is deterministic across instances", func() {
		other := tokenizer.New()
		text := "Same text, same ids: 漢字 🙂 <|im_end|>\n  done"
		Expect(other.Encode(text)).To(Equal(tok.Encode(text)))
		ids := tok.Encode(text)
		for _, id := range ids {
			Expect(other.TokenString(id)).To(Equal(tok.TokenString(id)))
		}
	})

	It("is safe for concurrent use", func() {
		text := strings.Repeat("concurrent <|im_start|>encoding 🙂\n", 50)
		want := tok.Encode(text)
		var wg sync.WaitGroup
		results := make([][]int, 8)
		for i := range results {
			wg.Go(func() {
				t := tok
				if i%2 == 1 {
					t = tokenizer.New()
				}
				results[i] = t.Encode(text)
			})
		}
		wg.Wait()
		for _, got := range results {
			Expect(slices.Equal(got, want)).To(BeTrue())
		}
	})
})
