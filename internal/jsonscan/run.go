package jsonscan

import (
	"encoding/binary"
	"math/bits"
)

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// StringRun returns the index of the first byte at or after i that a string
// scanner must look at: a quote, a backslash, a control character, and,
// when nonASCII is true, a byte of 0x80 or more. It returns len(b) when
// there is none. Request bodies are mostly long plain strings (message
// text), which it reads eight bytes at a time instead of one.
func StringRun(b []byte, i int, nonASCII bool) int {
	high := uint64(0)
	if nonASCII {
		high = msb
	}
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		// Each term flags the bytes of one class; its lowest flag is always
		// a true one (a borrow only spreads upwards from a flagged byte).
		m := x & high
		m |= (x - 0x20*lsb) &^ x & msb // < 0x20
		q := x ^ ('"' * lsb)
		m |= (q - lsb) &^ q & msb
		s := x ^ ('\\' * lsb)
		m |= (s - lsb) &^ s & msb
		if m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || (nonASCII && c >= 0x80) {
			return i
		}
	}
	return len(b)
}
