package tokenizer

import "strings"

// byteLevelRunes maps each byte to the printable rune byte-level BPE
// vocabularies (GPT-2, Qwen) use for it: printable Latin-1 bytes map to
// themselves, the others to U+0100 onwards (so ' ' is 'Ġ' and '\n' is 'Ċ').
var byteLevelRunes = func() (tbl [256]rune) {
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	next := rune(256)
	for b := range 256 {
		if printable(b) {
			tbl[b] = rune(b)
		} else {
			tbl[b] = next
			next++
		}
	}
	return tbl
}()

// ByteLevelString is the token as a byte-level BPE vocabulary spells it, the
// form vLLM's /tokenize returns in token_strs (e.g. "Ġhello", "Ċ"). Added
// tokens are spelled as themselves; ids without a surface give "".
func (t *Tokenizer) ByteLevelString(id int) string {
	if t.IsAdded(id) {
		return t.TokenString(id)
	}
	s := t.TokenString(id)
	var b strings.Builder
	b.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteLevelRunes[s[i]])
	}
	return b.String()
}
