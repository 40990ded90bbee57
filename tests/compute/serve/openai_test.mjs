// tests/compute/serve/openai_test.mjs: `sluice serve` as OpenAI's own npm
// client sees it, on a tiny OLMoE container: streamed and blocking replies
// agree and have OpenAI's stream shape, errors arrive as the client's error
// classes, an aborted stream frees the engine, four concurrent streams all
// complete while /health answers (a full queue gives 429), greedy output
// equals `sluice run` on the ids `sluice template` renders, a conversation's
// next turn reuses its prompt, stop strings never leak, response_format is
// obeyed, and --parallel 4 decodes each request as it would alone. Exits 77
// (skipped) without the client.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { SLUICE, load_openai, make_model, run, start, stop } from "./harness.mjs";

const KEY = "test-key-123";
const CONTEXT = 16384;  // long enough that a generation with its end tokens banned outlasts the test

const OpenAI = await load_openai();
let server = null;
let base = "";
let client = null;
let endless = null;  // logit_bias that keeps a generation going

// The raw SSE events of a streamed chat request, [DONE] included.
async function raw_stream(body) {
  const res = await fetch(base + "/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + KEY },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "text/event-stream");
  const text = await res.text();
  assert.ok(text.endsWith("\n\n"), "the stream ends with a whole event");
  return text.trim().split("\n\n").map((event) => {
    assert.ok(event.startsWith("data: "), `an SSE data event: ${event}`);
    const data = event.slice(6);
    return data === "[DONE]" ? data : JSON.parse(data);
  });
}

async function metric(name) {
  const res = await fetch(base + "/metrics", { headers: { Authorization: "Bearer " + KEY } });
  const text = await res.text();
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(" ")[1]) : 0;
}

const hello = [{ role: "user", content: "Tell me a story about a river." }];

describe("sluice serve with the openai client", () => {
  before(async () => {
    const model = make_model("olmoe", "tiny.sluice", [`max_position_embeddings=${CONTEXT}`]);
    server = await start(model, ["--api-key", KEY, "--ctx", String(CONTEXT), "--queue", "3", "--max-body", "1M"]);
    server.model = model;
    // Every added token of the tiny tokenizer (its end-of-sequence and
    // end-of-turn tokens among them), banned: such a generation runs to the
    // end of the context unless it is stopped.
    const config = JSON.parse(fs.readFileSync(path.join(model, "tokenizer_config.json"), "utf8"));
    endless = Object.fromEntries(Object.keys(config.added_tokens_decoder).map((id) => [id, -100]));
    base = server.url;
    client = new OpenAI({ baseURL: base + "/v1", apiKey: KEY, maxRetries: 0 });
  });

  after(async () => {
    if (server) assert.equal(await stop(server), 0, "sluice serve exits 0 on SIGTERM: " + server.log());
  });

  it("lists its model, and answers /health without a key", async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.equal(models.data[0].id, "tiny.sluice");
    assert.equal((await client.models.retrieve("tiny.sluice")).id, "tiny.sluice");
    await assert.rejects(client.models.retrieve("other"), OpenAI.NotFoundError);
    const health = await fetch(base + "/health");
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { status: "ok" });
  });

  it("gives the same greedy text streamed and blocking, with OpenAI's stream shape", async () => {
    const request = { model: "tiny.sluice", messages: hello, temperature: 0, max_tokens: 40 };
    const blocking = await client.chat.completions.create(request);
    const text = blocking.choices[0].message.content;
    assert.ok(text.length > 0);
    assert.equal(blocking.object, "chat.completion");
    assert.equal(blocking.usage.completion_tokens, 40);
    assert.equal(blocking.usage.total_tokens, blocking.usage.prompt_tokens + 40);
    assert.equal(typeof blocking.usage.prompt_tokens_details.cached_tokens, "number");
    assert.equal(typeof blocking.sluice.experts.hit_rate, "number");

    let streamed = "";
    let finishes = 0;
    for await (const chunk of await client.chat.completions.create({ ...request, stream: true })) {
      assert.equal(chunk.object, "chat.completion.chunk");
      for (const choice of chunk.choices) {
        streamed += choice.delta.content || "";
        if (choice.finish_reason) finishes++;
      }
    }
    assert.equal(streamed, text);
    assert.equal(finishes, 1);

    const events = await raw_stream(request);
    assert.equal(events.at(-1), "[DONE]");
    assert.equal(events[0].choices[0].delta.role, "assistant");
    const ids = new Set(events.slice(0, -1).map((e) => e.id));
    assert.equal(ids.size, 1, "one id for the whole stream");
    const finished = events.slice(0, -1).filter((e) => e.choices[0].finish_reason);
    assert.equal(finished.length, 1);
    assert.equal(finished[0], events.at(-2), "finish_reason comes in the last chunk");
    assert.deepEqual(finished[0].choices[0].delta, {});
    assert.equal(finished[0].choices[0].finish_reason, blocking.choices[0].finish_reason);

    // The stream helper checks the role, ids and finish_reason itself.
    const final = await client.chat.completions.stream(request).finalChatCompletion();
    assert.equal(final.choices[0].message.content, text);
  });

  it("sends one usage chunk with include_usage, and none without", async () => {
    const request = { messages: hello, temperature: 0, max_tokens: 8, stream_options: { include_usage: true } };
    const events = (await raw_stream(request)).slice(0, -1);
    const with_usage = events.filter((e) => e.usage);
    assert.equal(with_usage.length, 1);
    assert.deepEqual(with_usage[0].choices, []);
    assert.equal(with_usage[0], events.at(-1), "the usage chunk is the last before [DONE]");
    assert.equal(with_usage[0].usage.completion_tokens, 8);
    assert.ok(events.slice(0, -1).every((e) => e.usage === null), "other chunks carry usage: null");
    const plain = (await raw_stream({ ...request, stream_options: undefined })).slice(0, -1);
    assert.ok(plain.every((e) => !("usage" in e)));
  });

  it("raises the client's error classes", async () => {
    const wrong = new OpenAI({ baseURL: base + "/v1", apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(wrong.chat.completions.create({ messages: hello }), OpenAI.AuthenticationError);
    await assert.rejects(client.chat.completions.create({ messages: hello, n: 2 }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError);
      assert.equal(e.param, "n");
      return true;
    });
    await assert.rejects(client.chat.completions.create({ messages: hello, temperature: 7 }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError);
      assert.equal(e.param, "temperature");
      return true;
    });
    const long = [{ role: "user", content: "river ".repeat(CONTEXT) }];
    await assert.rejects(client.chat.completions.create({ messages: long }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError);
      assert.equal(e.code, "context_length_exceeded");
      return true;
    });
    const big = await fetch(base + "/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + KEY },
      body: JSON.stringify({ messages: [{ role: "user", content: "x".repeat(2 << 20) }] }),
    });
    assert.equal(big.status, 413);
    assert.equal((await big.json()).error.type, "invalid_request_error");
    const missing = await fetch(base + "/v1/nothing", { headers: { Authorization: "Bearer " + KEY } });
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).error.type, "not_found_error");
  });

  it("refuses to require a tool call of a model without tool-call markers", async () => {
    const tools = [{ type: "function", function: { name: "ping" } }];
    await assert.rejects(client.chat.completions.create({ messages: hello, tools, tool_choice: "required" }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError);
      assert.equal(e.param, "tool_choice");
      assert.match(e.message, /no tool-call markers/);
      return true;
    });
  });

  it("frees the engine when a stream is aborted", async () => {
    const cancelled_before = await metric('sluice_generations_total{finish_reason="cancelled"}');
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { messages: hello, temperature: 0, stream: true, logit_bias: endless }, { signal: controller.signal });
    let content = "";
    // The client ends the loop (or throws its abort error) once aborted.
    try {
      for await (const chunk of stream) {
        content += chunk.choices[0]?.delta?.content || "";
        if (content.length > 0) {
          controller.abort();
          break;
        }
      }
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === "AbortError", String(e));
    }
    assert.ok(content.length > 0);
    // The next request needs the engine; it completes only once the aborted
    // generation has ended, which the metrics then show as cancelled.
    const next = await client.chat.completions.create({ messages: hello, temperature: 0, max_tokens: 4 });
    assert.equal(next.usage.completion_tokens, 4);
    assert.equal(await metric('sluice_generations_total{finish_reason="cancelled"}'), cancelled_before + 1);
  });

  it("streams four clients at once while /health answers, and refuses a fifth waiting one with 429", async () => {
    const request = { messages: hello, temperature: 0, max_tokens: 24, stream: true };
    const streams = await Promise.all([0, 1, 2, 3].map(() => client.chat.completions.create(request)));
    const healthy = await fetch(base + "/health");
    assert.equal(healthy.status, 200, "/health answers while four streams are open");
    const replies = await Promise.all(streams.map(async (stream) => {
      let text = "", finish = null;
      for await (const chunk of stream) {
        if (!chunk.choices.length) continue;
        text += chunk.choices[0].delta.content || "";
        finish = chunk.choices[0].finish_reason || finish;
      }
      return { text, finish };
    }));
    for (const reply of replies) {
      assert.ok(reply.finish === "length" || reply.finish === "stop", "every reply has its finish_reason");
      assert.equal(reply.text, replies[0].text, "greedy replies agree under concurrency");
    }

    // One generation that runs until aborted, three waiting behind it (the
    // queue holds three): a fifth is refused at once.
    const controller = new AbortController();
    const long = await client.chat.completions.create(
      { messages: hello, temperature: 0, stream: true, logit_bias: endless }, { signal: controller.signal });
    // Content (not just the role chunk, sent on submission) means it runs.
    const first = long[Symbol.asyncIterator]();
    for (;;) {
      const { value, done } = await first.next();
      assert.ok(!done, "the long generation runs until aborted");
      if (value.choices[0]?.delta?.content) break;
    }
    const waiting = await Promise.all([0, 1, 2].map(() =>
      client.chat.completions.create({ ...request, max_tokens: 2 })));
    await assert.rejects(client.chat.completions.create({ ...request, max_tokens: 2 }), (e) => {
      assert.ok(e instanceof OpenAI.RateLimitError);
      assert.ok(Number(e.headers.get("retry-after")) >= 1);
      return true;
    });
    controller.abort();
    await first.return();
    for (const stream of waiting) {
      let finish = null;
      for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason || finish;
      assert.equal(finish, "length");
    }
  });

  it("repeats greedy output, equal to `sluice run` on the ids `sluice template` renders", async () => {
    const request = { messages: hello, temperature: 0, max_tokens: 30 };
    const a = await client.chat.completions.create(request);
    const b = await client.chat.completions.create(request);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    const messages = path.join(path.dirname(server.model), "messages.json");
    fs.writeFileSync(messages, JSON.stringify(hello));
    const ids = run([SLUICE, "template", server.model, "--messages", messages, "--add-generation-prompt", "--ids"]).trim();
    assert.equal(ids.split(" ").length, a.usage.prompt_tokens);
    const reference = JSON.parse(run([SLUICE, "run", server.model, "--prompt-ids", ids, "--temp", "0", "-n", "30",
                                      "--ctx", String(CONTEXT), "--threads", "1", "--json"]));
    if (a.choices[0].finish_reason === "length") {
      assert.equal(a.choices[0].message.content, reference.text);
    } else {
      // serve also stops at the template's end-of-turn token, run only at eos.
      assert.ok(reference.text.startsWith(a.choices[0].message.content));
    }
  });

  it("reuses the previous request's state when the prompt extends it", async () => {
    const prompt = Array.from({ length: 40 }, (_, i) => 10 + i);
    const first = await client.completions.create({ prompt, max_tokens: 1, temperature: 0 });
    assert.equal(first.usage.prompt_tokens, 40);
    const next = await client.completions.create({ prompt: [...prompt, 60, 61, 62], max_tokens: 3, temperature: 0 });
    assert.equal(next.usage.prompt_tokens_details.cached_tokens, 40);
    const fresh = await client.completions.create({ prompt: [11, 12], max_tokens: 1, temperature: 0 });
    assert.equal(fresh.usage.prompt_tokens_details.cached_tokens, 0);
  });

  it("prefills only a conversation's new turn", async () => {
    const first = await client.chat.completions.create({ messages: hello, temperature: 0, max_tokens: 10 });
    const reply = first.choices[0].message.content;
    const next = await client.chat.completions.create({
      messages: [...hello, { role: "assistant", content: reply }, { role: "user", content: "And then?" }],
      temperature: 0, max_tokens: 4,
    });
    // At least the first prompt is reused (its snapshot), whatever the
    // reply's text re-tokenizes to.
    assert.ok(next.usage.prompt_tokens > first.usage.prompt_tokens);
    assert.ok(next.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens,
              JSON.stringify(next.usage));
    assert.equal(next.sluice.cached_tokens, next.usage.prompt_tokens_details.cached_tokens);
  });

  it("streams /v1/completions as it answers it whole, echo included", async () => {
    const request = { prompt: "Once upon a time", max_tokens: 12, temperature: 0 };
    const whole = await client.completions.create(request);
    assert.equal(whole.object, "text_completion");
    assert.equal(whole.usage.completion_tokens, 12);
    let streamed = "", finishes = 0;
    for await (const chunk of await client.completions.create({ ...request, stream: true })) {
      streamed += chunk.choices[0].text;
      if (chunk.choices[0].finish_reason) finishes++;
    }
    assert.equal(streamed, whole.choices[0].text);
    assert.equal(finishes, 1);
    const echoed = await client.completions.create({ ...request, echo: true });
    assert.equal(echoed.choices[0].text, "Once upon a time" + whole.choices[0].text);
    await assert.rejects(client.completions.create({ prompt: [1, 99999], max_tokens: 1 }),
                         (e) => e instanceof OpenAI.BadRequestError && e.param === "prompt[1]");
  });

  it("holds back a stop string across tokens and never returns it", async () => {
    const request = { messages: hello, temperature: 0, max_tokens: 40 };
    const text = (await client.chat.completions.create(request)).choices[0].message.content;
    // A stop string taken from the middle of the greedy reply, longer than
    // one token, so the reply must end just before it.
    const at = Math.floor(text.length / 2);
    const stop = text.slice(at, at + 5);
    const cut = text.indexOf(stop);
    const stopped = await client.chat.completions.create({ ...request, stop: [stop] });
    assert.equal(stopped.choices[0].message.content, text.slice(0, cut));
    assert.equal(stopped.choices[0].finish_reason, "stop");
    let streamed = "";
    for await (const chunk of await client.chat.completions.create({ ...request, stop: stop, stream: true }))
      streamed += chunk.choices[0]?.delta?.content || "";
    assert.equal(streamed, text.slice(0, cut));
  });

  it("constrains the reply to a response_format json_schema, streamed and blocking alike", async () => {
    const schema = {
      type: "object",
      properties: { digit: { type: "integer", minimum: 0, maximum: 9 } },
      required: ["digit"],
    };
    const request = {
      messages: hello, temperature: 0, max_tokens: 40,
      response_format: { type: "json_schema", json_schema: { name: "d", schema, strict: true } },
    };
    const blocking = await client.chat.completions.create(request);
    // The schema admits only {"digit": D} (give or take whitespace), so the
    // value completes well within max_tokens and then only an end token may come.
    assert.equal(blocking.choices[0].finish_reason, "stop");
    const value = JSON.parse(blocking.choices[0].message.content);
    assert.deepEqual(Object.keys(value), ["digit"]);
    assert.ok(Number.isInteger(value.digit) && value.digit >= 0 && value.digit <= 9);
    let streamed = "";
    for await (const chunk of await client.chat.completions.create({ ...request, stream: true }))
      streamed += chunk.choices[0]?.delta?.content || "";
    assert.equal(streamed, blocking.choices[0].message.content);
    await assert.rejects(client.chat.completions.create({
      messages: hello, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", patternProperties: {} } } },
    }), (e) => e instanceof OpenAI.BadRequestError && e.param === "response_format");
  });

  it("decodes four requests together with --parallel 4, each as it is served alone", async () => {
    const request = { messages: hello, temperature: 0, max_tokens: 24 };
    const alone = (await client.chat.completions.create(request)).choices[0].message.content;
    const batched = await start(server.model, ["--api-key", KEY, "--ctx", "512", "--parallel", "4"]);
    try {
      const other = new OpenAI({ baseURL: batched.url + "/v1", apiKey: KEY, maxRetries: 0 });
      const prompts = [hello, [{ role: "user", content: "Name three colours." }], hello,
                       [{ role: "user", content: "Count to ten." }]];
      const singles = [];
      for (const messages of prompts)
        singles.push((await other.chat.completions.create({ ...request, messages })).choices[0].message.content);
      assert.equal(singles[0], alone, "the context size does not change greedy output");
      const together = await Promise.all(prompts.map(async (messages) => {
        let text = "";
        for await (const chunk of await other.chat.completions.create({ ...request, messages, stream: true }))
          text += chunk.choices[0]?.delta?.content || "";
        return text;
      }));
      assert.deepEqual(together, singles);
    } finally {
      assert.equal(await stop(batched), 0, batched.log());
    }
  });

  it("serves a self-contained page at /", async () => {
    const res = await fetch(base + "/");
    assert.equal(res.status, 200);
    const html = await res.text();
    assert.match(html, /<script>/);
    assert.doesNotMatch(html, /(src|href)=["']?(https?:)?\/\//, "no external assets");
  });
});
