// Package record defines the token record a capture point writes for one model
// call (NeMo Gym's TokenEntry; docs/record.md), its canonical JSON encoding,
// validation, the token digest, and the extraction of token fields from a
// served Chat Completions or Responses payload.
//
// It is the wire layer: it imports only the standard library, so the capture
// store, the proxy and the consumer can share it.
//
// Encoding follows orjson 3.8 with sorted keys (docs/store.md#canonical-json), so a line
// written here is byte-equal to the line Gym writes for the same record, and
// a line read from a Gym file re-encodes to the bytes it was read from: when a
// decoded line lacks a declared field (an older writer, e.g. a schema-5 line
// without response_id) that field stays absent while it holds its default.
// Entries built in code always carry every declared field.
//
// Reading is lenient where Python's reader is (integral floats and numeric
// strings pass as integers) and uses a dedicated scanner for the token
// arrays, which dominate a record's size; reflection-based decoding of those
// arrays costs several times more.
package record
