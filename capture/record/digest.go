package record

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
)

// tokenDomain prefixes every token digest (docs/record.md#digests).
const tokenDomain = "nemo-gym-tokens"

// tokenDigestFormat is the digest format version byte written after the
// domain for non-empty sequences.
const tokenDigestFormat = 0x01

// TokenDigest is the token digest (docs/record.md#digests) of a token-id sequence. Negative ids have no
// unsigned 64-bit form and are an error.
func TokenDigest(ids []int) (string, error) {
	return tokenDigest(ids)
}

// tokenDigest is the token digest of the parts joined, hashed without
// joining them.
func tokenDigest(parts ...[]int) (string, error) {
	h := sha256.New()
	h.Write([]byte(tokenDomain))
	n := 0
	for _, ids := range parts {
		n += len(ids)
	}
	if n > 0 {
		// Hash in chunks so a 32k prompt costs one small buffer.
		var buf [8 * 512]byte
		buf[0] = tokenDigestFormat
		binary.BigEndian.PutUint64(buf[1:9], uint64(n))
		h.Write(buf[:9])
		used, before := 0, 0
		for _, ids := range parts {
			for i, id := range ids {
				if id < 0 {
					return "", fmt.Errorf("%w: negative token id %d at index %d", ErrInvalid, id, before+i)
				}
				binary.BigEndian.PutUint64(buf[used:], uint64(id))
				used += 8
				if used == len(buf) {
					h.Write(buf[:used])
					used = 0
				}
			}
			before += len(ids)
		}
		h.Write(buf[:used])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// EntryDigest is the state index's digest of one line: SHA-256 hex of the
// canonical bytes without the trailing newline.
func EntryDigest(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// Cumulative returns prompt ++ generation as a new slice. For a delta record
// this is only the suffix; the caller must materialise the full prompt.
func (e *Entry) Cumulative() []int {
	out := make([]int, 0, len(e.PromptTokenIDs)+len(e.GenerationTokenIDs))
	out = append(out, e.PromptTokenIDs...)
	return append(out, e.GenerationTokenIDs...)
}

// StampLineage sets cum_len and digest from cumulative, the record's full
// prompt + generation given in parts that are hashed as one sequence
// without joining them (the record's own Cumulative when none or one nil
// part is given, which a delta record refuses), and the parent verdict,
// then re-checks the parent rules of docs/record.md#validation. On error
// the entry is left unchanged.
func (e *Entry) StampLineage(res Resolution, parentCallID string, reason string, cumulative ...[]int) error {
	parts := cumulative
	if len(parts) == 0 || (len(parts) == 1 && parts[0] == nil) {
		if e.PromptIsDelta {
			return fmt.Errorf("%w: a delta record needs its full cumulative tokens to be stamped", ErrInvalid)
		}
		parts = [][]int{e.PromptTokenIDs, e.GenerationTokenIDs}
	}
	var parent *string
	if parentCallID != "" {
		parent = &parentCallID
	}
	resolution := res
	if err := checkParentRules(&resolution, parent); err != nil {
		return err
	}
	digest, err := tokenDigest(parts...)
	if err != nil {
		return err
	}
	cumLen := 0
	for _, ids := range parts {
		cumLen += len(ids)
	}
	e.CumLen = &cumLen
	e.Digest = &digest
	e.ParentCallID = parent
	e.ParentResolution = &resolution
	e.ParentResolutionReason = reason
	return nil
}

// Clone returns a deep copy: slices, pointers, output items and extras are
// not shared with e.
func (e *Entry) Clone() *Entry {
	if e == nil {
		return nil
	}
	c := *e
	c.stamped = stampedCheck{}
	c.promptText = TokenText{}
	c.PromptTokenIDs = cloneSlice(e.PromptTokenIDs)
	c.GenerationTokenIDs = cloneSlice(e.GenerationTokenIDs)
	c.GenerationLogProbs = cloneSlice(e.GenerationLogProbs)
	c.RoutedExperts = cloneSlice(e.RoutedExperts)
	if e.OutputItems != nil {
		c.OutputItems = make([]Item, len(e.OutputItems))
		for i, it := range e.OutputItems {
			c.OutputItems[i] = cloneJSON(it).(map[string]any)
		}
	}
	c.TokenItemIndex = clonePtr(e.TokenItemIndex)
	c.ResponseID = clonePtr(e.ResponseID)
	c.ParentCallID = clonePtr(e.ParentCallID)
	c.CumLen = clonePtr(e.CumLen)
	c.Digest = clonePtr(e.Digest)
	c.ParentResolution = clonePtr(e.ParentResolution)
	c.FingerprintVersion = clonePtr(e.FingerprintVersion)
	if e.Extra != nil {
		c.Extra = make(map[string]json.RawMessage, len(e.Extra))
		for k, v := range e.Extra {
			c.Extra[k] = cloneSlice(v)
		}
	}
	return &c
}

func cloneSlice[S ~[]E, E any](s S) S {
	if s == nil {
		return nil
	}
	return append(S(make([]E, 0, len(s))), s...)
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// cloneJSON deep-copies a decoded JSON value.
func cloneJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return map[string]any(nil)
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneJSON(e)
		}
		return m
	case []any:
		if x == nil {
			return []any(nil)
		}
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = cloneJSON(e)
		}
		return s
	case json.RawMessage:
		return cloneSlice(x)
	case map[string]json.RawMessage:
		return maps.Clone(x)
	default:
		return v
	}
}
