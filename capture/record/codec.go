package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Declared field names, in canonical (sorted) order.
const (
	keyContextDigest      = "continuation_context_digest"
	keyContextLen         = "continuation_context_len"
	keyFingerprint        = "continuation_fingerprint"
	keyCreatedAt          = "created_at"
	keyCumLen             = "cum_len"
	keyDigest             = "digest"
	keyFingerprintVersion = "fingerprint_version"
	keyLogProbs           = "generation_log_probs"
	keyGenerationIDs      = "generation_token_ids"
	keyModel              = "model"
	keyModelCallID        = "model_call_id"
	keyOutputItems        = "output_items"
	keyParentCallID       = "parent_call_id"
	keyParentResolution   = "parent_resolution"
	keyResolutionReason   = "parent_resolution_reason"
	keyPrefixRequested    = "prefix_requested"
	keyPrefixSupplied     = "prefix_supplied"
	keyPromptIsDelta      = "prompt_is_delta"
	keyPromptIDs          = "prompt_token_ids"
	keyResponseID         = "response_id"
	keyRolloutID          = "rollout_id"
	keyRoutedExperts      = "routed_experts"
	keySchemaVersion      = "schema_version"
	keyTokenItemIndex     = "token_item_index"
)

var declaredKeys = [...]string{
	keyContextDigest, keyContextLen, keyFingerprint, keyCreatedAt, keyCumLen,
	keyDigest, keyFingerprintVersion, keyLogProbs, keyGenerationIDs, keyModel,
	keyModelCallID, keyOutputItems, keyParentCallID, keyParentResolution,
	keyResolutionReason, keyPrefixRequested, keyPrefixSupplied, keyPromptIsDelta,
	keyPromptIDs, keyResponseID, keyRolloutID, keyRoutedExperts, keySchemaVersion,
	keyTokenItemIndex,
}

// fieldSet is a bit set over declaredKeys.
type fieldSet uint32

func (s fieldSet) has(i int) bool { return s&(1<<i) != 0 }

// WriteAllFields drops the record of which declared fields were absent from
// the decoded line, so the next encoding writes every declared field (what a
// current writer emits), not a byte copy of the line it was read from.
func (e *Entry) WriteAllFields() { e.absent = 0 }

// AbsentFields lists declared fields the decoded line did not carry.
func (e *Entry) AbsentFields() []string {
	var out []string
	for i, k := range declaredKeys {
		if e.absent.has(i) {
			out = append(out, k)
		}
	}
	return out
}

// isDefault reports whether the declared field still holds the value a
// reader assumes when the key is absent (the "when absent" column of docs/record.md#fields).
func (e *Entry) isDefault(key string) bool {
	switch key {
	case keyContextDigest:
		return e.ContinuationContextDigest == ""
	case keyContextLen:
		return e.ContinuationContextLen == 0
	case keyFingerprint:
		return e.ContinuationFingerprint == ""
	case keyCreatedAt:
		return e.CreatedAt == 0 && !math.Signbit(e.CreatedAt)
	case keyCumLen:
		return e.CumLen == nil
	case keyDigest:
		return e.Digest == nil
	case keyFingerprintVersion:
		return e.FingerprintVersion == nil
	case keyModel:
		return e.Model == ""
	case keyOutputItems:
		return len(e.OutputItems) == 0
	case keyParentCallID:
		return e.ParentCallID == nil
	case keyParentResolution:
		return e.ParentResolution == nil
	case keyResolutionReason:
		return e.ParentResolutionReason == ""
	case keyPrefixRequested:
		return !e.PrefixRequested
	case keyPrefixSupplied:
		return !e.PrefixSupplied
	case keyPromptIsDelta:
		return !e.PromptIsDelta
	case keyResponseID:
		return e.ResponseID == nil
	case keyRoutedExperts:
		return len(e.RoutedExperts) == 0
	case keySchemaVersion:
		return e.SchemaVersion == SchemaVersion
	case keyTokenItemIndex:
		return e.TokenItemIndex == nil
	}
	// Required fields have no default and are always written.
	return false
}

const allDeclared = fieldSet(1<<len(declaredKeys) - 1)

// declaredIndex is key's position in declaredKeys, or -1.
func declaredIndex(key string) int {
	for i, k := range declaredKeys {
		if k == key {
			return i
		}
	}
	return -1
}

func isDeclared(key string) bool { return declaredIndex(key) >= 0 }

// MarshalCanonical returns the record's canonical JSON (docs/store.md#canonical-json): every
// declared field plus the Extra keys, sorted, compact, without a trailing
// newline. A non-finite log-prob or created_at is an error rather than the
// unreadable null Python would write.
func (e *Entry) MarshalCanonical() ([]byte, error) {
	for i, lp := range e.GenerationLogProbs {
		if math.IsNaN(lp) || math.IsInf(lp, 0) {
			return nil, fmt.Errorf("%w: generation_log_probs[%d] is %v (not finite)", ErrInvalid, i, lp)
		}
	}
	if math.IsNaN(e.CreatedAt) || math.IsInf(e.CreatedAt, 0) {
		return nil, fmt.Errorf("%w: created_at is %v (not finite)", ErrInvalid, e.CreatedAt)
	}
	// Token arrays dominate; a six-digit id plus comma is about 7 bytes.
	size := 1024 + 8*(len(e.PromptTokenIDs)+len(e.GenerationTokenIDs)) +
		24*len(e.GenerationLogProbs) + len(e.RoutedExperts)
	dst := make([]byte, 0, size)

	extras := sortedKeys(e.Extra)
	x := 0
	first := true
	var err error
	writeExtrasBefore := func(key string) error {
		for x < len(extras) && (key == "" || extras[x] < key) {
			k := extras[x]
			x++
			if isDeclared(k) {
				continue // a declared field always wins over a stray extra
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			if dst, err = appendString(dst, k); err != nil {
				return err
			}
			dst = append(dst, ':')
			if dst, err = appendRaw(dst, e.Extra[k]); err != nil {
				return fmt.Errorf("extra key %q: %w", k, err)
			}
		}
		return nil
	}

	dst = append(dst, '{')
	for i, key := range declaredKeys {
		if err := writeExtrasBefore(key); err != nil {
			return nil, err
		}
		if e.absent.has(i) && e.isDefault(key) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, key...)
		dst = append(dst, '"', ':')
		if dst, err = e.appendField(dst, key); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	if err := writeExtrasBefore(""); err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

func (e *Entry) appendField(dst []byte, key string) ([]byte, error) {
	switch key {
	case keyContextDigest:
		return appendString(dst, e.ContinuationContextDigest)
	case keyContextLen:
		return strconv.AppendInt(dst, int64(e.ContinuationContextLen), 10), nil
	case keyFingerprint:
		return appendString(dst, e.ContinuationFingerprint)
	case keyCreatedAt:
		return appendFloat(dst, e.CreatedAt), nil
	case keyCumLen:
		return appendIntPtr(dst, e.CumLen), nil
	case keyDigest:
		return appendStringPtr(dst, e.Digest)
	case keyFingerprintVersion:
		return appendIntPtr(dst, e.FingerprintVersion), nil
	case keyLogProbs:
		dst = append(dst, '[')
		for i, f := range e.GenerationLogProbs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendFloat(dst, f)
		}
		return append(dst, ']'), nil
	case keyGenerationIDs:
		return appendInts(dst, e.GenerationTokenIDs), nil
	case keyModel:
		return appendString(dst, e.Model)
	case keyModelCallID:
		return appendString(dst, e.ModelCallID)
	case keyOutputItems:
		return appendCanonical(dst, e.OutputItems)
	case keyParentCallID:
		return appendStringPtr(dst, e.ParentCallID)
	case keyParentResolution:
		if e.ParentResolution == nil {
			return append(dst, "null"...), nil
		}
		return appendString(dst, string(*e.ParentResolution))
	case keyResolutionReason:
		return appendString(dst, e.ParentResolutionReason)
	case keyPrefixRequested:
		return strconv.AppendBool(dst, e.PrefixRequested), nil
	case keyPrefixSupplied:
		return strconv.AppendBool(dst, e.PrefixSupplied), nil
	case keyPromptIsDelta:
		return strconv.AppendBool(dst, e.PromptIsDelta), nil
	case keyPromptIDs:
		if e.promptText.encodes(e.PromptTokenIDs) {
			return append(dst, e.promptText.text...), nil
		}
		return appendInts(dst, e.PromptTokenIDs), nil
	case keyResponseID:
		return appendStringPtr(dst, e.ResponseID)
	case keyRolloutID:
		return appendString(dst, e.RolloutID)
	case keyRoutedExperts:
		return appendRaw(dst, e.RoutedExperts)
	case keySchemaVersion:
		return strconv.AppendInt(dst, int64(e.SchemaVersion), 10), nil
	case keyTokenItemIndex:
		return appendIntPtr(dst, e.TokenItemIndex), nil
	}
	return dst, fmt.Errorf("unknown field %q", key)
}

func appendIntPtr(dst []byte, p *int) []byte {
	if p == nil {
		return append(dst, "null"...)
	}
	return strconv.AppendInt(dst, int64(*p), 10)
}

func appendStringPtr(dst []byte, p *string) ([]byte, error) {
	if p == nil {
		return append(dst, "null"...), nil
	}
	return appendString(dst, *p)
}

// MarshalJSON writes the canonical encoding. Note that json.Marshal
// re-escapes '<', '>' and '&' in what a Marshaler returns; use
// MarshalCanonical wherever the exact bytes matter (store lines, digests).
func (e *Entry) MarshalJSON() ([]byte, error) {
	return e.MarshalCanonical()
}

// ParseLine decodes one JSONL record (surrounding whitespace, including the
// newline, is ignored) and validates it (docs/record.md#validation).
func ParseLine(line []byte) (*Entry, error) {
	e := new(Entry)
	if err := e.UnmarshalJSON(line); err != nil {
		return nil, err
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}

// LineParser parses the lines of one JSONL file in file order. Each Parse
// returns what ParseLine returns for the same line (equal entries, equal
// errors), but when a record's prompt starts with the previous record's
// prompt and generation (a chained rollout, where prompts grow call by call)
// those ids are not parsed again: the prompt continues the array that holds
// the previous record's prompt and generation. Reading a rollout then costs
// about one pass over its new tokens, and its token memory is about that of
// its longest sequence rather than the sum of all prompts.
//
// So entries returned by one LineParser may share token memory: treat their
// token arrays as read-only. Appending to one is safe (each array's capacity
// ends at its length). A line passed to Parse must stay unchanged until the
// next call. The zero value is ready to use; a LineParser is not safe for
// concurrent use.
type LineParser struct {
	known [2]tokenArray
	// base holds known[0].ids then known[1].ids back to back; nothing
	// refers to its memory past its length.
	base []int
}

// Parse decodes and validates one line, as ParseLine does.
func (p *LineParser) Parse(line []byte) (*Entry, error) {
	s := &scanner{b: line, chained: true}
	if len(p.known[0].ids) > 0 {
		s.known = p.known[:]
		s.base = p.base
	}
	e := new(Entry)
	err := e.decodeWith(s)
	if err == nil {
		err = e.Validate()
	}
	if err != nil {
		// Forget everything: the next line is compared with nothing
		// rather than with a record that was refused.
		p.known, p.base = [2]tokenArray{}, nil
		return nil, err
	}
	// Put the generation right after the prompt, in the array the prompt
	// was built in, so the next record's prompt can continue both.
	n := len(e.PromptTokenIDs)
	buf := append(s.promptBuf[:n], e.GenerationTokenIDs...)
	e.PromptTokenIDs = buf[:n:n]
	e.GenerationTokenIDs = buf[n:len(buf):len(buf)]
	p.base = buf
	p.known = [2]tokenArray{
		{text: s.prompt.text, ids: e.PromptTokenIDs},
		{text: s.gen.text, ids: e.GenerationTokenIDs},
	}
	return e, nil
}

// UnmarshalJSON decodes a record leniently, as the Python reader does:
// integral floats and numeric strings pass as integers, absent fields take
// the defaults of docs/record.md#fields (a missing schema_version reads as SchemaVersion),
// and unknown keys are kept in Extra. It does not run Validate. Token arrays
// are read by a dedicated scanner rather than reflection.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var out Entry
	if err := out.decode(b); err != nil {
		return err
	}
	*e = out
	return nil
}

func (e *Entry) decode(b []byte) error {
	return e.decodeWith(&scanner{b: b})
}

func (e *Entry) decodeWith(s *scanner) error {
	if s.peek() != '{' {
		return fmt.Errorf("%w: record is not a JSON object", ErrInvalid)
	}
	s.i++
	e.SchemaVersion = SchemaVersion
	var seen fieldSet
	if s.peek() == '}' {
		s.i++
	} else {
		for {
			key, err := s.str()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			if err := s.expect(':'); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			if i := declaredIndex(key); i >= 0 {
				seen |= 1 << i
			}
			if err := e.decodeField(s, key); err != nil {
				return fmt.Errorf("%w: field %s: %w", ErrInvalid, key, err)
			}
			c := s.peek()
			if c == ',' {
				s.i++
				continue
			}
			if c == '}' {
				s.i++
				break
			}
			return fmt.Errorf("%w: %w", ErrInvalid, s.fail("expected ',' or '}'"))
		}
	}
	if s.ws(); s.i != len(s.b) {
		return fmt.Errorf("%w: %w", ErrInvalid, s.fail("trailing data after the record"))
	}
	var missing []string
	for _, k := range [...]string{keyRolloutID, keyModelCallID, keyPromptIDs, keyGenerationIDs, keyLogProbs} {
		if !seen.has(declaredIndex(k)) {
			missing = append(missing, k)
		}
	}
	e.absent = allDeclared &^ seen
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing required field(s): %s", ErrInvalid, strings.Join(missing, ", "))
	}
	if e.OutputItems == nil {
		e.OutputItems = []Item{}
	}
	return nil
}

func (e *Entry) decodeField(s *scanner, key string) error {
	var err error
	switch key {
	case keyPromptIDs:
		spare := 0
		if s.chained {
			// Room for the generation, which LineParser appends.
			spare = len(s.gen.ids) + 64
		}
		var ids []int
		var text []byte
		ids, text, err = s.ints(key, s.known, s.base, spare)
		e.PromptTokenIDs = ids[:len(ids):len(ids)]
		s.prompt = tokenArray{text: text, ids: e.PromptTokenIDs}
		s.promptBuf = ids
	case keyGenerationIDs:
		var ids []int
		var text []byte
		ids, text, err = s.ints(key, nil, nil, 0)
		e.GenerationTokenIDs = ids[:len(ids):len(ids)]
		s.gen = tokenArray{text: text, ids: e.GenerationTokenIDs}
	case keyLogProbs:
		e.GenerationLogProbs, err = s.floats(key)
	case keySchemaVersion:
		e.SchemaVersion, err = s.intValue()
	case keyContextLen:
		e.ContinuationContextLen, err = s.intValue()
	case keyCumLen:
		e.CumLen, err = s.optInt()
	case keyTokenItemIndex:
		e.TokenItemIndex, err = s.optInt()
	case keyFingerprintVersion:
		e.FingerprintVersion, err = s.optInt()
	case keyRolloutID:
		e.RolloutID, err = s.stringValue()
	case keyModelCallID:
		e.ModelCallID, err = s.stringValue()
	case keyModel:
		e.Model, err = s.stringValue()
	case keyFingerprint:
		e.ContinuationFingerprint, err = s.stringValue()
	case keyContextDigest:
		e.ContinuationContextDigest, err = s.stringValue()
	case keyResolutionReason:
		e.ParentResolutionReason, err = s.stringValue()
	case keyDigest:
		e.Digest, err = s.optString()
	case keyParentCallID:
		e.ParentCallID, err = s.optString()
	case keyResponseID:
		e.ResponseID, err = s.optString()
	case keyParentResolution:
		var p *string
		if p, err = s.optString(); err == nil && p != nil {
			r := Resolution(*p)
			switch r {
			case ResolutionRoot, ResolutionResolved, ResolutionUnresolved:
				e.ParentResolution = &r
			default:
				err = fmt.Errorf("unknown parent_resolution %q", *p)
			}
		} else if err == nil {
			e.ParentResolution = nil
		}
	case keyCreatedAt:
		e.CreatedAt, err = s.floatValue()
	case keyPrefixRequested:
		e.PrefixRequested, err = s.boolValue()
	case keyPrefixSupplied:
		e.PrefixSupplied, err = s.boolValue()
	case keyPromptIsDelta:
		e.PromptIsDelta, err = s.boolValue()
	case keyRoutedExperts:
		var raw []byte
		if raw, err = s.skip(); err == nil {
			if bytes.Equal(raw, []byte("null")) {
				e.RoutedExperts = nil
			} else {
				e.RoutedExperts = bytes.Clone(raw)
			}
		}
	case keyOutputItems:
		e.OutputItems, err = s.items()
	default:
		var raw []byte
		if raw, err = s.skip(); err == nil {
			if e.Extra == nil {
				e.Extra = make(map[string]json.RawMessage)
			}
			e.Extra[key] = bytes.Clone(raw)
		}
	}
	return err
}

func (s *scanner) intValue() (int, error) {
	raw, err := s.skip()
	if err != nil {
		return 0, err
	}
	return coerceIntRaw(raw)
}

func (s *scanner) optInt() (*int, error) {
	if s.literal("null") {
		return nil, nil
	}
	v, err := s.intValue()
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func (s *scanner) stringValue() (string, error) {
	if s.peek() != '"' {
		return "", errors.New("expected a string")
	}
	return s.str()
}

func (s *scanner) optString() (*string, error) {
	if s.literal("null") {
		return nil, nil
	}
	v, err := s.stringValue()
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func (s *scanner) floatValue() (float64, error) {
	if c := s.peek(); c == '-' || (c >= '0' && c <= '9') {
		num, err := s.number()
		if err != nil {
			return 0, err
		}
		f, err := strconv.ParseFloat(string(num), 64)
		if err != nil {
			return 0, fmt.Errorf("%w", err)
		}
		return f, nil
	}
	raw, err := s.skip()
	if err != nil {
		return 0, err
	}
	return coerceFloatRaw(raw)
}

// boolValue accepts JSON booleans and the lax forms Python's model layer
// accepts: 0/1 and the usual true/false words.
func (s *scanner) boolValue() (bool, error) {
	if s.literal("true") {
		return true, nil
	}
	if s.literal("false") {
		return false, nil
	}
	raw, err := s.skip()
	if err != nil {
		return false, err
	}
	switch string(raw) {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	if len(raw) > 0 && raw[0] == '"' {
		var str string
		if err := json.Unmarshal(raw, &str); err == nil {
			switch strings.ToLower(strings.TrimSpace(str)) {
			case "0", "off", "f", "false", "n", "no":
				return false, nil
			case "1", "on", "t", "true", "y", "yes":
				return true, nil
			}
		}
	}
	return false, fmt.Errorf("%s is not a boolean", truncate(raw))
}

// items decodes output_items: an array of objects, numbers kept exact.
func (s *scanner) items() ([]Item, error) {
	raw, err := s.skip()
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 || raw[0] != '[' {
		return nil, errors.New("expected an array of objects")
	}
	var generic []any
	if err := unmarshalUseNumber(raw, &generic); err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	out := make([]Item, len(generic))
	for i, g := range generic {
		m, ok := g.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("output_items[%d] is not an object", i)
		}
		out[i] = m
	}
	return out, nil
}
