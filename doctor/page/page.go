// Package page reads a docs page (Markdown or MDX) into what the doctor and
// the walkthrough check: fenced code blocks with their info strings and file
// names, the shell commands inside them, and the prose around them, each
// with its line number in the page. MDX components, import/export lines and
// front matter are blanked before parsing so they never swallow a code
// block, and line numbers stay those of the file.
package page

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// Page is a parsed docs page.
type Page struct {
	Path   string
	Blocks []Block
	Prose  []Paragraph
}

// Block is one fenced code block.
type Block struct {
	// Lang is the info string's first word, lower-cased ("bash", "yaml").
	Lang string
	// Attrs are the info string's key=value attributes (title="x.yaml").
	Attrs map[string]string
	// Name is the file the page says the block is: a title/filename
	// attribute, a bare file name in the info string, or the last file name
	// in inline code in the paragraph just before the block.
	Name string
	// Line is the 1-based line of the block's first content line.
	Line int
	// Text is the block's content.
	Text string
}

// Paragraph is prose (a paragraph or heading) with its line.
type Paragraph struct {
	Line int
	Text string
	// Code are the inline code spans, in order.
	Code []string
}

// Read parses the page at path.
func Read(path string) (*Page, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read page: %w", err)
	}
	return Parse(path, src), nil
}

var (
	jsxLine     = regexp.MustCompile(`^\s*(?:</?[A-Z][\w.]*(?:\s[^<>]*)?/?>\s*)+$`)
	esmLine     = regexp.MustCompile(`^(?:import|export)\s`)
	codeSpan    = regexp.MustCompile("`([^`\n]+)`")
	attrRE      = regexp.MustCompile(`([A-Za-z_][\w-]*)=(?:"([^"]*)"|'([^']*)'|(\S+))`)
	fileNameRE  = regexp.MustCompile(`^[\w./~-]+\.(?:ya?ml|json|toml|jsonl|sh)$`)
	fenceOpenRE = regexp.MustCompile("^\\s{0,3}(```|~~~)")
)

// blankMDX replaces front matter, ESM lines and lines that hold only JSX
// tags with empty lines, outside fenced code.
func blankMDX(src []byte) []byte {
	lines := strings.Split(string(src), "\n")
	inFence, fence := false, ""
	for i, l := range lines {
		if m := fenceOpenRE.FindStringSubmatch(l); m != nil {
			if !inFence {
				inFence, fence = true, m[1]
			} else if strings.HasPrefix(strings.TrimSpace(l), fence) && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), fence[:1])) == "" {
				inFence = false
			}
			continue
		}
		if inFence {
			continue
		}
		if jsxLine.MatchString(l) || esmLine.MatchString(l) {
			lines[i] = ""
		}
	}
	if len(lines) > 0 && strings.TrimSpace(lines[0]) == "---" {
		for i := 1; i < len(lines); i++ {
			end := strings.TrimSpace(lines[i]) == "---"
			lines[i] = ""
			if end {
				lines[0] = ""
				break
			}
		}
	}
	return []byte(strings.Join(lines, "\n"))
}

// Parse reads src (the page's bytes) with a CommonMark parser.
func Parse(path string, src []byte) *Page {
	clean := blankMDX(src)
	lineOf := lineIndex(clean)
	doc := goldmark.New().Parser().Parse(text.NewReader(clean))
	p := &Page{Path: path}
	var last *Paragraph
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.FencedCodeBlock:
			b := codeBlock(n, clean, lineOf)
			if b.Name == "" && last != nil {
				b.Name = lastFileName(last.Code)
			}
			p.Blocks = append(p.Blocks, b)
			last = nil
			return ast.WalkSkipChildren, nil
		case *ast.Paragraph, *ast.Heading:
			para := paragraph(n, clean, lineOf)
			p.Prose = append(p.Prose, para)
			last = &p.Prose[len(p.Prose)-1]
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return p
}

func lineIndex(src []byte) func(off int) int {
	var starts []int
	starts = append(starts, 0)
	for i, c := range src {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return func(off int) int {
		lo, hi := 0, len(starts)-1
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if starts[mid] <= off {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		return lo + 1
	}
}

func codeBlock(n *ast.FencedCodeBlock, src []byte, lineOf func(int) int) Block {
	b := Block{Attrs: map[string]string{}}
	if n.Info != nil {
		info := strings.TrimSpace(string(n.Info.Segment.Value(src)))
		if f := strings.Fields(info); len(f) > 0 {
			b.Lang = strings.ToLower(strings.Trim(f[0], "{}"))
			rest := strings.TrimSpace(strings.TrimPrefix(info, f[0]))
			for _, m := range attrRE.FindAllStringSubmatch(rest, -1) {
				b.Attrs[strings.ToLower(m[1])] = m[2] + m[3] + m[4]
			}
			for _, w := range strings.Fields(attrRE.ReplaceAllString(rest, "")) {
				if fileNameRE.MatchString(w) {
					b.Name = w
				}
			}
		}
	}
	for _, k := range []string{"title", "filename", "file", "name"} {
		if v := b.Attrs[k]; v != "" && b.Name == "" {
			b.Name = v
		}
	}
	var buf bytes.Buffer
	lines := n.Lines()
	for i := 0; i < lines.Len(); i++ {
		seg := lines.At(i)
		if i == 0 {
			b.Line = lineOf(seg.Start)
		}
		buf.Write(seg.Value(src))
	}
	if b.Line == 0 && n.Info != nil { // empty block: the line after the fence
		b.Line = lineOf(n.Info.Segment.Start) + 1
	}
	b.Text = buf.String()
	return b
}

func paragraph(n ast.Node, src []byte, lineOf func(int) int) Paragraph {
	var sb strings.Builder
	p := Paragraph{}
	lines := n.Lines()
	for i := 0; i < lines.Len(); i++ {
		seg := lines.At(i)
		if i == 0 {
			p.Line = lineOf(seg.Start)
		}
		sb.Write(seg.Value(src))
	}
	p.Text = sb.String()
	for _, m := range codeSpan.FindAllStringSubmatch(p.Text, -1) {
		p.Code = append(p.Code, m[1])
	}
	return p
}

func lastFileName(code []string) string {
	for i := len(code) - 1; i >= 0; i-- {
		if fileNameRE.MatchString(code[i]) {
			return code[i]
		}
	}
	return ""
}

// IsShell reports whether a block holds shell commands.
func (b Block) IsShell() bool {
	switch b.Lang {
	case "bash", "sh", "shell", "console", "zsh", "shell-session", "terminal":
		return true
	}
	return false
}

// IsYAML reports whether a block holds YAML.
func (b Block) IsYAML() bool { return b.Lang == "yaml" || b.Lang == "yml" }

// Block returns the shown block named name (matched on the base name too),
// or nil.
func (p *Page) Block(name string) *Block {
	for i := range p.Blocks {
		if b := &p.Blocks[i]; b.Name != "" && (b.Name == name || baseName(b.Name) == baseName(name)) {
			return b
		}
	}
	return nil
}

func baseName(s string) string { return s[strings.LastIndex(s, "/")+1:] }
