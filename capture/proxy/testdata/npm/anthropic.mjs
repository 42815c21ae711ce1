// Drives the capture proxy with the official @anthropic-ai/sdk client and
// prints what the client saw as one JSON line. The Go spec compares it with
// the fake engine's scripts and with the captured records.
//
// Environment:
//   PROXY_URL       proxy base URL (http://127.0.0.1:PORT)
//   PROXY_API_KEY   the key the proxy accepts
//   ROLLOUT_PREFIX  prefix of every rollout id this script uses
// Scripts the fake must know (header X-Fake-Script): "weather", "stream-tool".
import Anthropic from "@anthropic-ai/sdk";
import assert from "node:assert/strict";

const proxy = process.env.PROXY_URL;
const apiKey = process.env.PROXY_API_KEY;
const prefix = process.env.ROLLOUT_PREFIX;
assert.ok(proxy && apiKey && prefix, "PROXY_URL, PROXY_API_KEY and ROLLOUT_PREFIX are required");

const baseURL = (rollout) => `${proxy}/ng-rollout/${prefix}-${rollout}/training-token-capture`;
// An explicit timeout also turns off the SDK's client-side refusal of large
// non-streaming max_tokens, so the engine is the one that refuses.
const client = (rollout, key = apiKey) => new Anthropic({ baseURL: baseURL(rollout), apiKey: key, maxRetries: 0, timeout: 30_000 });
const script = (name) => ({ headers: { "X-Fake-Script": name } });
const model = "claude-haiku-4-5";
const tools = [{
  name: "get_weather",
  description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
}];
const tokenFields = ["prompt_token_ids", "generation_token_ids", "generation_log_probs"];
// A field with a value leaks; vLLM's own "prompt_token_ids":null (sent to
// every client that did not ask for ids) does not.
const leaks = (obj) => tokenFields.filter((k) => new RegExp(`"${k}":(?!null)`).test(JSON.stringify(obj)));
const results = {};

// 1. Tool use, then the tool result, echoing the assistant content exactly as
// the SDK returned it (thinking blocks and their signatures included).
{
  const c = client("tools");
  const first = [{ role: "user", content: "Claude, what is the weather in Paris?" }];
  const r1 = await c.messages.create({ model, max_tokens: 512, tools, messages: first }, script("weather"));
  assert.equal(r1.type, "message");
  assert.equal(r1.role, "assistant");
  assert.equal(r1.stop_reason, "tool_use");
  assert.deepEqual(leaks(r1), []);
  const use = r1.content.find((b) => b.type === "tool_use");
  assert.ok(use, "a tool_use block");
  assert.equal(typeof use.id, "string");
  const thinking = r1.content.find((b) => b.type === "thinking");
  const second = [...first,
    { role: "assistant", content: r1.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21 degrees" }] }];
  const r2 = await c.messages.create({ model, max_tokens: 512, tools, messages: second }, script("weather"));
  assert.equal(r2.stop_reason, "end_turn");
  assert.deepEqual(leaks(r2), []);
  const text = r2.content.filter((b) => b.type === "text").map((b) => b.text).join("");

  // count_tokens on the first request: the engine's count of the same prompt.
  const count = await c.messages.countTokens({ model, tools, messages: first });
  results.tools = {
    first: { id: r1.id, tool: { name: use.name, input: use.input }, thinking: thinking?.thinking ?? null,
      usage: r1.usage, block_types: r1.content.map((b) => b.type) },
    second: { id: r2.id, text, usage: r2.usage },
    count_tokens: count.input_tokens,
  };
}

// 1b. The same tool conversation under a long system prompt, as Claude Code
// sends one: each request is large enough for the proxy to carry the
// conversation, and its translation to chat, to the rollout's next request.
{
  const c = client("long-tools");
  const system = [{ type: "text", text: "You are a careful coding agent; read before you edit. ".repeat(800) }];
  const first = [{ role: "user", content: "Claude, what is the weather in Paris?" }];
  const r1 = await c.messages.create({ model, max_tokens: 512, system, tools, messages: first }, script("weather"));
  const use = r1.content.find((b) => b.type === "tool_use");
  assert.ok(use, "a tool_use block");
  const second = [...first,
    { role: "assistant", content: r1.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21 degrees" }] }];
  const r2 = await c.messages.create({ model, max_tokens: 512, system, tools, messages: second }, script("weather"));
  assert.equal(r2.stop_reason, "end_turn");
  assert.deepEqual(leaks(r2), []);
  results.long_tools = { text: r2.content.filter((b) => b.type === "text").map((b) => b.text).join("") };
}

// 2. Streaming through messages.stream() with event handlers.
{
  const c = client("stream");
  let textDeltas = "", jsonDeltas = "", events = 0, jsonSnapshot = null;
  const eventTypes = new Set();
  const stream = c.messages.stream(
    { model, max_tokens: 512, tools, messages: [{ role: "user", content: "Claude, look up the weather in Oslo." }] },
    script("stream-tool"));
  stream.on("text", (delta) => { textDeltas += delta; });
  stream.on("inputJson", (partial, snapshot) => { jsonDeltas += partial; jsonSnapshot = snapshot; });
  stream.on("streamEvent", (ev) => { events++; eventTypes.add(ev.type); assert.deepEqual(leaks(ev), []); });
  const final = await stream.finalMessage();
  assert.deepEqual(leaks(final), []);
  const text = final.content.filter((b) => b.type === "text").map((b) => b.text).join("");
  const use = final.content.find((b) => b.type === "tool_use");
  assert.ok(use, "a streamed tool_use block");
  assert.equal(text, textDeltas, "text deltas add up to the final text");
  assert.deepEqual(JSON.parse(jsonDeltas), use.input, "input_json deltas add up to the final input");
  assert.deepEqual(jsonSnapshot, use.input);
  assert.equal(final.stop_reason, "tool_use");
  results.stream = { id: final.id, text, tool: { name: use.name, input: use.input }, events,
    event_types: [...eventTypes].sort(), usage: final.usage };
}

// 3. A streamed conversation as Claude Code drives it: thinking, a tool call,
// then the tool result with the streamed content echoed back.
{
  const c = client("stream-chain");
  const first = [{ role: "user", content: "Claude, stream me the weather in Paris." }];
  let thinkingDeltas = "", signatures = 0;
  const s1 = c.messages.stream({ model, max_tokens: 512, tools, messages: first }, script("weather"));
  s1.on("thinking", (delta) => { thinkingDeltas += delta; });
  s1.on("signature", () => { signatures++; });
  const m1 = await s1.finalMessage();
  assert.deepEqual(leaks(m1), []);
  const thinking = m1.content.find((b) => b.type === "thinking");
  const use = m1.content.find((b) => b.type === "tool_use");
  assert.ok(thinking && use, "a thinking and a tool_use block");
  assert.equal(thinking.thinking, thinkingDeltas, "thinking deltas add up to the final thinking");
  const second = [...first,
    { role: "assistant", content: m1.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21 degrees" }] }];
  let textDeltas = "";
  const s2 = c.messages.stream({ model, max_tokens: 512, tools, messages: second }, script("weather"));
  s2.on("text", (delta) => { textDeltas += delta; });
  const m2 = await s2.finalMessage();
  assert.deepEqual(leaks(m2), []);
  assert.equal(m2.stop_reason, "end_turn");
  results.stream_chain = {
    first: { id: m1.id, thinking: thinking.thinking, signatures, tool: { name: use.name, input: use.input } },
    second: { id: m2.id, text: textDeltas },
  };
}

// 4. Errors surface as the SDK's typed errors with the right status.
{
  const c = client("errors");
  const msgs = [{ role: "user", content: "hi" }];
  let upstream400 = null;
  await assert.rejects(c.messages.create({ model, max_tokens: 10_000_000, messages: msgs }), (err) => {
    upstream400 = { status: err.status, type: err.error?.error?.type, message: err.message };
    return err instanceof Anthropic.BadRequestError && err instanceof Anthropic.APIError && err.status === 400;
  });
  let engine503 = null;
  await assert.rejects(c.messages.create({ model, max_tokens: 64, messages: msgs }, { headers: { "X-Fake-Fault": "503" } }),
    (err) => {
      engine503 = { status: err.status, type: err.error?.error?.type };
      return err instanceof Anthropic.InternalServerError && err.status === 503;
    });
  let auth401 = null;
  await assert.rejects(client("auth", "wrong-key").messages.create({ model, max_tokens: 64, messages: msgs }), (err) => {
    auth401 = { status: err.status, type: err.error?.error?.type };
    return err instanceof Anthropic.AuthenticationError && err.status === 401;
  });
  results.errors = { upstream400, engine503, auth401 };
}

console.log(JSON.stringify({ ok: true, results }));
