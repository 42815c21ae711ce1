package record

import (
	"errors"
	"fmt"
)

// Sentinel errors; every validation error wraps ErrInvalid, and a refused
// schema generation additionally wraps ErrSchemaTooNew or ErrSchemaTooOld.
var (
	ErrInvalid      = errors.New("invalid token record")
	ErrSchemaTooNew = errors.New("token record schema is newer than this reader understands")
	ErrSchemaTooOld = errors.New("token record schema is below the supported minimum")
)

// Validate applies the rules of docs/record.md#validation in their order and
// returns the first failure.
func (e *Entry) Validate() error {
	if e.SchemaVersion > SchemaVersion {
		return fmt.Errorf("%w: %w: schema_version %d, this reader understands up to %d",
			ErrInvalid, ErrSchemaTooNew, e.SchemaVersion, SchemaVersion)
	}
	if e.SchemaVersion < MinSchemaVersion {
		return fmt.Errorf("%w: %w: schema_version %d is below the supported minimum %d",
			ErrInvalid, ErrSchemaTooOld, e.SchemaVersion, MinSchemaVersion)
	}
	if len(e.GenerationTokenIDs) != len(e.GenerationLogProbs) {
		return fmt.Errorf("%w: %d generation_token_ids but %d generation_log_probs",
			ErrInvalid, len(e.GenerationTokenIDs), len(e.GenerationLogProbs))
	}
	if e.TokenItemIndex != nil && (*e.TokenItemIndex < 0 || *e.TokenItemIndex >= len(e.OutputItems)) {
		return fmt.Errorf("%w: token_item_index %d outside output_items (length %d)",
			ErrInvalid, *e.TokenItemIndex, len(e.OutputItems))
	}
	if err := checkParentRules(e.ParentResolution, e.ParentCallID); err != nil {
		return err
	}
	if e.PromptIsDelta && !(e.ParentResolution != nil && *e.ParentResolution == ResolutionResolved &&
		e.ParentCallID != nil && *e.ParentCallID != "") {
		return fmt.Errorf("%w: prompt_is_delta requires a resolved parent_call_id", ErrInvalid)
	}
	return nil
}

// checkParentRules are the parent rules of docs/record.md#validation: a
// resolved record names its parent, a root or unresolved one does not, and a
// delta prompt needs a resolved parent.
func checkParentRules(res *Resolution, parent *string) error {
	if res == nil {
		return nil
	}
	switch *res {
	case ResolutionResolved:
		if parent == nil || *parent == "" {
			return fmt.Errorf("%w: parent_resolution resolved needs a parent_call_id", ErrInvalid)
		}
	case ResolutionRoot, ResolutionUnresolved:
		if parent != nil {
			return fmt.Errorf("%w: parent_resolution %s must not carry a parent_call_id (got %q)",
				ErrInvalid, *res, *parent)
		}
	default:
		return fmt.Errorf("%w: unknown parent_resolution %q", ErrInvalid, string(*res))
	}
	return nil
}
