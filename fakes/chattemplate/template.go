// Package chattemplate renders OpenAI-style chat requests into Qwen3 prompt
// text, in Go rather than Jinja, following the structure of the Qwen3 chat
// templates as vLLM applies them (tool block in the system turn, hermes
// <tool_call> blocks, tool results grouped into a user turn).
//
// Two variants exist. Qwen3Thinking2507 is faithful to Qwen3-4B-Thinking-2507:
// the generation prompt ends with "<think>\n" and assistant turns before the
// last user query lose their reasoning, so a later prompt stops extending
// the earlier call's prompt plus generation. Qwen3 is the chain-clean variant:
// every assistant turn keeps its reasoning, so echoing the assistant turn back
// makes the next prompt extend the previous prompt and generation.
package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Message is one OpenAI chat message as decoded from JSON: role, content
// (string, null or a list of parts), reasoning / reasoning_content,
// tool_calls, tool_call_id, name.
type Message = map[string]any

// Request is what a chat template needs from a chat completion request.
// Values inside Messages and Tools may be json.RawMessage to keep their key
// order when they are rendered as JSON; Go maps render with sorted keys.
type Request struct {
	Messages            []Message
	Tools               []map[string]any
	AddGenerationPrompt bool
	// ChatTemplateKwargs is accepted and ignored: neither variant has a
	// switch (Thinking-2507's template has no enable_thinking, and the
	// chain-clean Qwen3 variant deliberately has none either).
	ChatTemplateKwargs map[string]any
}

// ToolCall is a hermes tool call as the model writes it; Arguments is JSON
// text.
type ToolCall struct {
	Name      string
	Arguments string
}

// ErrInvalidRequest is matched (errors.Is) by every *Error Render returns.
var ErrInvalidRequest = errors.New("invalid chat request")

// ErrUnknownTemplate is returned by ByName for a name it does not know.
var ErrUnknownTemplate = errors.New("unknown chat template")

// Error describes a request the template cannot render. vLLM reports these
// as 400 BadRequestError; Param names the offending request field.
type Error struct {
	Param   string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Is makes errors.Is(err, ErrInvalidRequest) true.
func (e *Error) Is(target error) bool { return target == ErrInvalidRequest }

func invalid(param, format string, args ...any) error {
	return &Error{Param: param, Message: fmt.Sprintf(format, args...)}
}

// Template is an immutable chat template; safe for concurrent use.
type Template struct {
	name string
	// thinking2507 selects the Thinking-2507 rules: reasoning only after the
	// last user query, and a generation prompt that opens <think>.
	thinking2507 bool
	// coerceArguments turns unparseable tool-call arguments into {} instead
	// of failing the request (see CoerceBadArguments).
	coerceArguments bool
}

// Template names accepted by ByName.
const (
	NameQwen3             = "qwen3"
	NameQwen3Thinking2507 = "qwen3-thinking-2507"
)

// Qwen3 returns the chain-clean Qwen3 template: reasoning of every assistant
// turn is kept, and the generation prompt is "<|im_start|>assistant\n".
func Qwen3() *Template { return &Template{name: NameQwen3} }

// Qwen3Thinking2507 returns the Qwen3-4B-Thinking-2507 template, which drops
// the reasoning of assistant turns before the last user query and ends the
// generation prompt with "<think>\n".
func Qwen3Thinking2507() *Template {
	return &Template{name: NameQwen3Thinking2507, thinking2507: true}
}

// ByName returns a template by its name or by a model name that implies it
// (any model name containing "thinking" selects the Thinking-2507 template,
// other Qwen3 names the plain one). Matching ignores case.
func ByName(name string) (*Template, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	switch {
	case n == NameQwen3Thinking2507 || n == "qwen3_thinking_2507" ||
		(strings.Contains(n, "qwen3") && strings.Contains(n, "thinking")):
		return Qwen3Thinking2507(), nil
	case n == NameQwen3 || strings.Contains(n, "qwen3"):
		return Qwen3(), nil
	}
	return nil, fmt.Errorf("%w %q (known: %s, %s)", ErrUnknownTemplate, name, NameQwen3, NameQwen3Thinking2507)
}

// CoerceBadArguments returns a copy of t that, like recent vLLM, renders
// tool-call arguments that are not valid JSON, or not a JSON object, as {}
// (with a warning in vLLM's log) instead of rejecting the request. By default
// a template behaves like vLLM releases whose json.loads error surfaces as a
// 400: invalid JSON arguments are an *Error, and valid non-object JSON is
// rendered as it is.
func (t *Template) CoerceBadArguments() *Template {
	c := *t
	c.coerceArguments = true
	return &c
}

// Name is the template's canonical name.
func (t *Template) Name() string { return t.name }

// GenerationPrompt is the text add_generation_prompt appends.
func (t *Template) GenerationPrompt() string {
	if t.thinking2507 {
		return "<|im_start|>assistant\n<think>\n"
	}
	return "<|im_start|>assistant\n"
}

// turn is a message after vLLM's normalisation: content flattened to a
// string, tool-call arguments re-serialised as the template prints them.
type turn struct {
	role       string
	content    string
	contentSet bool // content was a string or a list of parts, not null/absent
	reasoning  string
	hasReason  bool // reasoning / reasoning_content was a string
	toolCalls  []renderedCall
}

type renderedCall struct {
	name string
	args string // JSON object text, Python spacing
}

// Render produces the prompt text for req.
func (t *Template) Render(req Request) (string, error) {
	turns, err := normalize(req.Messages, t.coerceArguments)
	if err != nil {
		return "", err
	}
	return t.renderTurns(turns, req.Tools, req.AddGenerationPrompt, estimateSize(req.Messages))
}

// PlainMessage is a message of a role and a string content with none of
// the other fields a template reads (reasoning, reasoning_content,
// tool_calls absent or null): the shape of most chat requests' messages.
type PlainMessage struct {
	Role, Content string
}

// RenderPlain is Render for a request whose messages are all plain: the
// same text and the same errors as Render gives for those messages as
// maps, without building the maps.
func (t *Template) RenderPlain(msgs []PlainMessage, tools []map[string]any, addGenerationPrompt bool) (string, error) {
	if len(msgs) == 0 {
		return "", errNoMessages()
	}
	turns := make([]turn, len(msgs))
	size := 64
	for i, m := range msgs {
		if err := checkRole(i, m.Role); err != nil {
			return "", err
		}
		turns[i] = turn{role: m.Role, content: m.Content, contentSet: true}
		size += len(m.Content) + 32
	}
	return t.renderTurns(turns, tools, addGenerationPrompt, size)
}

// renderTurns renders normalized turns; size is the expected prompt length.
func (t *Template) renderTurns(turns []turn, toolDefs []map[string]any, addGenerationPrompt bool, size int) (string, error) {
	tools, err := renderTools(toolDefs)
	if err != nil {
		return "", err
	}

	var b strings.Builder
	b.Grow(size + 256*len(tools))
	firstIsSystem := len(turns) > 0 && turns[0].role == "system"
	if len(tools) > 0 {
		b.WriteString("<|im_start|>system\n")
		if firstIsSystem {
			b.WriteString(turns[0].content)
			b.WriteString("\n\n")
		}
		b.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
		for _, tool := range tools {
			b.WriteString("\n")
			b.WriteString(tool)
		}
		b.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")
	} else if firstIsSystem {
		b.WriteString("<|im_start|>system\n")
		b.WriteString(turns[0].content)
		b.WriteString("<|im_end|>\n")
	}

	lastQuery := lastQueryIndex(turns)
	for i, m := range turns {
		switch m.role {
		case "user":
			writeTurn(&b, m.role, m.content)
		case "system":
			if i != 0 {
				writeTurn(&b, m.role, m.content)
			}
		case "assistant":
			t.writeAssistant(&b, m, i > lastQuery, i == len(turns)-1)
		case "tool":
			if i == 0 || turns[i-1].role != "tool" {
				b.WriteString("<|im_start|>user")
			}
			b.WriteString("\n<tool_response>\n")
			b.WriteString(m.content)
			b.WriteString("\n</tool_response>")
			if i == len(turns)-1 || turns[i+1].role != "tool" {
				b.WriteString("<|im_end|>\n")
			}
		}
	}
	if addGenerationPrompt {
		b.WriteString(t.GenerationPrompt())
	}
	return b.String(), nil
}

func writeTurn(b *strings.Builder, role, content string) {
	b.WriteString("<|im_start|>")
	b.WriteString(role)
	b.WriteString("\n")
	b.WriteString(content)
	b.WriteString("<|im_end|>\n")
}

// lastQueryIndex is the index of the last user message that is a real query
// (not a wrapped tool response); len-1 when there is none, as in the Jinja.
func lastQueryIndex(turns []turn) int {
	for i := len(turns) - 1; i >= 0; i-- {
		m := turns[i]
		if m.role == "user" && m.contentSet &&
			!(strings.HasPrefix(m.content, "<tool_response>") && strings.HasSuffix(m.content, "</tool_response>")) {
			return i
		}
	}
	return len(turns) - 1
}

// splitReasoning returns the reasoning and content the template uses for an
// assistant turn: the explicit reasoning field, or else the text before
// "</think>" in the content.
func splitReasoning(m turn) (reasoning, content string) {
	if m.hasReason {
		return m.reasoning, m.content
	}
	if before, _, ok := strings.Cut(m.content, "</think>"); ok {
		// Jinja: content.split('</think>')[0] is the text before the first
		// "</think>"; [-1] is the text after the last one.
		after := m.content[strings.LastIndex(m.content, "</think>")+len("</think>"):]
		before = strings.TrimRight(before, "\n")
		if k := strings.LastIndex(before, "<think>"); k >= 0 {
			before = before[k+len("<think>"):]
		}
		return strings.TrimLeft(before, "\n"), strings.TrimLeft(after, "\n")
	}
	return "", m.content
}

func (t *Template) writeAssistant(b *strings.Builder, m turn, afterLastQuery, isLast bool) {
	reasoning, content := splitReasoning(m)
	b.WriteString("<|im_start|>assistant\n")
	var withThink bool
	if t.thinking2507 {
		withThink = afterLastQuery && (isLast || reasoning != "")
	} else {
		withThink = reasoning != ""
	}
	if withThink {
		writeThinkBlock(b, reasoning, content)
	} else {
		b.WriteString(content)
	}
	writeToolCalls(b, content, m.toolCalls)
	b.WriteString("<|im_end|>\n")
}

func writeThinkBlock(b *strings.Builder, reasoning, content string) {
	b.WriteString("<think>\n")
	b.WriteString(strings.Trim(reasoning, "\n"))
	b.WriteString("\n</think>\n\n")
	b.WriteString(strings.TrimLeft(content, "\n"))
}

// writeToolCalls writes hermes blocks; the separator test uses the content
// before stripping, as the Jinja does.
func writeToolCalls(b *strings.Builder, content string, calls []renderedCall) {
	for i, c := range calls {
		if i > 0 || content != "" {
			b.WriteString("\n")
		}
		b.WriteString("<tool_call>\n{\"name\": \"")
		b.WriteString(c.name)
		b.WriteString("\", \"arguments\": ")
		b.WriteString(c.args)
		b.WriteString("}\n</tool_call>")
	}
}

// RenderAssistantGeneration returns the text a model generates for an
// assistant turn with this content, reasoning and tool calls, written so that
// generation + "<|im_end|>" is exactly what this template renders for the
// same turn in a later prompt (when the turn keeps its reasoning there). For
// Qwen3Thinking2507 the text starts after the generation prompt's "<think>\n".
// Arguments are written the way the template re-renders them (Python
// spacing, key order kept); arguments that do not parse are written as {}.
func (t *Template) RenderAssistantGeneration(content, reasoning string, toolCalls []ToolCall) string {
	calls := make([]renderedCall, len(toolCalls))
	for i, c := range toolCalls {
		args, err := argumentsJSON(c.Arguments, t.coerceArguments)
		if err != nil {
			args = "{}"
		}
		calls[i] = renderedCall{name: c.Name, args: args}
	}
	var b strings.Builder
	switch {
	case t.thinking2507:
		b.WriteString(strings.Trim(reasoning, "\n"))
		b.WriteString("\n</think>\n\n")
		b.WriteString(strings.TrimLeft(content, "\n"))
	case reasoning != "":
		writeThinkBlock(&b, reasoning, content)
	default:
		b.WriteString(content)
	}
	writeToolCalls(&b, content, calls)
	return b.String()
}

var knownRoles = []string{"system", "user", "assistant", "tool"}

// normalize validates messages and applies vLLM's pre-template processing.
func normalize(msgs []Message, coerceArgs bool) ([]turn, error) {
	if len(msgs) == 0 {
		return nil, errNoMessages()
	}
	turns := make([]turn, 0, len(msgs))
	for i, m := range msgs {
		if m == nil {
			return nil, invalid("messages", "messages[%d] must be an object", i)
		}
		roleV, ok := m["role"]
		if !ok {
			return nil, invalid("messages", "messages[%d]: missing field 'role'", i)
		}
		role, ok := roleV.(string)
		if !ok {
			return nil, invalid("messages", "messages[%d].role must be a string, got %s", i, typeName(roleV))
		}
		if err := checkRole(i, role); err != nil {
			return nil, err
		}
		content, set, err := flattenContent(m["content"])
		if err != nil {
			return nil, invalid("messages", "messages[%d].content: %v", i, err)
		}
		tr := turn{role: role, content: content, contentSet: set}
		if role == "assistant" {
			if err := assistantFields(&tr, m, i, coerceArgs); err != nil {
				return nil, err
			}
		}
		turns = append(turns, tr)
	}
	return turns, nil
}

// errNoMessages is the error of an empty message list: the Qwen3 template
// reads messages[0].role, which Jinja refuses on an empty list.
func errNoMessages() error {
	return invalid("messages", "list object has no element 0 (messages must not be empty)")
}

func checkRole(i int, role string) error {
	if !slices.Contains(knownRoles, role) {
		return invalid("messages", "messages[%d]: unknown role %q (expected one of %s)", i, role, strings.Join(knownRoles, ", "))
	}
	return nil
}

func assistantFields(tr *turn, m Message, i int, coerceArgs bool) error {
	for _, key := range []string{"reasoning", "reasoning_content"} {
		v, ok := m[key]
		if !ok || v == nil {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return invalid("messages", "messages[%d].%s must be a string, got %s", i, key, typeName(v))
		}
		if !tr.hasReason {
			tr.reasoning, tr.hasReason = s, true
		}
	}
	v, ok := m["tool_calls"]
	if !ok || v == nil {
		return nil
	}
	list, ok := asList(v)
	if !ok {
		return invalid("tool_calls", "messages[%d].tool_calls must be a list, got %s", i, typeName(v))
	}
	for j, item := range list {
		call, ok := asObject(item)
		if !ok {
			return invalid("tool_calls", "assistant tool_calls entries must be objects.")
		}
		if typ, ok := call["type"]; ok && typ != "function" {
			return invalid("tool_calls", "chat completions only support assistant tool_calls of type 'function'.")
		}
		fn, ok := asObject(call["function"])
		if !ok {
			return invalid("tool_calls", "chat completions only support assistant tool_calls of type 'function'.")
		}
		name, ok := fn["name"].(string)
		if !ok {
			return invalid("tool_calls", "messages[%d].tool_calls[%d].function.name must be a string, got %s", i, j, typeName(fn["name"]))
		}
		args, err := argumentsJSON(fn["arguments"], coerceArgs)
		if err != nil {
			return invalid("tool_calls", "messages[%d].tool_calls[%d].function.arguments: %v", i, j, err)
		}
		tr.toolCalls = append(tr.toolCalls, renderedCall{name: name, args: args})
	}
	return nil
}

// argumentsJSON renders tool-call arguments as the template receives them
// from vLLM, which parses JSON text with json.loads (empty or null arguments
// become {}) and the template writes the value back with tojson. With
// coerce, anything that is not a JSON object becomes {}, as recent vLLM
// does; without it, invalid JSON is an error and other JSON values are kept.
func argumentsJSON(v any, coerce bool) (string, error) {
	if raw, ok := v.(json.RawMessage); ok {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			v = s
		} else {
			var decoded any
			if err := json.Unmarshal(raw, &decoded); err != nil {
				return "", fmt.Errorf("invalid JSON: %w", err)
			}
			if _, isObject := decoded.(map[string]any); isObject {
				return pythonDumpsObject(raw)
			}
			v = decoded
		}
	}
	switch a := v.(type) {
	case nil:
		return "{}", nil
	case string:
		if a == "" {
			return "{}", nil
		}
		var b strings.Builder
		b.Grow(len(a) + len(a)/8)
		if err := writePyRaw(&b, []byte(a)); err != nil {
			if coerce {
				return "{}", nil
			}
			return "", fmt.Errorf("not valid JSON: %w", err)
		}
		out := b.String()
		if coerce && out[0] != '{' {
			return "{}", nil
		}
		return out, nil
	case map[string]any:
		return toJSON(a)
	case []any:
		if coerce {
			return "{}", nil
		}
		return toJSON(a)
	}
	if coerce {
		return "{}", nil
	}
	return "", fmt.Errorf("must be a JSON string or an object, got %s", typeName(v))
}

// flattenContent turns message content into the string the template sees:
// text parts are joined with "\n" (vLLM's "string" content format).
func flattenContent(v any) (content string, set bool, err error) {
	switch c := v.(type) {
	case nil:
		return "", false, nil
	case string:
		return c, true, nil
	case json.RawMessage:
		var decoded any
		if err := json.Unmarshal(c, &decoded); err != nil {
			return "", false, fmt.Errorf("invalid JSON: %w", err)
		}
		return flattenContent(decoded)
	}
	parts, ok := asList(v)
	if !ok {
		return "", false, fmt.Errorf("must be a string, null or a list of content parts, got %s", typeName(v))
	}
	texts := make([]string, 0, len(parts))
	for k, p := range parts {
		part, ok := asObject(p)
		if !ok {
			return "", false, fmt.Errorf("part %d must be an object, got %s", k, typeName(p))
		}
		typ, _ := part["type"].(string)
		if typ != "text" {
			return "", false, fmt.Errorf("part %d: unsupported content part type %q (this model accepts only text)", k, typ)
		}
		text, ok := part["text"].(string)
		if !ok {
			return "", false, fmt.Errorf("part %d: field 'text' must be a string, got %s", k, typeName(part["text"]))
		}
		texts = append(texts, text)
	}
	return strings.Join(texts, "\n"), true, nil
}

// renderTools renders each tool as vLLM hands it to the template:
// {"type": "function", "function": {"name", "description", "parameters"}}.
func renderTools(tools []map[string]any) ([]string, error) {
	out := make([]string, 0, len(tools))
	for i, tool := range tools {
		if typ, ok := tool["type"]; ok && typ != "function" {
			return nil, invalid("tools", "tools[%d].type must be \"function\", got %v", i, typ)
		}
		fn, ok := asObject(tool["function"])
		if !ok {
			return nil, invalid("tools", "tools[%d].function must be an object, got %s", i, typeName(tool["function"]))
		}
		name, ok := fn["name"].(string)
		if !ok {
			return nil, invalid("tools", "tools[%d].function.name must be a string, got %s", i, typeName(fn["name"]))
		}
		if d, ok := fn["description"]; ok && d != nil {
			if _, isString := d.(string); !isString {
				return nil, invalid("tools", "tools[%d].function.description must be a string, got %s", i, typeName(d))
			}
		}
		if p, ok := fn["parameters"]; ok && p != nil {
			if _, isObject := asObject(p); !isObject {
				return nil, invalid("tools", "tools[%d].function.parameters must be an object, got %s", i, typeName(p))
			}
		}
		var b strings.Builder
		b.WriteString(`{"type": "function", "function": {"name": `)
		writePyString(&b, name)
		b.WriteString(`, "description": `)
		if err := writeValue(&b, fn["description"]); err != nil {
			return nil, invalid("tools", "tools[%d].function.description: %v", i, err)
		}
		b.WriteString(`, "parameters": `)
		if err := writeValue(&b, fn["parameters"]); err != nil {
			return nil, invalid("tools", "tools[%d].function.parameters: %v", i, err)
		}
		if strict, ok := fn["strict"]; ok && strict != nil {
			b.WriteString(`, "strict": `)
			if err := writeValue(&b, strict); err != nil {
				return nil, invalid("tools", "tools[%d].function.strict: %v", i, err)
			}
		}
		b.WriteString("}}")
		out = append(out, b.String())
	}
	return out, nil
}

func writeValue(b *strings.Builder, v any) error {
	s, err := toJSON(v)
	if err != nil {
		return err
	}
	b.WriteString(s)
	return nil
}

func asObject(v any) (map[string]any, bool) {
	switch o := v.(type) {
	case map[string]any:
		return o, true
	case json.RawMessage:
		var m map[string]any
		if err := json.Unmarshal(o, &m); err != nil || m == nil {
			return nil, false
		}
		return m, true
	}
	return nil, false
}

func asList(v any) ([]any, bool) {
	switch l := v.(type) {
	case []any:
		return l, true
	case []map[string]any:
		out := make([]any, len(l))
		for i := range l {
			out[i] = l[i]
		}
		return out, true
	case json.RawMessage:
		var out []any
		if err := json.Unmarshal(l, &out); err != nil {
			return nil, false
		}
		return out, true
	}
	return nil, false
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64, float32, int, int64, json.Number:
		return "number"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func estimateSize(msgs []Message) int {
	n := 64
	for _, m := range msgs {
		if s, ok := m["content"].(string); ok {
			n += len(s) + 32
		}
	}
	return n
}
