package tokenizer_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/capbench/capbench/fakes/tokenizer"
)

func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "hello world", "<|im_start|>user\nhi<|im_end|>\n", "🙂\xff\n\n  x", "<think>\n</think>"} {
		f.Add(s)
	}
	tok := tokenizer.New()
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		if got := tok.Decode(ids); got != s {
			t.Fatalf("round trip of %q gave %q", s, got)
		}
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("id %d out of range for %q", id, s)
			}
		}
		// A generation cut at any token re-encodes to the same ids (checked
		// on short inputs only: the check is quadratic).
		if len(ids) > 256 {
			return
		}
		for k := range len(ids) {
			if got := tok.Encode(tok.Decode(ids[:k])); !slices.Equal(got, ids[:k]) {
				t.Fatalf("prefix of %d tokens of %q re-encodes to %v, want %v", k, s, got, ids[:k])
			}
		}
	})
}

func FuzzPrefixStable(f *testing.F) {
	f.Add("user\nhello", "  world")
	f.Add("a<|im_end|", ">b")
	f.Add("", "\n\n")
	tok := tokenizer.New()
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, boundary := range []string{"\n", "<|im_end|>", "<think>"} {
			left := a + boundary
			whole := tok.Encode(left + b)
			split := append(tok.Encode(left), tok.Encode(b)...)
			// Added tokens hold no newline and only one '<' (their first
			// byte), so none can straddle these boundaries.
			if !slices.Equal(whole, split) {
				t.Fatalf("not prefix stable: a=%q boundary=%q b=%q", a, boundary, b)
			}
		}
	})
}

// BenchmarkEncode32k encodes a chat prompt of about 32k tokens.
func BenchmarkEncode32k(b *testing.B) {
	tok := tokenizer.New()
	var sb strings.Builder
	turn := "<|im_start|>user\nPlease read the file src/main.go and explain what the function handleRequest does, " +
		"including error paths 1, 2 and 3. 谢谢 🙂<|im_end|>\n<|im_start|>assistant\n<think>\nThe user wants an explanation.\n</think>\n\n" +
		"<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/main.go\"}}\n</tool_call><|im_end|>\n"
	for len(tok.Encode(sb.String())) < 32000 {
		sb.WriteString(turn)
	}
	text := sb.String()
	n := len(tok.Encode(text))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text)
	}
	b.ReportMetric(float64(n), "tokens/op")
}

// FuzzEncodeCached checks the segment cache never changes an encoding: a
// small cache shared across inputs, so hits, misses and evictions all occur.
func FuzzEncodeCached(f *testing.F) {
	f.Add("<|im_start|>system\nYou are a helpful assistant that reads files.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n")
	f.Add("no added tokens at all, but long enough to be cached here")
	f.Add("<think>\n" + strings.Repeat("x", 40) + "</think><tool_call>")
	tok := tokenizer.New()
	cache := tokenizer.NewSegmentCache(4 << 10)
	f.Fuzz(func(t *testing.T, s string) {
		want := tok.Encode(s)
		for range 2 {
			if got := tok.EncodeCached(s, cache); !slices.Equal(got, want) {
				t.Fatalf("cached encoding of %q is %v, want %v", s, got, want)
			}
		}
	})
}
