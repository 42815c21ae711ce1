// Package vllm is an in-process fake of vLLM's OpenAI-compatible server
// (v0.29 wire format) for testing training-token capture.
//
// It renders chat prompts with the Qwen3 chat template, tokenizes them with a
// Qwen3-compatible tokenizer and "generates" text whose token ids are exactly
// the tokenizer's encoding of the assistant turn, so a harness that echoes a
// reply back produces a prompt that extends the previous prompt plus
// generation. Every generation is recorded in a ground-truth ledger that tests
// compare with what a capture proxy recorded.
//
// The fake copies vLLM's flags, routes, JSON shapes, error bodies, tool and
// reasoning parsers, context-length checks, the KV-cache startup check and the
// scheduler's running/waiting behaviour. Generation is deterministic for a
// (seed, prompt) pair and can be driven by scripts (see Script). Fake-only
// behaviour lives under /fake/ and in request headers X-Fake-Script and
// X-Fake-Fault.
package vllm
