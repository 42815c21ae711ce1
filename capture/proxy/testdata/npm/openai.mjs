// Drives the capture proxy with the official openai npm client and prints what
// the client saw as one JSON line. The Go spec compares it with the fake
// engine's scripts and with the captured records.
//
// Environment:
//   PROXY_URL       proxy base URL (http://127.0.0.1:PORT)
//   PROXY_API_KEY   the key the proxy accepts
//   ROLLOUT_PREFIX  prefix of every rollout id this script uses
//   PARALLEL_CITIES comma-separated cities, one concurrent conversation each
// Scripts the fake must know (header X-Fake-Script): "weather", "stream-tool",
// "greeting".
import OpenAI from "openai";
import assert from "node:assert/strict";

const proxy = process.env.PROXY_URL;
const apiKey = process.env.PROXY_API_KEY;
const prefix = process.env.ROLLOUT_PREFIX;
assert.ok(proxy && apiKey && prefix, "PROXY_URL, PROXY_API_KEY and ROLLOUT_PREFIX are required");

const baseURL = (rollout) => `${proxy}/ng-rollout/${prefix}-${rollout}/training-token-capture/v1`;
const client = (rollout) => new OpenAI({ baseURL: baseURL(rollout), apiKey, maxRetries: 0 });
const script = (name) => ({ headers: { "X-Fake-Script": name } });
const model = "policy-model";
const parameters = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city", parameters } }];
const responseTools = [{ type: "function", name: "get_weather", description: "Weather for a city", parameters, strict: false }];
const tokenFields = ["prompt_token_ids", "generation_token_ids", "generation_log_probs"];
// A field with a value leaks; vLLM's own "prompt_token_ids":null (sent to
// every client that did not ask for ids) does not.
const leaks = (obj) => tokenFields.filter((k) => new RegExp(`"${k}":(?!null)`).test(JSON.stringify(obj)));
const call = (c) => ({ name: c.function.name, arguments: JSON.parse(c.function.arguments) });
const results = {};

// 1. Chat: a non-streaming tool call, then the tool result as a streamed turn.
{
  const c = client("chat");
  const first = [{ role: "user", content: "What is the weather in Paris?" }];
  const r1 = await c.chat.completions.create({ model, messages: first, tools }, script("weather"));
  assert.equal(r1.object, "chat.completion");
  assert.equal(r1.choices[0].finish_reason, "tool_calls");
  assert.deepEqual(leaks(r1), []);
  const msg = r1.choices[0].message;
  assert.equal(msg.tool_calls.length, 1);
  const second = [...first, msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "sunny, 21 degrees" }];
  const stream = await c.chat.completions.create(
    { model, messages: second, tools, stream: true, stream_options: { include_usage: true } }, script("weather"));
  let text = "", chunks = 0, finish = null, usage = null;
  for await (const chunk of stream) {
    chunks++;
    assert.deepEqual(leaks(chunk), []);
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      text += ch.delta?.content ?? "";
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.ok(chunks >= 2, "more than one chunk");
  assert.equal(finish, "stop");
  results.chat = { first: { tool: call(msg.tool_calls[0]), usage: r1.usage }, second: { text, chunks, usage } };
}

// 1b. The same chat tool conversation under a long system prompt, as an
// agent harness sends one: each request is large enough for the proxy to
// carry the conversation to the rollout's next request.
{
  const c = client("long-chat");
  const first = [{ role: "system", content: "You are a careful coding agent; read before you edit. ".repeat(800) },
    { role: "user", content: "What is the weather in Paris?" }];
  const r1 = await c.chat.completions.create({ model, messages: first, tools }, script("weather"));
  assert.equal(r1.choices[0].finish_reason, "tool_calls");
  const msg = r1.choices[0].message;
  const second = [...first, msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "sunny, 21 degrees" }];
  const r2 = await c.chat.completions.create({ model, messages: second, tools }, script("weather"));
  assert.deepEqual(leaks(r2), []);
  results.long_chat = { text: r2.choices[0].message.content };
}

// 2. Chat through the SDK's stream helper.
{
  const c = client("helper");
  const runner = c.chat.completions.stream(
    { model, messages: [{ role: "user", content: "Find the Oslo weather for me." }], tools }, script("stream-tool"));
  let deltas = "";
  runner.on("content.delta", ({ delta }) => { deltas += delta; });
  runner.on("chunk", (chunk) => assert.deepEqual(leaks(chunk), []));
  const final = await runner.finalChatCompletion();
  assert.deepEqual(leaks(final), []);
  const m = final.choices[0].message;
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  assert.equal(m.content, deltas);
  results.helper = { text: m.content, tool: call(m.tool_calls[0]) };
}

// 3. Responses: a function call and its output, non-streaming.
{
  const c = client("responses");
  const first = [{ role: "user", content: "Please check the weather in Paris." }];
  const r1 = await c.responses.create({ model, input: first, tools: responseTools }, script("weather"));
  assert.equal(r1.object, "response");
  assert.equal(r1.status, "completed");
  assert.deepEqual(leaks(r1), []);
  const fc = r1.output.find((o) => o.type === "function_call");
  assert.ok(fc, "a function_call item");
  const second = [...first, ...r1.output, { type: "function_call_output", call_id: fc.call_id, output: "sunny, 21 degrees" }];
  const r2 = await c.responses.create({ model, input: second, tools: responseTools }, script("weather"));
  assert.equal(r2.status, "completed");
  assert.deepEqual(leaks(r2), []);
  results.responses = {
    first: { id: r1.id, tool: { name: fc.name, arguments: JSON.parse(fc.arguments) } },
    second: { id: r2.id, text: r2.output_text },
  };
}

// 4. Responses, streaming.
{
  const c = client("responses-stream");
  const stream = await c.responses.create({ model, input: "Say hello.", stream: true }, script("greeting"));
  let text = "", completed = null;
  const types = new Set();
  for await (const ev of stream) {
    types.add(ev.type);
    assert.deepEqual(leaks(ev), []);
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.completed") completed = ev.response;
  }
  assert.ok(completed, "a response.completed event");
  assert.equal(completed.output_text ?? completed.output.filter((o) => o.type === "message")
    .flatMap((o) => o.content).map((p) => p.text).join(""), text);
  results.responses_stream = { id: completed.id, text, event_types: [...types].sort() };
}

// 5. Concurrent conversations, one rollout each, as a trainer runs them.
{
  const cities = (process.env.PARALLEL_CITIES ?? "").split(",").filter(Boolean);
  assert.ok(cities.length > 1, "PARALLEL_CITIES names the conversations");
  results.parallel = await Promise.all(cities.map(async (city, i) => {
    const c = client(`parallel-${i}`);
    const first = [{ role: "user", content: `What is the weather in ${city}?` }];
    const r1 = await c.chat.completions.create({ model, messages: first, tools }, script("weather"));
    const msg = r1.choices[0].message;
    const second = [...first, msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "mild" }];
    const r2 = await c.chat.completions.create({ model, messages: second, tools }, script("weather"));
    assert.deepEqual(leaks(r1), []);
    assert.deepEqual(leaks(r2), []);
    return { city, tool: call(msg.tool_calls[0]), text: r2.choices[0].message.content };
  }));
}

// 6. An engine refusal surfaces as the SDK's typed error.
{
  const c = client("errors");
  let refused = null;
  await assert.rejects(
    c.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 10_000_000 }),
    (err) => {
      refused = { status: err.status, message: err.message };
      return err instanceof OpenAI.BadRequestError && err.status === 400;
    });
  results.errors = { refused };
}

console.log(JSON.stringify({ ok: true, results }));
