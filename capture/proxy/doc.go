// Package proxy is the training-token capture proxy that sits between an agent
// harness and a vLLM server.
//
// It routes three URL shapes (docs/capture-path.md#the-url-prefix):
//
//	/ng-rollout/<id>/training-token-capture/<api path>  training capture
//	/ng-rollout/<id>/<api path>                         call summary only (a log line and metrics, no tokens)
//	/<api path>                                         forwarded, not captured
//
// and four dialects: Chat Completions, Completions, Responses and Anthropic
// Messages, each read into one modelCall and run through one pipeline
// (runCall). Every dialect is sent upstream as a Chat Completions (or
// Completions) request; the proxy asks vLLM for token ids and log-probs,
// records them into a store, strips them from the reply and answers the client
// in its own dialect. A streaming client of chat, Responses or Messages gets
// the engine's stream translated chunk by chunk and the record is committed
// when it ends (docs/streaming.md); with Options.BufferedStreams, and always
// for completions, the engine is asked for the complete reply and a streaming
// client gets a synthetic stream of it. Client JSON the proxy re-sends keeps
// its key order (docs/argument-order.md).
//
// Choices where NeMo Gym's versions differ or leave room (each is also noted
// where it is made):
//
//   - Token fields are stripped from every reply on the capture path, streaming
//     or not (the Python server strips them only for Anthropic and chat
//     streaming). The record already holds them.
//   - Non-generating routes under the training prefix (HEAD probes, GET
//     /v1/models, POST /v1/messages/count_tokens, /health) are answered and never
//     mark the rollout incomplete; an unknown path answers 404 and marks nothing
//     (Gym's newest behaviour; docs/capture-path.md#the-url-prefix).
//   - The Messages reply reuses the captured Responses id (resp_<32 hex>) as its
//     message id (Gym's newest behaviour; older versions mint a fresh msg_ id),
//     so every dialect's client holds the recorded response_id.
//   - An upstream error (non-2xx, unreachable, cut or unreadable reply) reaches
//     the client with the upstream status (502 when there is none) and, for
//     the OpenAI dialects, the upstream body as is; the Messages route wraps
//     the upstream message in Anthropic's error envelope so that Claude Code
//     retries as it does against Anthropic. The rollout is marked incomplete
//     explicitly, on top of the dangling intent a freeze already counts as lost
//     (docs/capture-path.md#failures).
//   - Retries: a resent identical body is a new call (new model_call_id) that
//     resolves to the same parent as the first attempt, i.e. a retry sibling
//     for the builder. A retry marks nothing; after a 5xx the rollout is
//     incomplete only because of the failed attempt (its intent has no
//     record). After a buffered stream the client cut, the first attempt was
//     already recorded (capture completes before the reply is written), so
//     the resend is a sibling; for a first call that means two roots, which
//     the consumer masks unless attributed (row 5d of docs/scenarios.md). A
//     pass-through stream cut before its end records nothing for that
//     attempt and marks the rollout incomplete.
//   - On a store that writes intents ahead (store.IntentWriter: the file
//     store), the intent is written before the engine call and synced only
//     when the call is answered without a record, or before a stream's first
//     event; a failed sync then answers 503 instead of the reply
//     (docs/capture-path.md#one-captured-call-in-order). Gym syncs every
//     intent before generating.
//   - Refused calls (rollout frozen or retired, invalid id, store not
//     writable) answer a status SDKs do not retry (400, 410, 424, with
//     x-should-retry: false) naming the rollout and the fix; a full capture
//     disk answers 503 with Retry-After.
//   - Lineage request items of a Messages call omit thinking blocks from
//     assistant turns: the recorded output's reasoning item is never
//     model-authored, so the echoed thinking block must not count either
//     (otherwise every Claude Code turn after thinking is UNRESOLVED no_match).
//   - /v1/completions records one output item {"type":"message",
//     "role":"assistant","content":<text>} and is always a ROOT (a raw prompt
//     has no model-authored turns).
//   - The summary-only shape (/ng-rollout/<id>/v1/...) writes nothing to the
//     store: the call is forwarded, counted in the metrics and logged with its
//     rollout id, minted call id, status and duration.
//   - Per rollout the proxy keeps only lineage index nodes (no token arrays),
//     dropped once the store answers frozen or retired for that rollout, and
//     at most Options.MaxTrackedRollouts of them (least recently used
//     dropped first; a dropped index is rebuilt from the store). An index
//     is also rebuilt when the store no longer holds a call it has, as when
//     a deleted rollout's id is reused.
package proxy
