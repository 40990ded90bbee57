// tests/compute/serve/anthropic_sdk_test.mjs: `sluice serve`'s Messages API as
// Anthropic's own npm client sees it, beside the openai client on the same
// server. On tiny OLMoE: a greedy message equals the chat completion of the
// same conversation, streams carry the named events in order, stop sequences
// are reported, a reused prefix counts as cache_read_input_tokens, and every
// error case arrives in the API's shape as the client's error class. On a
// tiny Qwen3-MoE with tool markers: a two-round tool use, blocking and
// streamed. On K3-tiny: an image, and thinking. And --parallel 4 with both
// APIs at once. Exits 77 (skipped) without the clients.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { load_anthropic, load_openai, make_model, start, stop } from "./harness.mjs";
import { png } from "./png.mjs";
import { add_tool_markers, check_arguments, question, tools } from "./weather_tools.mjs";

const KEY = "test-key-456";
const CONTEXT = 4096;
const Anthropic = await load_anthropic();
const OpenAI = await load_openai();

const hello = [{ role: "user", content: "Tell me a story about a river." }];
const servers = [];

async function serve(model, args) {
  const server = await start(model, args);
  servers.push(server);
  server.model = model;
  server.anthropic = new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0 });
  server.openai = new OpenAI({ baseURL: server.url + "/v1", apiKey: KEY, maxRetries: 0 });
  return server;
}

after(async () => {
  for (const server of servers)
    assert.equal(await stop(server), 0, "sluice serve exits 0 on SIGTERM: " + server.log());
});

// The text blocks of a message, joined.
const text_of = (message) => message.content.filter((b) => b.type === "text").map((b) => b.text).join("");

// The named SSE events of a streamed Messages request, as [name, data].
async function raw_events(server, body, headers = {}) {
  const res = await fetch(server.url + "/v1/messages", {
    method: "POST",
    headers: { "Content-Type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01", ...headers },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "text/event-stream");
  const text = await res.text();
  assert.ok(text.endsWith("\n\n"), "the stream ends with a whole event");
  return text.trim().split("\n\n").map((event) => {
    const [name_line, data_line, ...rest] = event.split("\n");
    assert.ok(name_line.startsWith("event: ") && data_line.startsWith("data: ") && rest.length === 0, event);
    const data = JSON.parse(data_line.slice(6));
    assert.equal(data.type, name_line.slice(7), "each event's data names its event");
    return [data.type, data];
  });
}

// The Messages error of `promise`: its class, status and body shape.
async function refused(promise, ErrorClass, type, pattern) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof ErrorClass, `${ErrorClass.name}: ${e}`);
    assert.equal(e.error.type, "error");
    assert.equal(e.error.error.type, type);
    assert.match(e.error.error.message, pattern);
    return true;
  });
}

describe("the Messages API on tiny OLMoE, beside the openai client", () => {
  let server = null;
  let endless = null;  // logit_bias that keeps an OpenAI generation going
  const request = { model: "tiny.sluice", max_tokens: 30, temperature: 0, messages: hello };

  before(async () => {
    const model = make_model("olmoe", "tiny.sluice", [`max_position_embeddings=${CONTEXT}`]);
    server = await serve(model, ["--api-key", KEY, "--ctx", String(CONTEXT), "--queue", "3", "--max-body", "1M"]);
    const config = JSON.parse(fs.readFileSync(path.join(model, "tokenizer_config.json"), "utf8"));
    endless = Object.fromEntries(Object.keys(config.added_tokens_decoder).map((id) => [id, -100]));
  });

  it("answers with the chat completion's greedy text, usage and token count", async () => {
    const chat = await server.openai.chat.completions.create({ messages: hello, temperature: 0, max_tokens: 30 });
    const message = await server.anthropic.messages.create(request);
    assert.equal(message.type, "message");
    assert.equal(message.role, "assistant");
    assert.match(message.id, /^msg_/);
    assert.equal(message.model, "tiny.sluice");
    assert.equal(message.content.length, 1);
    assert.equal(message.content[0].type, "text");
    assert.equal(message.content[0].text, chat.choices[0].message.content);
    assert.equal(message.stop_reason, chat.choices[0].finish_reason === "length" ? "max_tokens" : "end_turn");
    assert.equal(message.stop_sequence, null);
    assert.equal(message.usage.input_tokens + message.usage.cache_read_input_tokens, chat.usage.prompt_tokens);
    assert.equal(message.usage.output_tokens, chat.usage.completion_tokens);
    const counted = await server.anthropic.messages.countTokens({ model: "tiny.sluice", messages: hello });
    assert.equal(counted.input_tokens, chat.usage.prompt_tokens);
  });

  it("reads system as a string or as blocks, as a system message", async () => {
    const system = "Answer in one line.";
    const chat = await server.openai.chat.completions.create({
      messages: [{ role: "system", content: system }, ...hello], temperature: 0, max_tokens: 12 });
    const as_string = await server.anthropic.messages.create({ ...request, max_tokens: 12, system });
    const as_blocks = await server.anthropic.messages.create({
      ...request, max_tokens: 12, system: [{ type: "text", text: system }] });
    assert.equal(text_of(as_string), chat.choices[0].message.content);
    assert.equal(text_of(as_blocks), text_of(as_string));
    const counted = await server.anthropic.messages.countTokens({ model: "m", system, messages: hello });
    assert.equal(counted.input_tokens, chat.usage.prompt_tokens);
  });

  it("streams the API's named events in order, with the blocking text", async () => {
    const blocking = await server.anthropic.messages.create(request);
    const events = await raw_events(server, request);
    const names = events.map(([name]) => name);
    assert.deepEqual(names.slice(0, 3), ["message_start", "ping", "content_block_start"]);
    assert.deepEqual(names.slice(-4), ["content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
    assert.ok(names.slice(3, -3).every((n) => n === "content_block_delta"), names.join(" "));
    const start = events[0][1].message;
    assert.deepEqual(start.content, []);
    assert.equal(start.stop_reason, null);
    assert.equal(start.usage.input_tokens + start.usage.cache_read_input_tokens,
                 blocking.usage.input_tokens + blocking.usage.cache_read_input_tokens);
    assert.deepEqual(events[2][1].content_block, { type: "text", text: "" });
    const deltas = events.filter(([name]) => name === "content_block_delta").map(([, d]) => d);
    assert.ok(deltas.every((d) => d.index === 0 && d.delta.type === "text_delta"));
    assert.equal(deltas.map((d) => d.delta.text).join(""), text_of(blocking));
    const delta = events.at(-2)[1];
    assert.equal(delta.delta.stop_reason, blocking.stop_reason);
    assert.equal(delta.usage.output_tokens, blocking.usage.output_tokens);

    // The client's own stream helper accumulates the same message.
    const final = await server.anthropic.messages.stream(request).finalMessage();
    assert.equal(text_of(final), text_of(blocking));
    assert.equal(final.stop_reason, blocking.stop_reason);
    assert.equal(final.usage.output_tokens, blocking.usage.output_tokens);
    const types = [];
    for await (const event of await server.anthropic.messages.create({ ...request, stream: true })) types.push(event.type);
    assert.equal(types[0], "message_start");
    assert.equal(types.at(-1), "message_stop");
    assert.ok(!types.includes("ping"), "the client drops pings itself");
  });

  it("ends at a stop sequence, names it, and never returns it", async () => {
    const text = text_of(await server.anthropic.messages.create({ ...request, max_tokens: 40 }));
    const at = Math.floor(text.length / 2);
    const stop = text.slice(at, at + 5);
    const cut = text.indexOf(stop);
    const stopped = await server.anthropic.messages.create({ ...request, max_tokens: 40, stop_sequences: ["\u0001", stop] });
    assert.equal(text_of(stopped), text.slice(0, cut));
    assert.equal(stopped.stop_reason, "stop_sequence");
    assert.equal(stopped.stop_sequence, stop);
    const streamed = await server.anthropic.messages.stream({ ...request, max_tokens: 40, stop_sequences: [stop] }).finalMessage();
    assert.equal(text_of(streamed), text.slice(0, cut));
    assert.equal(streamed.stop_sequence, stop);
  });

  it("reports a reused prompt prefix as cache_read_input_tokens", async () => {
    const first = await server.anthropic.messages.create({ ...request, max_tokens: 10 });
    const prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens;
    const next = await server.anthropic.messages.create({
      ...request, max_tokens: 4,
      messages: [...hello, { role: "assistant", content: first.content }, { role: "user", content: "And then?" }] });
    assert.ok(next.usage.cache_read_input_tokens >= prompt, JSON.stringify(next.usage));
    assert.ok(next.usage.input_tokens > 0);
  });

  it("refuses bad requests in the API's error shape, as the client's error classes", async () => {
    const wrong = new Anthropic({ baseURL: server.url, apiKey: "wrong", maxRetries: 0 });
    await refused(wrong.messages.create(request), Anthropic.AuthenticationError, "authentication_error", /not valid/);
    // A bearer token is as good as x-api-key.
    const bearer = new Anthropic({ baseURL: server.url, apiKey: null, authToken: KEY, maxRetries: 0 });
    assert.equal((await bearer.messages.create({ ...request, max_tokens: 2 })).usage.output_tokens, 2);
    const c = server.anthropic;
    const { max_tokens, ...without_max } = request;
    await refused(c.messages.create(without_max), Anthropic.BadRequestError, "invalid_request_error", /^max_tokens: missing/);
    await refused(c.messages.create({ ...request, temperature: 1.5 }), Anthropic.BadRequestError,
                  "invalid_request_error", /^temperature/);
    await refused(c.messages.create({ ...request, messages: [{ role: "system", content: "x" }] }),
                  Anthropic.BadRequestError, "invalid_request_error", /^messages\[0\]\.role/);
    await refused(c.messages.create({ ...request, messages: [...hello, { role: "assistant", content: "Once" }] }),
                  Anthropic.BadRequestError, "invalid_request_error", /prefilled reply/);
    await refused(c.messages.create({ ...request, thinking: { type: "enabled", budget_tokens: 1024 }, max_tokens: 2048 }),
                  Anthropic.BadRequestError, "invalid_request_error", /^thinking: this model has no thinking mode/);
    await refused(c.messages.create({ ...request, tools: [{ name: "ping", input_schema: { type: "object" } }],
                                     tool_choice: { type: "any" } }),
                  Anthropic.BadRequestError, "invalid_request_error", /no tool-call markers/);
    const image = { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } };
    await refused(c.messages.create({ ...request, messages: [{ role: "user", content: [image] }] }),
                  Anthropic.BadRequestError, "invalid_request_error", /image/);
    const url_image = { type: "image", source: { type: "url", url: "http://127.0.0.1:1/x.png" } };
    await refused(c.messages.create({ ...request, messages: [{ role: "user", content: [url_image] }] }),
                  Anthropic.BadRequestError, "invalid_request_error", /source\.type: only base64/);
    await refused(c.messages.create({ ...request, messages: [{ role: "user", content: "river ".repeat(CONTEXT) }] }),
                  Anthropic.BadRequestError, "invalid_request_error", /maximum context length is 4096 tokens/);
    const future = new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0,
                                   defaultHeaders: { "anthropic-version": "2026-10-21" } });
    await refused(future.messages.create(request), Anthropic.BadRequestError, "invalid_request_error",
                  /^anthropic-version: '2026-10-21'/);
    await refused(c.messages.countTokens({ model: "m", messages: [] }), Anthropic.BadRequestError,
                  "invalid_request_error", /^messages/);

    const post = (route, body, headers = {}) => fetch(server.url + route, {
      method: "POST", headers: { "Content-Type": "application/json", "x-api-key": KEY, ...headers }, body });
    const keyless = await fetch(server.url + "/v1/messages", { method: "POST", body: "{}" });
    assert.equal(keyless.status, 401);
    assert.equal((await keyless.json()).error.type, "authentication_error");
    const malformed = await post("/v1/messages", "{not json");
    assert.equal(malformed.status, 400);
    assert.deepEqual(Object.keys(await malformed.json()), ["type", "error"]);
    const big = await post("/v1/messages", JSON.stringify({ ...request, messages: [{ role: "user", content: "x".repeat(2 << 20) }] }));
    assert.equal(big.status, 413);
    assert.equal((await big.json()).error.type, "request_too_large");
    const missing = await post("/v1/messages/nothing", "{}");
    assert.equal(missing.status, 404);
    assert.deepEqual(await missing.json(),
                     { type: "error", error: { type: "not_found_error", message: "no route POST /v1/messages/nothing" } });
    const wrong_method = await fetch(server.url + "/v1/messages", { headers: { "x-api-key": KEY } });
    assert.equal(wrong_method.status, 405);
    assert.equal(wrong_method.headers.get("allow"), "POST");
    assert.equal((await wrong_method.json()).type, "error");
    // The OpenAI routes keep their own shape on the same server.
    const chat_method = await fetch(server.url + "/v1/chat/completions", { headers: { "x-api-key": KEY } });
    assert.equal(chat_method.status, 405);
    assert.equal((await chat_method.json()).error.type, "invalid_request_error");
  });

  it("refuses a Messages request with 429 while OpenAI requests fill the queue", async () => {
    const controller = new AbortController();
    const long = await server.openai.chat.completions.create(
      { messages: hello, temperature: 0, stream: true, logit_bias: endless }, { signal: controller.signal });
    const first = long[Symbol.asyncIterator]();
    for (;;) {
      const { value, done } = await first.next();
      assert.ok(!done, "the long generation runs until aborted");
      if (value.choices[0]?.delta?.content) break;
    }
    const waiting = await Promise.all([0, 1, 2].map(() =>
      server.openai.chat.completions.create({ messages: hello, max_tokens: 2, stream: true })));
    await assert.rejects(server.anthropic.messages.create({ ...request, max_tokens: 2 }), (e) => {
      assert.ok(e instanceof Anthropic.RateLimitError, String(e));
      assert.equal(e.error.error.type, "rate_limit_error");
      assert.ok(Number(e.headers.get("retry-after")) >= 1);
      return true;
    });
    controller.abort();
    await first.return();
    for (const stream of waiting) for await (const chunk of stream) void chunk;
  });
});

describe("tool use through the Messages API on a tiny Qwen3-MoE", () => {
  let server = null;
  const anthropic_tools = tools.map(({ function: f }) => ({ name: f.name, description: f.description,
                                                            input_schema: f.parameters }));
  const asking = { model: "tools", max_tokens: 400, temperature: 0, messages: question, tools: anthropic_tools,
                   tool_choice: { type: "any", disable_parallel_tool_use: true } };

  before(async () => {
    const model = make_model("qwen3_moe", "tools.sluice", [`max_position_embeddings=${CONTEXT}`], add_tool_markers);
    server = await serve(model, ["--api-key", KEY, "--ctx", String(CONTEXT)]);
  });

  it("calls a tool, blocking and streamed, as the chat completion does", async () => {
    const reply = await server.anthropic.messages.create(asking);
    assert.equal(reply.stop_reason, "tool_use");
    const calls = reply.content.filter((b) => b.type === "tool_use");
    assert.equal(calls.length, 1);
    assert.match(calls[0].id, /^toolu_/);
    check_arguments(calls[0].name, JSON.stringify(calls[0].input));

    const chat = await server.openai.chat.completions.create({
      messages: question, tools, tool_choice: "required", parallel_tool_calls: false, temperature: 0, max_tokens: 400,
      chat_template_kwargs: { enable_thinking: false } });
    const call = chat.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, calls[0].name);
    assert.deepEqual(JSON.parse(call.function.arguments), calls[0].input);

    const streamed = await server.anthropic.messages.stream(asking).finalMessage();
    assert.equal(streamed.stop_reason, "tool_use");
    const streamed_call = streamed.content.find((b) => b.type === "tool_use");
    assert.equal(streamed_call.name, calls[0].name);
    assert.deepEqual(streamed_call.input, calls[0].input);
    assert.notEqual(streamed_call.id, calls[0].id, "each call gets a fresh id");

    const events = await raw_events(server, asking);
    const opened = events.find(([name, d]) => name === "content_block_start" && d.content_block.type === "tool_use")[1];
    assert.deepEqual(opened.content_block.input, {});
    const pieces = events.filter(([name, d]) => name === "content_block_delta" && d.index === opened.index);
    assert.ok(pieces.length > 0 && pieces.every(([, d]) => d.delta.type === "input_json_delta"));
    assert.deepEqual(JSON.parse(pieces.map(([, d]) => d.delta.partial_json).join("")), calls[0].input);
  });

  it("answers the tool's result in a second round", async () => {
    const first = await server.anthropic.messages.create(asking);
    const call = first.content.find((b) => b.type === "tool_use");
    const with_result = (content) => [...question, { role: "assistant", content: first.content },
                                      { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content }] }];
    const second_round = { ...asking, max_tokens: 24, tool_choice: { type: "auto" },
                           messages: with_result(JSON.stringify({ temperature: 21 })) };
    const answer = await server.anthropic.messages.create(second_round);
    assert.ok(["end_turn", "max_tokens", "tool_use"].includes(answer.stop_reason), answer.stop_reason);
    assert.ok(answer.content.length > 0);
    const { max_tokens, tool_choice, temperature, ...counted } = second_round;
    const first_count = await server.anthropic.messages.countTokens({ ...counted, messages: question });
    const second_count = await server.anthropic.messages.countTokens(counted);
    assert.equal(second_count.input_tokens, answer.usage.input_tokens + answer.usage.cache_read_input_tokens);
    assert.ok(second_count.input_tokens > first_count.input_tokens);
    // The result's text is in the prompt: a longer one takes more tokens.
    const longer = await server.anthropic.messages.countTokens({
      ...counted, messages: with_result(JSON.stringify({ temperature: 21, sky: "clear and blue all day" })) });
    assert.ok(longer.input_tokens > second_count.input_tokens);
    await refused(server.anthropic.messages.create({ ...asking, tool_choice: { type: "tool", name: "nothing" } }),
                  Anthropic.BadRequestError, "invalid_request_error", /no tool named 'nothing'/);
  });
});

describe("an image and thinking through the Messages API on K3-tiny", () => {
  let server = null;
  const picture = png(90, 60, (x, y) => [(x * 3) % 256, (y * 5) % 256, (x * y) % 256]).toString("base64");
  const TEXT = "What is in this picture?";

  before(async () => {
    server = await serve(make_model("kimi_k3", "k3.sluice"), ["--api-key", KEY]);
  });

  it("reads a base64 image block as the chat completion reads its data: URL", async () => {
    const message = await server.anthropic.messages.create({
      model: "k3", max_tokens: 4, temperature: 0,
      messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: picture } },
                                           { type: "text", text: TEXT }] }] });
    const chat = await server.openai.chat.completions.create({
      messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64," + picture } },
                                           { type: "text", text: TEXT }] }],
      temperature: 0, max_tokens: 4, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(message.usage.input_tokens + message.usage.cache_read_input_tokens, chat.usage.prompt_tokens);
    assert.equal(message.usage.output_tokens, chat.usage.completion_tokens);
    assert.equal(text_of(message), chat.choices[0].message.content ?? "");
    assert.ok(!message.content.some((b) => b.type === "thinking"), "no thinking unless asked");
    const without = await server.anthropic.messages.countTokens({ model: "k3", messages: [{ role: "user", content: TEXT }] });
    assert.ok(chat.usage.prompt_tokens > without.input_tokens, "the image takes positions");
  });

  it("thinks when asked, in a thinking block streamed as thinking_delta", async () => {
    const asked = { model: "k3", max_tokens: 1025, temperature: 0, thinking: { type: "enabled", budget_tokens: 1024 },
                    messages: [{ role: "user", content: TEXT }] };
    const message = await server.anthropic.messages.create(asked);
    assert.equal(message.content[0].type, "thinking");
    assert.ok(message.content[0].thinking.length > 0);
    const events = await raw_events(server, asked);
    assert.equal(events[2][1].content_block.type, "thinking");
    const thinking = events.filter(([name, d]) => name === "content_block_delta" && d.index === 0);
    assert.ok(thinking.every(([, d]) => d.delta.type === "thinking_delta"));
    assert.equal(thinking.map(([, d]) => d.delta.thinking).join(""), message.content[0].thinking);
  });
});

describe("--parallel 4 with both APIs at once", () => {
  it("decodes Messages and chat requests together, each as it is served alone", async () => {
    const model = servers[0].model;
    const batched = await serve(model, ["--api-key", KEY, "--ctx", "512", "--parallel", "4"]);
    const prompts = [hello, [{ role: "user", content: "Name three colours." }],
                     [{ role: "user", content: "Count to ten." }], [{ role: "user", content: "Why is the sky blue?" }]];
    const ask_anthropic = async (messages) => {
      const stream = batched.anthropic.messages.stream({ model: "m", max_tokens: 20, temperature: 0, messages });
      return text_of(await stream.finalMessage());
    };
    const ask_openai = async (messages) => {
      let text = "";
      for await (const chunk of await batched.openai.chat.completions.create(
        { messages, temperature: 0, max_tokens: 20, stream: true })) text += chunk.choices[0]?.delta?.content || "";
      return text;
    };
    const singles = [];
    for (const messages of prompts) {
      const alone = await ask_anthropic(messages);
      assert.equal(await ask_openai(messages), alone, "both APIs give the same greedy text");
      singles.push(alone);
    }
    const together = await Promise.all(prompts.map((messages, i) => (i % 2 ? ask_openai : ask_anthropic)(messages)));
    assert.deepEqual(together, singles);
    const swapped = await Promise.all(prompts.map((messages, i) => (i % 2 ? ask_anthropic : ask_openai)(messages)));
    assert.deepEqual(swapped, singles);
  });
});
