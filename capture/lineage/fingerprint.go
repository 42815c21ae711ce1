package lineage

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"unicode"

	"github.com/capbench/capbench/capture/record"

	"github.com/capbench/capbench/internal/pyfmt"
)

// FingerprintVersion is the fingerprint algorithm this package implements and
// stamps on records.
const FingerprintVersion = 3

// ErrUnfingerprintable reports items whose shape the fingerprint cannot
// hash (a non-object item, an untyped content block, a non-list content, an
// argument value without a canonical form).
var ErrUnfingerprintable = errors.New("items cannot be fingerprinted")

const (
	fingerprintDomain = "nemo-gym-lineage"
	contextDomain     = "nemo-gym-lineage-context"
)

// Field tags of the assistant fingerprint (docs/capture-path.md#fingerprints-and-digests).
const (
	fpKind byte = iota
	fpPayload
	fpCallID
	fpCallName
	fpCallArgs
)

// Field tags of the conversation digest (docs/capture-path.md#fingerprints-and-digests).
const (
	cdRole byte = iota
	cdKind
	cdPayload
	cdCallID
	cdCallName
	cdCallArgs
	cdResultID
	cdResultOutput
)

type contentPart struct{ kind, payload string }

type toolCall struct{ id, name, args string }

type toolResult struct{ id, output string }

// fieldHasher feeds fields to a hash through one scratch buffer: writing
// []byte(s) straight to a hash.Hash copies every string (the conversion
// escapes through the interface), which for a long conversation is a second
// copy of the whole request.
type fieldHasher struct {
	h   hash.Hash
	buf []byte
}

const fieldHasherBuf = 1 << 10

func newFieldHasher(domain string) *fieldHasher {
	f := &fieldHasher{h: sha256.New(), buf: make([]byte, 0, fieldHasherBuf)}
	f.write(domain)
	return f
}

// field writes tag, the UTF-8 length as uint64 big-endian, then s.
func (f *fieldHasher) field(tag byte, s string) {
	if cap(f.buf)-len(f.buf) < 9 {
		f.flush()
	}
	f.buf = append(f.buf, tag)
	f.buf = binary.BigEndian.AppendUint64(f.buf, uint64(len(s)))
	f.write(s)
}

func (f *fieldHasher) write(s string) {
	for len(s) > 0 {
		if len(f.buf) == cap(f.buf) {
			f.flush()
		}
		n := copy(f.buf[len(f.buf):cap(f.buf)], s)
		f.buf = f.buf[:len(f.buf)+n]
		s = s[n:]
	}
}

func (f *fieldHasher) flush() {
	f.h.Write(f.buf)
	f.buf = f.buf[:0]
}

// hex is the digest of what was written so far; writing may go on.
func (f *fieldHasher) hex() string {
	f.flush()
	return hex.EncodeToString(f.h.Sum(nil))
}

// clone is an independent copy of the hasher's state. A hasher with
// nothing buffered is only read, so a Checkpoint's may be cloned by many
// goroutines at once.
func (f *fieldHasher) clone() (*fieldHasher, error) {
	if len(f.buf) > 0 {
		f.flush()
	}
	c, ok := f.h.(hash.Cloner)
	if !ok {
		return nil, errors.New("the hash cannot be cloned")
	}
	h, err := c.Clone()
	if err != nil {
		return nil, err
	}
	return &fieldHasher{h: h, buf: make([]byte, 0, fieldHasherBuf)}, nil
}

// AssistantFingerprint is the assistant fingerprint (version 3, docs/capture-path.md#fingerprints-and-digests) of the
// model-authored items, or "" when there are none.
func AssistantFingerprint(items []any) (string, error) {
	return fingerprintOn(newFieldHasher(fingerprintDomain), false, items, 0)
}

// fingerprintOn feeds items, the first of them item number first, to h,
// whose earlier items were model-authored when authored is set, and returns
// the fingerprint.
func fingerprintOn[T any](h *fieldHasher, authored bool, items []T, first int) (string, error) {
	authored, err := feedFingerprint(h, authored, items, first)
	if err != nil || !authored {
		return "", err
	}
	return h.hex(), nil
}

// feedFingerprint feeds items to h as fingerprintOn does and reports
// whether any item so far was model-authored.
func feedFingerprint[T any](h *fieldHasher, authored bool, items []T, first int) (bool, error) {
	for i, raw := range items {
		a, err := fingerprintItem(h, first+i, raw)
		if err != nil {
			return false, err
		}
		authored = authored || a
	}
	return authored, nil
}

// fingerprintItem feeds item i to an assistant fingerprint and reports
// whether it is model-authored (only those are hashed).
func fingerprintItem(h *fieldHasher, i int, raw any) (authored bool, err error) {
	item, ok := raw.(map[string]any)
	if !ok {
		return false, fmt.Errorf("%w: item %d is %s, not an object", ErrUnfingerprintable, i, jsonKind(raw))
	}
	if !isModelAuthored(item) {
		return false, nil
	}
	parts, err := contentParts(item["content"])
	if err != nil {
		return false, fmt.Errorf("item %d: %w", i, err)
	}
	for _, p := range parts {
		h.field(fpKind, p.kind)
		h.field(fpPayload, p.payload)
	}
	calls, err := toolCalls(item)
	if err != nil {
		return false, fmt.Errorf("item %d: %w", i, err)
	}
	for _, c := range calls {
		h.field(fpCallID, c.id)
		h.field(fpCallName, c.name)
		h.field(fpCallArgs, c.args)
	}
	return true, nil
}

// ConversationDigest is the conversation digest (version 3, docs/capture-path.md#fingerprints-and-digests) of a request context.
// Instruction items (system/developer) count by role only.
func ConversationDigest(items []any) (string, error) {
	h := newFieldHasher(contextDomain)
	for i, raw := range items {
		if err := digestItem(h, i, raw); err != nil {
			return "", err
		}
	}
	return h.hex(), nil
}

// digestItem feeds item i to a conversation digest.
func digestItem(h *fieldHasher, i int, raw any) error {
	item, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("%w: item %d is %s, not an object", ErrUnfingerprintable, i, jsonKind(raw))
	}
	h.field(cdRole, roleOrType(item))
	if r, _ := item["role"].(string); r == "system" || r == "developer" {
		return nil
	}
	parts, err := contentParts(item["content"])
	if err != nil {
		return fmt.Errorf("item %d: %w", i, err)
	}
	for _, p := range parts {
		h.field(cdKind, p.kind)
		h.field(cdPayload, p.payload)
	}
	calls, err := toolCalls(item)
	if err != nil {
		return fmt.Errorf("item %d: %w", i, err)
	}
	for _, c := range calls {
		h.field(cdCallID, c.id)
		h.field(cdCallName, c.name)
		h.field(cdCallArgs, c.args)
	}
	results, err := toolResults(item)
	if err != nil {
		return fmt.Errorf("item %d: %w", i, err)
	}
	for _, r := range results {
		h.field(cdResultID, r.id)
		h.field(cdResultOutput, r.output)
	}
	return nil
}

func isModelAuthored(item map[string]any) bool {
	role, _ := item["role"].(string)
	typ, _ := item["type"].(string)
	return role == "assistant" || typ == "function_call"
}

// roleOrType is the item's role, else its type, else "" (Python truthiness).
func roleOrType(item map[string]any) string {
	if r := item["role"]; truthy(r) {
		return pyStr(r)
	}
	if t := item["type"]; truthy(t) {
		return pyStr(t)
	}
	return ""
}

// contentParts lists (kind, payload) pairs of an item's content (docs/capture-path.md#fingerprints-and-digests).
func contentParts(content any) ([]contentPart, error) {
	switch c := content.(type) {
	case nil:
		return nil, nil
	case string:
		if c == "" {
			return nil, nil
		}
		return []contentPart{{"text", c}}, nil
	case []any:
		var parts []contentPart
		for j, el := range c {
			switch b := el.(type) {
			case string:
				if b != "" {
					parts = append(parts, contentPart{"text", b})
				}
			case map[string]any:
				// Python reads the type as str(type or ""): a falsy type is "".
				blockType := ""
				if t := b["type"]; truthy(t) {
					blockType = pyStr(t)
				}
				if blockType == "tool_use" || blockType == "tool_result" {
					continue
				}
				if text, ok := b["text"].(string); ok && (blockType == "" || blockType == "text" ||
					blockType == "input_text" || blockType == "output_text") {
					if text != "" {
						parts = append(parts, contentPart{"text", text})
					}
					continue
				}
				if blockType == "" {
					return nil, fmt.Errorf("%w: content block %d has no type", ErrUnfingerprintable, j)
				}
				payload, err := record.Canonical(b)
				if err != nil {
					return nil, fmt.Errorf("%w: content block %d: %w", ErrUnfingerprintable, j, err)
				}
				parts = append(parts, contentPart{blockType, string(payload)})
			default:
				return nil, fmt.Errorf("%w: content element %d is %s", ErrUnfingerprintable, j, jsonKind(el))
			}
		}
		return parts, nil
	default:
		return nil, fmt.Errorf("%w: content is %s", ErrUnfingerprintable, jsonKind(content))
	}
}

// toolCalls lists an item's tool calls in fingerprint order (docs/capture-path.md#fingerprints-and-digests).
func toolCalls(item map[string]any) ([]toolCall, error) {
	var calls []toolCall
	if t, _ := item["type"].(string); t == "function_call" {
		args, err := canonicalArguments(item["arguments"])
		if err != nil {
			return nil, err
		}
		name := nameOf(item)
		if ns := item["namespace"]; truthy(ns) {
			name = pyStr(ns) + "__" + name
		}
		calls = append(calls, toolCall{id: firstTruthy(item, "call_id", "id"), name: name, args: args})
	}
	if blocks, ok := item["content"].([]any); ok {
		for _, el := range blocks {
			b, ok := el.(map[string]any)
			if !ok || b["type"] != "tool_use" {
				continue
			}
			args, err := canonicalArguments(b["input"])
			if err != nil {
				return nil, err
			}
			calls = append(calls, toolCall{id: firstTruthy(b, "id"), name: nameOf(b), args: args})
		}
	}
	switch tcs := item["tool_calls"].(type) {
	case []any:
		for j, el := range tcs {
			var tc map[string]any
			switch x := el.(type) {
			case nil:
				// Python reads a null entry as an empty call.
			case map[string]any:
				tc = x
			default:
				return nil, fmt.Errorf("%w: tool_calls[%d] is %s", ErrUnfingerprintable, j, jsonKind(el))
			}
			fn, _ := tc["function"].(map[string]any)
			if f := tc["function"]; truthy(f) && fn == nil {
				return nil, fmt.Errorf("%w: tool_calls[%d].function is %s", ErrUnfingerprintable, j, jsonKind(f))
			}
			args, err := canonicalArguments(fn["arguments"])
			if err != nil {
				return nil, err
			}
			calls = append(calls, toolCall{id: firstTruthy(tc, "id"), name: nameOf(fn), args: args})
		}
	default:
		if truthy(tcs) {
			return nil, fmt.Errorf("%w: tool_calls is %s, not an array", ErrUnfingerprintable, jsonKind(tcs))
		}
	}
	return calls, nil
}

// toolResults lists an item's tool results (docs/capture-path.md#fingerprints-and-digests).
func toolResults(item map[string]any) ([]toolResult, error) {
	var results []toolResult
	typ, _ := item["type"].(string)
	role, _ := item["role"].(string)
	switch {
	case typ == "function_call_output":
		out, err := stringOrCanonical(item["output"])
		if err != nil {
			return nil, err
		}
		results = append(results, toolResult{id: firstTruthy(item, "call_id", "id"), output: out})
	case role == "tool":
		out, err := stringOrCanonical(item["content"])
		if err != nil {
			return nil, err
		}
		results = append(results, toolResult{id: firstTruthy(item, "tool_call_id"), output: out})
	}
	if blocks, ok := item["content"].([]any); ok {
		for _, el := range blocks {
			b, ok := el.(map[string]any)
			if !ok || b["type"] != "tool_result" {
				continue
			}
			out, err := stringOrCanonical(b["content"])
			if err != nil {
				return nil, err
			}
			results = append(results, toolResult{id: firstTruthy(b, "tool_use_id", "id"), output: out})
		}
	}
	return results, nil
}

func stringOrCanonical(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := record.Canonical(v)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnfingerprintable, err)
	}
	return string(b), nil
}

// nameOf reads "name" with Python's quirk: a present null is "None", an
// absent key is "".
func nameOf(m map[string]any) string {
	v, ok := m["name"]
	if !ok {
		return ""
	}
	return pyStr(v)
}

// firstTruthy returns the first truthy value among keys as a string, else "".
func firstTruthy(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if v := m[k]; truthy(v) {
			return pyStr(v)
		}
	}
	return ""
}

// canonicalArguments normalises tool-call arguments (docs/capture-path.md#fingerprints-and-digests): null → "", a
// string that parses as JSON → its canonical form, another string → trimmed,
// anything else → canonical JSON.
func canonicalArguments(v any) (string, error) {
	switch a := v.(type) {
	case nil:
		return "", nil
	case string:
		parsed, err := parsePythonJSON(a)
		if err != nil {
			return strings.TrimFunc(a, pyIsSpace), nil
		}
		b, err := record.Canonical(parsed)
		if err != nil {
			return "", fmt.Errorf("%w: arguments: %w", ErrUnfingerprintable, err)
		}
		return string(b), nil
	default:
		b, err := record.Canonical(a)
		if err != nil {
			return "", fmt.Errorf("%w: arguments: %w", ErrUnfingerprintable, err)
		}
		return string(b), nil
	}
}

// pyIsSpace matches Python's str.isspace for one character; it adds the
// information separators U+001C..U+001F to Go's notion of white space.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// truthy follows Python truthiness for decoded JSON values.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case float64:
		return x != 0
	case int:
		return x != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	default:
		return true
	}
}

// pyStr renders a decoded JSON scalar as Python's str() would.
func pyStr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		return x
	case bool:
		if x {
			return "True"
		}
		return "False"
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			return s
		}
		f, err := x.Float64()
		if err != nil {
			return s
		}
		return pyfmt.JSONFloat(f)
	case float64:
		return pyfmt.JSONFloat(x)
	case int:
		return strconv.Itoa(x)
	default:
		// Containers have no stable Python repr to mirror; use JSON text.
		b, err := record.Canonical(x)
		if err != nil {
			return fmt.Sprint(x)
		}
		return string(b)
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64, int:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("a %T", v)
	}
}
