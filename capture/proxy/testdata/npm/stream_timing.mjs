// Reads one streamed reply per dialect with the official clients, event by
// event, and prints when the first text arrived and when the stream ended
// (milliseconds from the request), as one JSON line.
//
// Environment: PROXY_URL, PROXY_API_KEY, ROLLOUT_PREFIX (as the other
// scripts). The fake must know the script "slow" (a long text answer).
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import assert from "node:assert/strict";

const proxy = process.env.PROXY_URL;
const apiKey = process.env.PROXY_API_KEY;
const prefix = process.env.ROLLOUT_PREFIX;
assert.ok(proxy && apiKey && prefix, "PROXY_URL, PROXY_API_KEY and ROLLOUT_PREFIX are required");
const base = (rollout) => `${proxy}/ng-rollout/${prefix}-${rollout}/training-token-capture`;
const opts = { headers: { "X-Fake-Script": "slow" } };
const results = {};

async function timed(name, iterate) {
  const start = performance.now();
  let first = null, text = "", events = 0;
  await iterate((piece) => {
    events++;
    if (piece && first === null) first = performance.now() - start;
    text += piece ?? "";
  });
  results[name] = { first_text_ms: first, end_ms: performance.now() - start, events, text };
}

await timed("messages", async (on) => {
  const c = new Anthropic({ baseURL: base("messages"), apiKey, maxRetries: 0, timeout: 30_000 });
  const stream = await c.messages.create({ model: "claude-haiku-4-5", max_tokens: 512, stream: true,
    messages: [{ role: "user", content: "tell me a story" }] }, opts);
  for await (const ev of stream) {
    on(ev.type === "content_block_delta" && ev.delta.type === "text_delta" ? ev.delta.text : "");
  }
});

const oai = (rollout) => new OpenAI({ baseURL: base(rollout) + "/v1", apiKey, maxRetries: 0 });
await timed("chat", async (on) => {
  const stream = await oai("chat").chat.completions.create({ model: "policy", stream: true,
    messages: [{ role: "user", content: "tell me a story" }] }, opts);
  for await (const chunk of stream) on(chunk.choices[0]?.delta?.content ?? "");
});

await timed("responses", async (on) => {
  const stream = await oai("responses").responses.create({ model: "policy", stream: true, input: "tell me a story" }, opts);
  for await (const ev of stream) on(ev.type === "response.output_text.delta" ? ev.delta : "");
});

console.log(JSON.stringify({ ok: true, results }));
