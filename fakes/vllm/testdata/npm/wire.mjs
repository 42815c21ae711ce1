// Drives a fake vLLM with the official openai npm client and checks that the
// client parses every answer: chat, streaming, tools, logprobs, errors.
// Usage: node wire.mjs BASE_URL   (BASE_URL like http://127.0.0.1:8000/v1)
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.argv[2];
const client = new OpenAI({ baseURL, apiKey: "test-key", maxRetries: 0 });
const model = "Qwen/Qwen3-4B-Thinking-2507";
const user = (content) => [{ role: "user", content }];
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];
const results = {};

// 1. Non-streaming chat with vLLM extras.
{
  const r = await client.chat.completions.create({ model, messages: user("hello"), max_tokens: 20, return_token_ids: true });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, "chat.completion");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(r.choices[0].token_ids.length, r.usage.completion_tokens);
  assert.equal(r.prompt_token_ids.length, r.usage.prompt_tokens);
  results.chat = { completion_tokens: r.usage.completion_tokens };
}

// 2. Streaming chat with usage.
{
  const stream = await client.chat.completions.create({
    model, messages: user("stream please"), stream: true, stream_options: { include_usage: true }, return_token_ids: true,
  });
  let content = "", ids = [], usage = null, finish = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.content) content += c.delta.content;
      if (c.token_ids) ids.push(...c.token_ids);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks > 2);
  assert.ok(usage, "usage chunk");
  assert.equal(ids.length, usage.completion_tokens);
  assert.ok(finish);
  results.stream = { chunks, content_chars: content.length, completion_tokens: usage.completion_tokens };
}

// 3. Tools, non-streaming and through the SDK's stream helper.
{
  const r = await client.chat.completions.create({ model, messages: user("weather in Paris?"), tools },
    { headers: { "X-Fake-Script": "tool" } });
  const call = r.choices[0].message.tool_calls[0];
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
  const runner = client.chat.completions.stream({ model, messages: user("weather in Paris?"), tools },
    { headers: { "X-Fake-Script": "tool" } });
  const final = await runner.finalChatCompletion();
  const scall = final.choices[0].message.tool_calls[0];
  assert.equal(scall.function.name, "get_weather");
  assert.deepEqual(JSON.parse(scall.function.arguments), { city: "Paris" });
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  results.tools = { id: call.id, streamed_id: scall.id };
}

// 4. Logprobs, streaming and not.
{
  const r = await client.chat.completions.create({ model, messages: user("logprobs"), logprobs: true, top_logprobs: 3, max_tokens: 12 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const e of lp) {
    assert.ok(e.logprob <= 0 && Number.isFinite(e.logprob));
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].token, e.token);
  }
  const stream = await client.chat.completions.create({ model, messages: user("logprobs"), logprobs: true, max_tokens: 12, stream: true });
  let n = 0;
  for await (const chunk of stream) for (const c of chunk.choices) n += c.logprobs?.content?.length ?? 0;
  assert.equal(n, lp.length);
  results.logprobs = { tokens: n };
}

// 5. Errors surface as the SDK's typed errors.
{
  await assert.rejects(
    client.chat.completions.create({ model: "nope", messages: user("x") }),
    (err) => err instanceof OpenAI.NotFoundError && err.status === 404 && /does not exist/.test(err.message));
  await assert.rejects(
    client.chat.completions.create({ model, messages: user("x"), max_tokens: 10_000_000 }),
    (err) => err instanceof OpenAI.BadRequestError && err.status === 400);
  results.errors = true;
}

console.log(JSON.stringify({ ok: true, results }));
