package vllm

import (
	"math"
	"strings"
)

// generation is one completed "model run": the ids the model emitted and
// their log-probs. ids always equal tokenizer.Encode(text) except where a
// length stop cut a word.
type generation struct {
	ids      []int
	logprobs []float64
	finish   string // "stop" or "length"
	seed     uint64 // per-request seed the logprobs derive from
}

// genInput is everything generation depends on.
type genInput struct {
	promptIDs []int
	seed      int64
	maxTokens int   // hard cap (already limited by the context window)
	turn      *Turn // nil: plausible text
	// forcedText replaces the template's assistant rendering (tool_choice
	// required/named produce plain JSON instead of hermes tags).
	forcedText *string
}

// engine generates text deterministically from (seed, prompt).
type engine struct {
	tok     textTokenizer
	tmpl    promptTemplate
	eos     int
	eosText string
	lengths Lengths
	vocab   int
	words   []costedWord // filler vocabulary with token costs
	dotIDs  []int        // the encoding of "."
	altIDs  []int        // single-token filler words: runner-up candidates
}

type costedWord struct {
	text string // with leading space
	cost int
	// ids and bare are the encodings of text and of text without its
	// space: filler is built as ids directly (see plausibleIDs).
	ids, bare []int
}

var fillerWords = strings.Fields(`the model reads a short plan and then writes a careful answer about
data tools tests files results steps values checks output input order review simple
clear next first last small large fast slow good new old same other each every this that
with from into over under about after before while when where which what there their
they it is are was were be been can will would should could may might must one two three
four five time work code line list item name type field value state event call reply`)

func newEngine(tok textTokenizer, tmpl promptTemplate, lengths Lengths) *engine {
	e := &engine{tok: tok, tmpl: tmpl, eos: tok.EOSID(), lengths: lengths, vocab: tok.VocabSize()}
	e.eosText = tok.Decode([]int{e.eos})
	for _, w := range fillerWords {
		ids := tok.Encode(" " + w)
		e.words = append(e.words, costedWord{text: " " + w, cost: len(ids), ids: ids, bare: tok.Encode(w)})
		if len(ids) == 1 && !containsInt(e.altIDs, ids[0]) {
			e.altIDs = append(e.altIDs, ids[0])
		}
	}
	e.dotIDs = tok.Encode(".")
	return e
}

// splitmix64 is a tiny deterministic mixer; no shared RNG state.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func hashIDs(seed int64, ids []int) uint64 {
	h := uint64(1469598103934665603) ^ uint64(seed)
	for _, id := range ids {
		h ^= uint64(id)
		h *= 1099511628211
	}
	return splitmix64(h)
}

// unit returns a deterministic float in [0,1).
func unit(x uint64) float64 { return float64(splitmix64(x)>>11) / (1 << 53) }

func (e *engine) generate(in genInput) generation {
	seed := hashIDs(in.seed, in.promptIDs)
	g := generation{seed: seed}
	var text string
	var ids []int
	switch {
	case in.forcedText != nil:
		text = *in.forcedText + e.eosText
	case in.turn != nil && in.turn.Empty:
		text = e.eosText
	case in.turn != nil:
		text = e.tmpl.renderGeneration(in.turn.Content, in.turn.Reasoning, in.turn.ToolCalls)
		if n := in.turn.Tokens; n > 0 {
			text = e.fitScripted(*in.turn, text, n)
		}
	default:
		text, ids = e.plausible(seed, in.maxTokens)
	}
	if ids == nil {
		ids = e.tok.Encode(text)
	}
	limit := in.maxTokens
	if in.turn != nil && in.turn.Tokens > 0 && in.turn.Tokens < limit {
		limit = in.turn.Tokens
	}
	g.finish = "stop"
	if len(ids) > limit {
		ids = ids[:limit]
		g.finish = "length"
	}
	g.ids = ids
	g.logprobs = make([]float64, len(ids))
	for i, id := range ids {
		g.logprobs[i] = sampledLogprob(seed, i, id)
	}
	return g
}

// sampledLogprob is deterministic, finite and in (-2.5, 0].
func sampledLogprob(seed uint64, pos, id int) float64 {
	u := unit(seed ^ uint64(pos)<<20 ^ uint64(id))
	return -math.Round(u*u*2.5*1e6) / 1e6
}

// alternatives returns k-1 deterministic runner-up tokens, drawn from the
// filler vocabulary, with strictly lower log-probs than the sampled token.
func (e *engine) alternatives(seed uint64, pos, id int, lp float64, k int, buf []tokenLP) []tokenLP {
	buf = buf[:0]
	if len(e.altIDs) == 0 {
		return buf
	}
	step := 0
	for j := 1; len(buf) < k-1 && j < 4*k+len(e.altIDs); j++ {
		h := splitmix64(seed ^ uint64(pos)*31 ^ uint64(j)*0x51ed27)
		alt := e.altIDs[h%uint64(len(e.altIDs))]
		if alt == id || containsAlt(buf, alt) {
			continue
		}
		step++
		v := lp - float64(step)*0.75 - unit(h)*0.5
		buf = append(buf, tokenLP{id: alt, lp: math.Round(v*1e6) / 1e6})
	}
	return buf
}

func containsAlt(buf []tokenLP, id int) bool {
	for _, t := range buf {
		if t.id == id {
			return true
		}
	}
	return false
}

type tokenLP struct {
	id int
	lp float64
}

// plausible builds filler text for an unscripted request: optional reasoning
// (thinking template) then content, sized by the length distribution. On
// the plain template it also returns the ids: the text is filler words and
// periods then EOS, and the tokenizer pre-splits every " word" and "." on
// its own, so joining the words' encodings gives exactly the encoding of
// the text (a spec checks it) without tokenizing the filler per request.
// Other templates return nil ids.
func (e *engine) plausible(seed uint64, maxTokens int) (string, []int) {
	target := e.drawLength(seed)
	if target > maxTokens {
		target = maxTokens + 4 // overshoot (word costs are estimates); cut to max_tokens later
	}
	if !e.tmpl.thinking() {
		content, ids := e.filler(seed, max(target-1, 1), true, e.eosText)
		return content, append(ids, e.eos)
	}
	reasoning, _ := e.filler(seed^0xabc, max(target/4, 1), false, "")
	target -= target / 4
	content, _ := e.filler(seed, max(target-1, 1), false, "")
	return e.tmpl.renderGeneration(content, reasoning, nil), nil
}

// drawLength samples the unscripted output length (normal, clamped).
func (e *engine) drawLength(seed uint64) int {
	u1 := max(unit(seed^0x1234), 1e-12)
	u2 := unit(seed ^ 0x5678)
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	n := int(math.Round(e.lengths.Mean + z*e.lengths.StdDev))
	return max(n, e.lengths.Min)
}

// filler returns roughly n tokens of filler words, the first without its
// leading space, followed by suffix, and with withIDs the words' token ids.
func (e *engine) filler(seed uint64, n int, withIDs bool, suffix string) (string, []int) {
	var b strings.Builder
	b.Grow(6*n + len(suffix)) // filler words average under 6 bytes a token
	var ids []int
	if withIDs {
		ids = make([]int, 0, n+8)
	}
	cost := 0
	for i := 0; cost < n; i++ {
		w := e.words[splitmix64(seed+uint64(i))%uint64(len(e.words))]
		if cost+w.cost > n && cost > 0 {
			break
		}
		text, wids := w.text, w.ids
		if i == 0 {
			text, wids = text[1:], w.bare
		}
		b.WriteString(text)
		if withIDs {
			ids = append(ids, wids...)
		}
		cost += w.cost
		if i%9 == 8 && cost < n {
			b.WriteString(".")
			if withIDs {
				ids = append(ids, e.dotIDs...)
			}
			cost++
		}
	}
	b.WriteString(suffix)
	return b.String(), ids
}

// fitScripted pads (or leaves for truncation) a scripted turn so its encoding
// has exactly n tokens when it should stop naturally.
func (e *engine) fitScripted(t Turn, text string, n int) string {
	have := len(e.tok.Encode(text))
	if have >= n && !t.StopByLength {
		return text // truncated to n later: the caller asked for fewer tokens than the script holds
	}
	extra := n - have
	if t.StopByLength {
		extra += 8 // overshoot, then cut at n
	}
	for attempt := 0; attempt < 6 && extra > 0; attempt++ {
		pad, _ := e.filler(uint64(n)+uint64(attempt), extra, false, "")
		content := t.Content + " " + pad
		if t.Content == "" {
			content = pad
		}
		cand := e.tmpl.renderGeneration(content, t.Reasoning, t.ToolCalls)
		got := len(e.tok.Encode(cand))
		if got == n || (t.StopByLength && got > n) {
			return cand
		}
		extra += n - got
		text = cand
	}
	return text
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
