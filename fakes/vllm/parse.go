package vllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

const (
	thinkOpen     = "<think>"
	thinkClose    = "</think>"
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
)

// parsedOutput is the visible text split the way vLLM's reasoning and hermes
// parsers split it, with byte offsets so streaming can map tokens to fields.
type parsedOutput struct {
	visible string

	hasReasoning     bool
	reasonStart      int
	reasonEnd        int // reasoning = visible[reasonStart:reasonEnd]
	contentStart     int
	contentEnd       int  // streamed content region
	contentNull      bool // non-streaming content is null
	nonStreamContent string

	calls []parsedCall
}

type parsedCall struct {
	id        string
	name      string
	arguments string // Python-normalised (non-streaming)
	nameEnd   int    // offset where the name became complete
	argStart  int    // raw argument text region, streamed verbatim
	argEnd    int
}

type parseMode struct {
	reasoning bool // --reasoning-parser set and thinking enabled
	// needsOpen: the prompt did not open <think> (plain template), so only
	// an output that starts with <think> carries reasoning.
	needsOpen bool
	hermes    bool // tool parser active for this request
	parallel  bool // parallel_tool_calls
	newCallID func() string
}

// parseOutput applies the reasoning parser then the hermes parser.
func parseOutput(visible string, m parseMode) parsedOutput {
	p := parsedOutput{visible: visible, contentStart: 0, contentEnd: len(visible)}
	if m.reasoning && (!m.needsOpen || strings.HasPrefix(visible, thinkOpen)) {
		p.hasReasoning = true
		start := 0
		if strings.HasPrefix(visible, thinkOpen) {
			start = len(thinkOpen)
		}
		p.reasonStart = start
		end := strings.Index(visible, thinkClose)
		tc := strings.Index(visible, toolCallOpen)
		switch {
		case end >= 0 && (tc < 0 || end < tc):
			p.reasonEnd = end
			p.contentStart = end + len(thinkClose)
		case tc >= 0:
			p.reasonEnd = tc
			p.contentStart = tc
		default:
			p.reasonEnd = len(visible)
			p.contentStart = len(visible)
		}
	}
	content := visible[p.contentStart:]
	p.nonStreamContent = content
	p.contentNull = m.reasoning && content == ""
	if !m.hermes {
		return p
	}
	first := strings.Index(content, toolCallOpen)
	if first < 0 {
		return p
	}
	calls, ok := parseHermes(content, p.contentStart, m)
	if !ok {
		return p
	}
	p.calls = calls
	p.contentEnd = p.contentStart + first
	pre := content[:first]
	p.nonStreamContent = pre
	p.contentNull = strings.TrimSpace(pre) == ""
	return p
}

// parseHermes extracts <tool_call> bodies; any bad body means no calls.
func parseHermes(content string, base int, m parseMode) ([]parsedCall, bool) {
	var calls []parsedCall
	pos := 0
	for {
		i := strings.Index(content[pos:], toolCallOpen)
		if i < 0 {
			break
		}
		bodyStart := pos + i + len(toolCallOpen)
		bodyEnd := len(content)
		next := len(content)
		if j := strings.Index(content[bodyStart:], toolCallClose); j >= 0 {
			bodyEnd = bodyStart + j
			next = bodyEnd + len(toolCallClose)
		}
		c, ok := parseToolBody(content[bodyStart:bodyEnd], base+bodyStart)
		if !ok {
			return nil, false
		}
		c.id = m.newCallID()
		calls = append(calls, c)
		pos = next
	}
	if len(calls) > 1 && !m.parallel {
		calls = calls[:1]
	}
	return calls, len(calls) > 0
}

func parseToolBody(body string, base int) (parsedCall, bool) {
	var obj struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(body), &obj); err != nil || obj.Name == nil || len(obj.Arguments) == 0 || obj.Arguments[0] != '{' {
		return parsedCall{}, false
	}
	args, err := pythonJSON(obj.Arguments)
	if err != nil {
		return parsedCall{}, false
	}
	c := parsedCall{name: *obj.Name, arguments: args}
	// Offsets of the raw text for streaming.
	if k := strings.Index(body, `"name"`); k >= 0 {
		q1 := strings.IndexByte(body[k+6:], '"')
		if q1 >= 0 {
			q2 := strings.IndexByte(body[k+6+q1+1:], '"')
			if q2 >= 0 {
				c.nameEnd = base + k + 6 + q1 + 1 + q2 + 1
			}
		}
	}
	if k := strings.Index(body, `"arguments"`); k >= 0 {
		a := k + len(`"arguments"`)
		for a < len(body) && (body[a] == ':' || body[a] == ' ' || body[a] == '\n' || body[a] == '\t') {
			a++
		}
		end := strings.LastIndexByte(body, '}')
		if end < a {
			end = a
		}
		c.argStart, c.argEnd = base+a, base+end
	}
	return c, true
}

// pythonJSON re-serialises JSON the way Python's json.dumps(ensure_ascii=False)
// does: ", " and ": " separators, key order kept, numbers as written.
func pythonJSON(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out []byte
	type frame struct {
		obj   bool
		count int
		key   bool // next string in an object is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("arguments: %w", err)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			out = append(out, byte(d))
			continue
		}
		if n := len(stack); n > 0 {
			f := &stack[n-1]
			if f.obj {
				if f.key {
					if f.count > 0 {
						out = append(out, ", "...)
					}
					f.count++
				} else {
					out = append(out, ": "...)
				}
				f.key = !f.key
			} else {
				if f.count > 0 {
					out = append(out, ", "...)
				}
				f.count++
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			out = append(out, byte(v))
			stack = append(stack, frame{obj: v == '{', key: true})
		case string:
			out = appendJSONString(out, v)
		case json.Number:
			out = append(out, v...)
		case bool:
			if v {
				out = append(out, "true"...)
			} else {
				out = append(out, "false"...)
			}
		case nil:
			out = append(out, "null"...)
		}
	}
	return string(out), nil
}
