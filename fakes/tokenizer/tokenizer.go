// Package tokenizer is a deterministic stand-in for the Qwen3 tokenizer.
//
// It is not Qwen3's BPE: the ordinary vocabulary is generated (bytes, common
// words, short letter sequences, CJK characters), but it has Qwen3's size, its
// added tokens with their real ids, exact round-tripping of any text, and the
// prefix stability the capture chain depends on: text is cut into pieces by a
// pre-tokenizer whose pieces always end at a newline and never span an added
// token, so Encode(a+b) == Encode(a) ++ Encode(b) whenever a is empty, ends
// with "\n", or ends with an added token (the boundaries a chat template
// creates). Matching is greedy longest-first, so text cut after any token
// re-encodes to the same ids. Ids 0-255 are the 256 single bytes.
package tokenizer

import (
	"math/bits"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Qwen3 vocabulary geometry: ordinary tokens occupy [0, firstAddedID); the
// added tokens follow; the embedding matrix is padded up to embeddingRows.
const (
	firstAddedID  = 151643
	embeddingRows = 151936
)

// addedToken is one of Qwen3's added tokens; special ones are the <|...|>
// control tokens that skip_special_tokens removes.
type addedToken struct {
	text    string
	id      int
	special bool
}

// qwen3Added lists Qwen3's added tokens with the ids of its tokenizer config.
var qwen3Added = [...]addedToken{
	{"<|endoftext|>", 151643, true},
	{"<|im_start|>", 151644, true},
	{"<|im_end|>", 151645, true},
	{"<|object_ref_start|>", 151646, true},
	{"<|object_ref_end|>", 151647, true},
	{"<|box_start|>", 151648, true},
	{"<|box_end|>", 151649, true},
	{"<|quad_start|>", 151650, true},
	{"<|quad_end|>", 151651, true},
	{"<|vision_start|>", 151652, true},
	{"<|vision_end|>", 151653, true},
	{"<|vision_pad|>", 151654, true},
	{"<|image_pad|>", 151655, true},
	{"<|video_pad|>", 151656, true},
	{"<tool_call>", 151657, false},
	{"</tool_call>", 151658, false},
	{"<|fim_prefix|>", 151659, true},
	{"<|fim_middle|>", 151660, true},
	{"<|fim_suffix|>", 151661, true},
	{"<|fim_pad|>", 151662, true},
	{"<|repo_name|>", 151663, true},
	{"<|file_sep|>", 151664, true},
	{"<tool_response>", 151665, false},
	{"</tool_response>", 151666, false},
	{"<think>", 151667, false},
	{"</think>", 151668, false},
}

// Well-known ids.
const (
	EndOfTextID = 151643 // <|endoftext|>, the pad token and base-model EOS
	IMStartID   = 151644 // <|im_start|>
	IMEndID     = 151645 // <|im_end|>, EOS for chat
)

// maxTokenLen bounds the byte length of ordinary tokens so that the lengths
// present for a two-byte prefix fit in a uint32 bit set.
const maxTokenLen = 31

// vocab is the immutable ordinary vocabulary shared by all Tokenizers. Ids
// 0-255 are the single bytes, in byte order.
type vocab struct {
	pieces []string         // id -> surface bytes, len == number of ordinary tokens
	ids    map[string]int32 // surface bytes -> id
	maxLen int              // longest surface in bytes
	// lens[b0<<8|b1] has bit n set when some token of n bytes starts with
	// b0 b1: matching then tries only lengths that can exist.
	lens *[1 << 16]uint32
}

// sharedVocab is built once and never modified afterwards, so sharing it
// between Tokenizers is safe and keeps New cheap.
var sharedVocab = sync.OnceValue(buildVocab)

// Tokenizer encodes and decodes text with the fake Qwen3 vocabulary. It is
// immutable after New and safe for concurrent use.
type Tokenizer struct {
	v          *vocab
	addedByID  map[int]addedToken
	addedByStr map[string]int
}

// New returns a tokenizer with the Qwen3 vocabulary.
func New() *Tokenizer {
	t := &Tokenizer{
		v:          sharedVocab(),
		addedByID:  make(map[int]addedToken, len(qwen3Added)),
		addedByStr: make(map[string]int, len(qwen3Added)),
	}
	for _, a := range qwen3Added {
		t.addedByID[a.id] = a
		t.addedByStr[a.text] = a.id
	}
	return t
}

// VocabSize is the number of embedding rows (151,936 for Qwen3-4B), which is
// larger than the number of ids the tokenizer can produce.
func (t *Tokenizer) VocabSize() int { return embeddingRows }

// EOSID is the id that ends a chat turn (<|im_end|>).
func (t *Tokenizer) EOSID() int { return IMEndID }

// SpecialID returns the id of an added token such as "<|im_end|>" or "<think>".
func (t *Tokenizer) SpecialID(tok string) (int, bool) {
	id, ok := t.addedByStr[tok]
	return id, ok
}

// IsSpecial reports whether id is a <|...|> control token (the ones vLLM's
// skip_special_tokens drops). The tag tokens such as <think> or <tool_call>
// are added tokens but not special, as in Qwen3.
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.addedByID[id]
	return ok && a.special
}

// IsAdded reports whether id is any added token (special or tag).
func (t *Tokenizer) IsAdded(id int) bool {
	_, ok := t.addedByID[id]
	return ok
}

// TokenString returns the token's surface text: the bytes it contributes to
// decoded text. Byte-fallback tokens of multi-byte characters yield a single
// byte that is not valid UTF-8 on its own; ids without a surface (padding rows,
// out-of-range ids) yield "".
func (t *Tokenizer) TokenString(id int) string {
	if id >= 0 && id < len(t.v.pieces) {
		return t.v.pieces[id]
	}
	if a, ok := t.addedByID[id]; ok {
		return a.text
	}
	return ""
}

// DecodedToken is the token decoded on its own, as vLLM reports it in
// logprobs (tokenizer.decode([id])): a byte-fallback token that is not valid
// UTF-8 by itself becomes U+FFFD.
func (t *Tokenizer) DecodedToken(id int) string {
	return strings.ToValidUTF8(t.TokenString(id), "\uFFFD")
}

// Decode concatenates the surfaces of ids. It never fails: ids the tokenizer
// cannot produce decode to "".
func (t *Tokenizer) Decode(ids []int) string {
	var b strings.Builder
	b.Grow(len(ids) * 4)
	for _, id := range ids {
		b.WriteString(t.TokenString(id))
	}
	return b.String()
}

// Encode tokenizes text. Added-token strings inside the text become their ids;
// everything else is pre-tokenized and matched greedily against the vocabulary,
// falling back to byte tokens, so any string (even invalid UTF-8) round-trips.
func (t *Tokenizer) Encode(text string) []int {
	out := make([]int, 0, len(text)/3+4)
	for len(text) > 0 {
		i, id, n := t.nextAdded(text)
		if i < 0 {
			out = t.encodeSegment(out, text)
			break
		}
		out = t.encodeSegment(out, text[:i])
		out = append(out, id)
		text = text[i+n:]
	}
	return out
}

// nextAdded finds the first added token in s: its offset, id and length, or
// offset -1 when there is none. Every added token starts with '<' and ends
// at its only '>', so the candidate at a '<' is the text up to the next
// '>', looked up in one step.
func (t *Tokenizer) nextAdded(s string) (at, id, n int) {
	off := 0
	for {
		i := strings.IndexByte(s[off:], '<')
		if i < 0 {
			return -1, 0, 0
		}
		p := off + i
		rest := s[p:]
		if len(rest) >= minAddedLen && (rest[1] == '|' || rest[1] == 't' || rest[1] == '/') {
			if k := strings.IndexByte(rest[1:min(len(rest), maxAddedLen)], '>'); k >= 0 {
				if id, ok := t.addedByStr[rest[:k+2]]; ok {
					return p, id, k + 2
				}
			}
		}
		off = p + 1
	}
}

// minAddedLen and maxAddedLen bound the added tokens' lengths in bytes
// ("<think>" and "<|object_ref_start|>"); every one continues '<' with
// '|', 't' or '/'.
const (
	minAddedLen = len("<think>")
	maxAddedLen = len("<|object_ref_start|>")
)

// runeClass groups runes for the pre-tokenizer.
type runeClass uint8

const (
	classNewline runeClass = iota
	classSpace
	classLetter
	classDigit
	classOther
)

// asciiClass classifies ASCII bytes without decoding.
var asciiClass = func() (tbl [utf8.RuneSelf]runeClass) {
	for b := range utf8.RuneSelf {
		tbl[b] = classify(rune(b), 1)
	}
	return tbl
}()

// classAt classifies the rune starting at s[i] and returns its length.
func classAt(s string, i int) (runeClass, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	return classify(r, size), size
}

func classify(r rune, size int) runeClass {
	switch {
	case r == '\n':
		return classNewline
	case r == ' ' || r == '\t' || r == '\r' || r == '\v' || r == '\f':
		return classSpace
	case r < utf8.RuneSelf:
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			return classLetter
		case r >= '0' && r <= '9':
			return classDigit
		}
		return classOther
	case r == utf8.RuneError && size == 1:
		return classOther
	case unicode.IsLetter(r) || unicode.IsMark(r):
		return classLetter
	case unicode.IsNumber(r):
		return classDigit
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// encodeSegment tokenizes text that holds no added token. Pieces follow the
// GPT-style rules Qwen3 uses, simplified: a newline is always a piece of its
// own (so pieces never cross a line end), digits are single pieces, letters
// and other symbols form runs that may take one leading space, and leftover
// spaces form a run of their own.
func (t *Tokenizer) encodeSegment(out []int, s string) []int {
	i := 0
	for i < len(s) {
		c, size := classAt(s, i)
		start := i
		i += size
		switch c {
		case classNewline, classDigit:
			// single-rune piece
		case classSpace:
			for i < len(s) {
				c2, sz2 := classAt(s, i)
				if c2 != classSpace {
					break
				}
				i += sz2
			}
			// Hand the last plain space to a following word or symbol run,
			// but only when the vocabulary has a token starting with that
			// space: otherwise the space would become a lone byte token and
			// a cut right after it would re-encode differently.
			if i < len(s) && s[i-1] == ' ' {
				if nc, sz2 := classAt(s, i); nc == classLetter || nc == classOther {
					end := t.scanRun(s, i+sz2, nc)
					if k, id := t.firstMatch(s[i-1 : end]); k > 1 {
						if i-1 > start {
							out = t.encodePiece(out, s[start:i-1])
						}
						// Emit the matched first token now, so it is not
						// looked up twice.
						out = append(out, id)
						start, i = i-1+k, end
					} else {
						out = t.encodePiece(out, s[start:i])
						start, i = i, end
					}
				}
			}
		default:
			i = t.scanRun(s, i, c)
		}
		out = t.encodePiece(out, s[start:i])
	}
	return out
}

// scanRun extends a letter or symbol run starting before i.
func (t *Tokenizer) scanRun(s string, i int, c runeClass) int {
	for i < len(s) {
		c2, size := classAt(s, i)
		if c2 != c {
			break
		}
		i += size
	}
	return i
}

// firstMatch returns the byte length and id of the token greedy matching
// takes first from p; length 1 means a byte token.
func (t *Tokenizer) firstMatch(p string) (n, id int) {
	v := t.v
	if len(p) >= 2 {
		mask := v.lens[uint16(p[0])<<8|uint16(p[1])]
		if len(p) < maxTokenLen {
			mask &= 1<<(len(p)+1) - 1
		}
		for mask != 0 {
			k := bits.Len32(mask) - 1
			if id, ok := v.ids[p[:k]]; ok {
				return k, int(id)
			}
			mask &^= 1 << k
		}
	}
	return 1, int(p[0]) // byte token: id == byte value
}

// encodePiece matches a piece greedily against the vocabulary, longest token
// first; every single byte is a token, so matching always advances.
func (t *Tokenizer) encodePiece(out []int, p string) []int {
	for len(p) > 0 {
		n, id := t.firstMatch(p)
		out = append(out, id)
		p = p[n:]
	}
	return out
}
