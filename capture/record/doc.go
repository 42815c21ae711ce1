// Package record defines the token record a capture point writes for one model
// call (the TokenEntry of the capture contract), its canonical JSON encoding,
// validation, the token digest, and the extraction of token fields from a
// served Chat Completions or Responses payload.
//
// It is the wire layer: it imports only the standard library, so the capture
// store, the proxy and the consumer can share it.
package record
