package record

import "encoding/json"

// Schema generations the record writer stamps and the reader accepts.
const (
	// SchemaVersion is the generation this package writes.
	SchemaVersion = 5
	// MinSchemaVersion is the oldest generation this package reads.
	MinSchemaVersion = 3
)

// Resolution is the request-time parent verdict recorded on an entry.
type Resolution string

// Parent verdicts.
const (
	ResolutionRoot       Resolution = "root"
	ResolutionResolved   Resolution = "resolved"
	ResolutionUnresolved Resolution = "unresolved"
)

// Item is one output item (a JSON object). Numbers decode as json.Number so
// that integers keep their exact value through a rewrite.
type Item = map[string]any

// Entry is one captured model call. Pointer fields are JSON null when nil.
// Unknown keys read from a line are kept in Extra and written back.
type Entry struct {
	SchemaVersion             int             `json:"schema_version"`
	RolloutID                 string          `json:"rollout_id"`
	ModelCallID               string          `json:"model_call_id"`
	Model                     string          `json:"model"`
	PromptTokenIDs            []int           `json:"prompt_token_ids"`
	GenerationTokenIDs        []int           `json:"generation_token_ids"`
	GenerationLogProbs        []float64       `json:"generation_log_probs"`
	RoutedExperts             json.RawMessage `json:"routed_experts"`
	OutputItems               []Item          `json:"output_items"`
	TokenItemIndex            *int            `json:"token_item_index"`
	ResponseID                *string         `json:"response_id"`
	CreatedAt                 float64         `json:"created_at"`
	ParentCallID              *string         `json:"parent_call_id"`
	CumLen                    *int            `json:"cum_len"`
	Digest                    *string         `json:"digest"`
	ParentResolution          *Resolution     `json:"parent_resolution"`
	ContinuationFingerprint   string          `json:"continuation_fingerprint"`
	ContinuationContextLen    int             `json:"continuation_context_len"`
	ContinuationContextDigest string          `json:"continuation_context_digest"`
	ParentResolutionReason    string          `json:"parent_resolution_reason"`
	FingerprintVersion        *int            `json:"fingerprint_version"`
	PrefixRequested           bool            `json:"prefix_requested"`
	PrefixSupplied            bool            `json:"prefix_supplied"`
	PromptIsDelta             bool            `json:"prompt_is_delta"`

	// Extra holds keys this schema does not declare, preserved on rewrite.
	Extra map[string]json.RawMessage `json:"-"`

	// absent marks declared fields the decoded line did not carry (an older
	// writer, e.g. a schema-5 line without response_id). While such a field
	// still holds its default it is left out on re-encoding, so a parsed
	// line re-encodes to the bytes it was read from. Entries built in code
	// have no marks and always write every declared field.
	absent fieldSet

	// stamped memoises StampedDigestMatches when a reader worked it out
	// ahead (DigestPrecheck).
	stamped stampedCheck

	// promptText is the canonical text PromptTokenIDs were read from, when
	// the caller handed it over (UsePromptText).
	promptText TokenText
}
