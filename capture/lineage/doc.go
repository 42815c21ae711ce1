// Package lineage computes the conversation fingerprints NeMo Gym's capture
// uses (assistant fingerprint and conversation digest, version 3; see
// docs/capture-path.md#fingerprints-and-digests), builds
// a call's request items, resolves a request to its parent call at request
// time, and stamps those results on a token record.
//
// It works on decoded JSON values (map[string]any, []any, string,
// json.Number, bool, nil) in any of the three dialect shapes: Chat
// Completions messages, Anthropic Messages blocks and Responses items.
//
// Decode request bodies with json.Decoder.UseNumber: hashes include the
// canonical JSON of tool arguments and non-text blocks, where Python writes
// an integer 5 as "5", but a float64 from plain decoding is written "5.0"
// and breaks the match with records stamped by Gym.
package lineage
