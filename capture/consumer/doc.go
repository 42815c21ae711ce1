// Package consumer turns a frozen token capture into what a trainer trains
// on, the way NeMo Gym's consumer and delivery do: it attributes the scored
// response to a captured call, builds chains with the builder, projects the
// main chain into one contiguous Responses payload, decides `mask_sample`
// and attaches the capture metrics. Delivery finalizes a rollout record in
// place, writes the rollouts JSONL durably and retires a snapshot only after
// its record is on disk; a kill switch aborts a run whose mask fraction is
// too high.
//
// The JSON forms of Result and Metrics match Gym's built dict field by field
// (same keys, same rounding, same reason and error strings).
//
// Deliberate differences from Gym (docs/consumer.md, "Differences from Gym"):
//   - the `per_request` builder is answered with the explicit message
//     ErrTextPerRequest instead of "unknown builder 'per_request'…";
//   - a rollout id must match the id pattern as a whole, so an explicit id
//     ending in a newline is "malformed rollout id" rather than a failed
//     freeze;
//   - a failed freeze is reported as "<PythonType>: <Go store message>", so
//     the type matches Gym but the message is the Go store's wording;
//   - rollout records are written compact with Go's sorted key order (Gym
//     keeps insertion order and ", " separators); floats are written as
//     Python writes them.
package consumer
