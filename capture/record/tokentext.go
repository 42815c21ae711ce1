package record

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
)

// TokenText is a token id list as it was read from JSON text that already
// had the canonical form (docs/store.md#canonical-json): compact decimal
// integers, no spaces. A 32k-token prompt is most of a record line and
// most of the time its encoding takes; an entry given the text with
// UsePromptText copies it instead of formatting the ids again.
//
// It keeps a private copy of the ids the text was parsed to, and the text
// is used only while the entry's prompt still equals them: a caller that
// changes the ids, in place or by replacing the slice, gets them
// formatted as before. The text is the parsed bytes themselves, not a
// copy: they must not change while an entry holds the TokenText. The zero
// value holds nothing.
type TokenText struct {
	ids  []int  // a copy, so that changes to the caller's ids show
	text []byte // "[1,2,3]": canonical, as ParseTokenIDs checked
}

// IsZero reports whether t holds no text.
func (t TokenText) IsZero() bool { return t.text == nil }

// ParseIntArray reads a JSON array of integers (at most 18 digits each, no
// leading zeros, optional '-') in one pass. ok is false for anything else
// (fractions, exponents, longer numbers, bad syntax), which callers read
// with a general JSON decoder. Whitespace is allowed anywhere JSON allows
// it.
func ParseIntArray(b []byte) (ids []int, ok bool) {
	ids, _, ok = parseIntArray(b, false)
	return ids, ok
}

// ParseTokenIDs is ParseIntArray that also returns the ids' TokenText when
// b was canonical (no whitespace inside the array, no "-0"); otherwise the
// TokenText is zero.
func ParseTokenIDs(b []byte) (ids []int, tt TokenText, ok bool) {
	return parseIntArray(b, true)
}

func parseIntArray(b []byte, keepText bool) (ids []int, tt TokenText, ok bool) {
	start := skipSpace(b, 0)
	if start >= len(b) || b[start] != '[' {
		return nil, TokenText{}, false
	}
	ids = make([]int, 0, len(b)/6+1)
	i := start + 1
	if j := skipSpace(b, i); j < len(b) && b[j] == ']' {
		return arrayEnd(b, j, ids, keepText && j == i, start)
	}
	return readElements(b, start, i, ids, keepText)
}

// ParseTokenIDsAfter is ParseTokenIDs for ids that likely begin with prev's:
// a call's prompt repeats the previous call's prompt of the same
// conversation. The ids of the longest prefix of b that is byte for byte
// prev's text are prev's ids, so only the rest is read. The result is
// ParseTokenIDs(b)'s whatever prev holds.
func ParseTokenIDsAfter(b []byte, prev TokenText) (ids []int, tt TokenText, ok bool) {
	start := skipSpace(b, 0)
	if prev.IsZero() || start >= len(b) || b[start] != '[' {
		return parseIntArray(b, true)
	}
	common := commonPrefix(b[start:], prev.text)
	// The ids before the last comma of the shared bytes are whole in both
	// texts; the one after it may go on differently in b.
	last := bytes.LastIndexByte(b[start:start+common], ',')
	if last < 0 {
		return parseIntArray(b, true)
	}
	known := bytes.Count(b[start:start+last], []byte{','}) + 1
	if known > len(prev.ids) {
		return parseIntArray(b, true) // prev's ids are not its text's: not a TokenText ParseTokenIDs made
	}
	ids = make([]int, known, known+(len(b)-start-last)/6+1)
	copy(ids, prev.ids)
	return readElements(b, start, start+last+1, ids, true)
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	const block = 4096 // compared whole by the vectorized bytes.Equal
	n := min(len(a), len(b))
	i := 0
	for i+block <= n && bytes.Equal(a[i:i+block], b[i:i+block]) {
		i += block
	}
	for i+8 <= n {
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)/8
		}
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// readElements reads the array b[start:] from its element at b[i] on,
// appending to ids; compact says whether the text so far was canonical.
func readElements(b []byte, start, i int, ids []int, compact bool) ([]int, TokenText, bool) {
	for {
		if j := skipSpace(b, i); j != i {
			compact, i = false, j
		}
		n, next, good := shortUint(b, i)
		if !good {
			if n, next, good = longInt(b, i); !good {
				return nil, TokenText{}, false
			}
			compact = compact && !(n == 0 && b[i] == '-') // "-0" reads as 0, which is written "0"
		}
		ids = append(ids, n)
		i = next
		if j := skipSpace(b, i); j != i {
			compact, i = false, j
		}
		if i >= len(b) {
			return nil, TokenText{}, false
		}
		switch b[i] {
		case ',':
			i++
		case ']':
			return arrayEnd(b, i, ids, compact, start)
		default:
			return nil, TokenText{}, false
		}
	}
}

// shortUint reads a number of 1 to 7 digits without sign or leading zero
// at b[i] from one 8-byte word: token ids are such numbers, and reading
// them a digit at a time was most of the cost of a reply's prompt ids.
// good is false for anything else (longInt then reads it).
func shortUint(b []byte, i int) (n, next int, good bool) {
	if i < 0 || len(b)-i < 8 {
		return 0, i, false
	}
	x := binary.LittleEndian.Uint64(b[i:]) // b[i] in the low byte
	d := x - 0x3030303030303030
	// The high bit of a byte is set where it is not a digit ('0'..'9');
	// the lowest such byte is exact (a carry or borrow only spreads
	// upwards from it).
	notDigit := (d | (x + 0x4646464646464646)) & 0x8080808080808080
	digits := bits.TrailingZeros64(notDigit) / 8
	if digits == 0 || digits == 8 || (digits > 1 && byte(x) == '0') {
		return 0, i, false
	}
	// Shift the digits to the top, most significant in the lowest byte,
	// and fold pairs, quads and octets of decimal digits.
	v := d << (64 - 8*digits)
	v = (v * 2561) >> 8 & 0x00FF00FF00FF00FF
	v = (v * 6553601) >> 16 & 0x0000FFFF0000FFFF
	v = (v * 42949672960001) >> 32
	return int(v), i + digits, true
}

// longInt reads an optional '-' and 1 to 18 digits without a leading zero
// at b[i], a digit at a time.
func longInt(b []byte, i int) (n, next int, good bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	digits := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' && i-digits < 18 {
		n = n*10 + int(b[i]-'0')
		i++
	}
	if i == digits || (b[digits] == '0' && i-digits > 1) || (i < len(b) && b[i] >= '0' && b[i] <= '9') {
		return 0, i, false
	}
	if neg {
		n = -n
	}
	return n, i, true
}

// arrayEnd finishes an array whose ']' is at b[end]: only whitespace may
// follow, and the text b[start:end+1] is kept when it was canonical.
func arrayEnd(b []byte, end int, ids []int, canonical bool, start int) ([]int, TokenText, bool) {
	if skipSpace(b, end+1) != len(b) {
		return nil, TokenText{}, false
	}
	if !canonical {
		return ids, TokenText{}, true
	}
	return ids, TokenText{ids: slices.Clone(ids), text: b[start : end+1]}, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// encodes reports whether t is the canonical text of ids: whether ids are
// still the ids the text was parsed to.
func (t *TokenText) encodes(ids []int) bool {
	return t.text != nil && slices.Equal(t.ids, ids)
}

// UsePromptText gives e the canonical text its prompt ids were read from
// (see TokenText); the zero TokenText takes it away again. MarshalCanonical
// copies the text while the prompt still equals the ids it was parsed to.
func (e *Entry) UsePromptText(t TokenText) { e.promptText = t }
