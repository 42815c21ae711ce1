package tokenizer

import (
	"slices"
	"strings"
)

// commonWords gives frequent English and programming words whole tokens, so
// that token counts of ordinary prompts land near a real BPE's (roughly four
// characters per token) rather than three.
var commonWords = strings.Fields(`
the of and to in is that for it as was with be by on not he this are or his
from at which but have an they you were her she there been one all we their
has would when if so no will can more about said what up its out into them
than then some could time these two may first only new like other do other
after also did many before must through back years where much your way well
down should because each just those people how too little state good very
make world still own see men work long get here between both life being under
never day same another know while last might us great old year off come since
against go came right used take three states himself few house use during
without again place around however home small found thought went say part once
general high upon school every don does got united left number course war until
always away something fact though water less public put think almost hand
enough far took head yet government system better set told nothing night end
why called didn eyes find going look asked later knew point next program city
business give group toward young days let room president side social given
present several order national possible rather second face per among form
important often things looking early white case john become large big need four
within felt along children saw best church ever least power development light
thing seemed family interest want members mind country area others done turned
although open god service certain kind problem began different door thus help
sense means whole matter perhaps itself york times law human line above name
example action company hands local show whether five history gave today either
act feet across taken past quite anything seen having death experience body
word half really week free car field already information tell together college
shall money period held keep sure probably real behind

function return const let var func package import class def self true false
null none nil string int float bool error err value values type struct
interface map list dict array object key keys index length size count result
results data file files path name names input output request response server
client message messages content role user assistant system tool tools call
calls args arguments params parameters config context status code test tests
check update create delete read write open close start stop run running
default options option model models token tokens print println printf format
json http https api url id ids time date log logger debug info warn warning
else elif switch case break continue while for range async await yield try
catch except finally raise throw throws new this super public private static
void main src lib bin cmd pkg internal docs readme make build install
`)

// moreWords extends commonWords with frequent prose and agent-traffic words.
var moreWords = strings.Fields(`
able above according account across actually add added adding address after
again against age ago agree ahead air allow allowed almost alone already
although among amount analysis answer anyone anything appear application
apply approach argument arguments around article attention available
average avoid based basic because become before begin behavior believe below
benefit best better beyond billion both bottom break bring brought build
building built business buy call called calling came cannot capture care
carry cause center central chain chance change changed changes character
check checked choice choose clear clearly close code collection column
command comment commit common community compare complete completed
complex component condition configuration connect connection consider
contain contains content continue contract control copy correct cost could
create created creating current currently customer deal decide decision
define defined definition delete depend describe description design detail
details determine develop different difficult direct directory discuss
document does doing done during each easy edit effect either element else
empty enable end energy ensure entire entry environment error errors
especially event events every everything exactly example exist existing
expect expected explain export expression extend extra fail failed failure
feature features fetch field fields figure final finally first fix fixed
flag follow following force found function functions future game generate
given global going handle handler happen hash header help hidden history hold
however idea identify image implement implementation include included
including increase index instead instance integer interest issue issues item
items itself job keep kind known language large later layer lead learn least
level library limit line lines link list load loaded local location lock
logic long loop lower machine main major manage many market match matter
maybe mean memory message method might minute missing mode module moment
month more most move much multiple must need needed network never next node
none normal note notice number object offer often once only open operation
order original other otherwise output over package page parent parse part
particular pass patch path pattern people perform person place plan play
please point policy position possible power prefix present pretty previous
price print problem process produce product project property provide
provided public pull push query question quickly quite random rate reach
read reading ready really reason receive record records reduce reference
region release remove repeat replace report repository request require
required resource response rest result return returns review right rollout
root rule running safe same sample save scenario schema scope score search
second section security seem send sense separate sequence serve service
session setting settings several share short should show side signal simple
since single small source space special specific stack standard start
started state statement status step still storage store stream string
strong structure study style subject success support sure table take target
task team term test testing text than thank that their them there these
they thing think those though thread through together token tokens
total toward track trajectory tree true turn type types under understand
unique unit until update updated upon usage user using usually valid
validate value variable version view wait want watch while whole will
window within without word work worker working would write writer written
wrong yes yet
`)

// commonSymbols are multi-character punctuation runs frequent in code, JSON
// and prose.
var commonSymbols = []string{
	"()", "{}", "[]", "==", "!=", "->", "=>", "::", ":=", "//", "/*", "*/", "...",
	",\"", "\":", "\",", "{\"", "\"}", "\"]", "[\"", "}}", "{{", "));", ");",
	"),", "();", "</", "/>", "'s", "\".", ".\"", "?\"", "!\"", "**", "##", "###",
	"####", "---", "```", "`,", "`.", "\\n", "\\\"", "&&", "||", "<=", ">=",
	"+=", "-=", "++", "--", ".,", ":\"", "\":\"", "\",\"", "\":{\"", "\"},",
	"}]", "]}", "},", "],", "}\"", "({", "})", "[{", "}]", "(\"", "\")", "='",
	"')", "('", "$(", "${", "%s", "%d", "%v",
}

// buildVocab generates the ordinary vocabulary in a fixed order, so ids are
// the same in every process.
func buildVocab() *vocab {
	v := &vocab{
		pieces: make([]string, 0, firstAddedID),
		ids:    make(map[string]int32, 110000),
		lens:   new([1 << 16]uint32),
	}
	add := func(s string) {
		if len(v.pieces) >= firstAddedID {
			return
		}
		if _, dup := v.ids[s]; dup {
			return
		}
		if len(s) > maxTokenLen {
			return
		}
		v.ids[s] = int32(len(v.pieces))
		v.pieces = append(v.pieces, s)
		v.maxLen = max(v.maxLen, len(s))
		if len(s) >= 2 {
			v.lens[uint16(s[0])<<8|uint16(s[1])] |= 1 << len(s)
		}
	}
	// Byte fallback: ids 0-255 are the single bytes, so anything encodes.
	for b := range 256 {
		add(string([]byte{byte(b)}))
	}
	for _, w := range slices.Concat(commonWords, moreWords) {
		capital := strings.ToUpper(w[:1]) + w[1:]
		add(w)
		add(" " + w)
		add(capital)
		add(" " + capital)
	}
	for n := 2; n <= 16; n++ {
		add(strings.Repeat(" ", n))
	}
	for n := 2; n <= 8; n++ {
		add(strings.Repeat("\t", n))
	}
	for _, s := range commonSymbols {
		add(s)
		add(" " + s)
	}
	for _, s := range ".,;:!?()[]{}<>=+-*/\\\"'`#$%&|~^@_" {
		add(" " + string(s))
	}
	const lower = "abcdefghijklmnopqrstuvwxyz"
	const upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	letters := lower + upper
	for _, a := range letters {
		add(" " + string(a))
	}
	for _, a := range letters {
		for _, b := range letters {
			add(string(a) + string(b))
			add(" " + string(a) + string(b))
		}
	}
	for _, a := range lower + upper {
		for _, b := range lower {
			for _, c := range lower {
				s := string(a) + string(b) + string(c)
				add(s)
				add(" " + s)
			}
		}
	}
	// Single characters of common scripts, so non-Latin text is not all bytes.
	ranges := [][2]rune{
		{0x00C0, 0x00FF}, // Latin-1 letters
		{0x0391, 0x03C9}, // Greek
		{0x0410, 0x044F}, // Cyrillic
		{0x2010, 0x2027}, // dashes, quotes, ellipsis
		{0x2190, 0x21FF}, // arrows
		{0x3000, 0x30FF}, // CJK punctuation, kana
		{0x4E00, 0x9FFF}, // CJK unified ideographs
		{0xFF01, 0xFF5E}, // full-width forms
	}
	for _, rg := range ranges {
		for r := rg[0]; r <= rg[1]; r++ {
			add(string(r))
		}
	}
	return v
}
