package page

import (
	"strings"
)

// Command is one shell command from a block: a simple command between
// `|`, `&&`, `||` and `;`, with `\` continuations joined.
type Command struct {
	// Line is the page line the command starts on.
	Line int
	// Args are the words after leading VAR=value assignments, unquoted.
	Args []string
	// ArgLines holds each word's page line.
	ArgLines []int
	// Env are the leading assignments.
	Env map[string]string
	// Raw is the joined command text.
	Raw string
}

// Commands splits a shell block into commands. A "$ " prompt (console
// blocks) and # comments are dropped; placeholders such as <rollout_id> or
// $MODEL stay as written.
func (b Block) Commands() []Command {
	var out []Command
	lines := strings.Split(strings.TrimRight(b.Text, "\n"), "\n")
	var words []word
	var raw []string
	var lx lexer
	start := 0
	flush := func() {
		out = append(out, splitWords(words, strings.Join(raw, " "), start)...)
		words, raw = nil, nil
	}
	for i, l := range lines {
		lineNo := b.Line + i
		t := strings.TrimSpace(l)
		if len(words) == 0 && len(raw) == 0 {
			t = strings.TrimPrefix(strings.TrimPrefix(t, "$ "), "> ")
			start = lineNo
		}
		if lx.open() {
			t = l // inside a quote, spacing is content
		}
		cont := strings.HasSuffix(t, "\\") && !lx.open()
		t = strings.TrimSuffix(t, "\\")
		words = append(words, lx.lex(t, lineNo)...)
		raw = append(raw, strings.TrimSpace(t))
		if !cont && !lx.open() {
			flush()
		}
	}
	if lx.open() { // an unterminated quote ends with the block
		words = append(words, word{text: lx.cur.String(), line: lx.line})
	}
	if len(words) > 0 {
		flush()
	}
	return out
}

type word struct {
	text string
	line int
	op   bool // |, &&, ||, ;, &
}

// lexer splits lines into words, honouring quotes (which may span lines)
// and stopping at an unquoted #.
type lexer struct {
	cur    strings.Builder
	inWord bool
	quote  byte
	line   int // line of the word being built
}

// open reports an unterminated quote (the command goes on).
func (lx *lexer) open() bool { return lx.quote != 0 }

func (lx *lexer) lex(s string, line int) []word {
	var ws []word
	emit := func() {
		if lx.inWord {
			ws = append(ws, word{text: lx.cur.String(), line: lx.line})
			lx.cur.Reset()
			lx.inWord = false
		}
	}
	start := func() {
		if !lx.inWord {
			lx.inWord, lx.line = true, line
		}
	}
	if lx.quote != 0 {
		lx.cur.WriteByte('\n')
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case lx.quote != 0:
			if c == lx.quote {
				lx.quote = 0
			} else if c == '\\' && lx.quote == '"' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
				i++
				lx.cur.WriteByte(s[i])
			} else {
				lx.cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			start()
			lx.quote = c
		case c == '#' && !lx.inWord:
			return ws
		case c == ' ' || c == '\t':
			emit()
		case c == '|' || c == ';' || c == '&':
			emit()
			op := string(c)
			if i+1 < len(s) && s[i+1] == c && c != ';' {
				op += string(c)
				i++
			}
			ws = append(ws, word{text: op, line: line, op: true})
		case c == '\\' && i+1 < len(s):
			start()
			i++
			lx.cur.WriteByte(s[i])
		default:
			start()
			lx.cur.WriteByte(c)
		}
	}
	if lx.quote == 0 {
		emit()
	}
	return ws
}

// splitWords cuts the words of one logical line at operators.
func splitWords(ws []word, raw string, start int) []Command {
	var out []Command
	cur := Command{Line: start, Raw: raw, Env: map[string]string{}}
	push := func() {
		if len(cur.Args) > 0 {
			out = append(out, cur)
		}
		cur = Command{Line: start, Raw: raw, Env: map[string]string{}}
	}
	for _, w := range ws {
		if w.op {
			push()
			continue
		}
		if len(cur.Args) == 0 {
			if k, v, ok := strings.Cut(w.text, "="); ok && isEnvName(k) {
				cur.Env[k] = v
				continue
			}
			cur.Line = w.line
		}
		cur.Args = append(cur.Args, w.text)
		cur.ArgLines = append(cur.ArgLines, w.line)
	}
	push()
	return out
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Is reports whether the command starts with the given words, e.g.
// c.Is("vllm", "serve") or c.Is("gym", "eval", "run"); a leading "uv run",
// "python -m" or "sudo" is skipped.
func (c Command) Is(words ...string) bool {
	args := c.Args
	for len(args) > 0 && (args[0] == "sudo" || args[0] == "exec") {
		args = args[1:]
	}
	if len(args) >= 2 && args[0] == "uv" && args[1] == "run" {
		args = args[2:]
	}
	if len(args) >= 2 && (args[0] == "python" || args[0] == "python3") && args[1] == "-m" {
		args = args[2:]
	}
	if len(args) < len(words) {
		return false
	}
	for i, w := range words {
		if args[i] != w {
			return false
		}
	}
	return true
}

// Flag returns a flag's values (--name value or --name=value; a bare
// boolean flag yields "") with each one's line. Both --snake_case and
// --kebab-case spellings match.
func (c Command) Flag(name string) (values []string, lines []int) {
	norm := func(s string) string { return strings.ReplaceAll(s, "_", "-") }
	want := "--" + norm(strings.TrimPrefix(name, "--"))
	for i := 0; i < len(c.Args); i++ {
		a := c.Args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		k, v, hasEq := strings.Cut(a, "=")
		if norm(k) != want {
			continue
		}
		if !hasEq {
			v = ""
			if i+1 < len(c.Args) && !strings.HasPrefix(c.Args[i+1], "-") {
				v = c.Args[i+1]
			}
		}
		values = append(values, v)
		lines = append(lines, c.ArgLines[i])
	}
	return values, lines
}

// Has reports whether a flag is present.
func (c Command) Has(name string) bool {
	v, _ := c.Flag(name)
	return len(v) > 0
}
