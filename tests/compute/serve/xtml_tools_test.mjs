// tests/compute/serve/xtml_tools_test.mjs: Kimi K3's XTML replies constrained
// through `sluice serve` on K3-tiny (random weights), with the official openai
// client: tool_choice "required" and a named function give a call of an
// offered tool whose arguments (argument elements, strings raw) validate;
// under "auto" a call the model opens (made to by logit_bias on <|open|>) is
// held the same way; JSON output with thinking on starts after the response
// opener, so the content parses. Arguments are checked here by hand,
// independently of the server's grammar. Exits 77 without the client.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { load_openai, make_model, start, stop } from "./harness.mjs";
import { check_arguments, question, tools } from "./weather_tools.mjs";

const OpenAI = await load_openai();
let server = null;
let client = null;
const special = {};  // XTML's markup tokens by name

const thinking_off = { chat_template_kwargs: { enable_thinking: false } };
const required = { messages: question, tools, tool_choice: "required", parallel_tool_calls: false,
                   temperature: 0, max_tokens: 300, ...thinking_off };

function check_call(choice) {
  assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice));
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  check_arguments(call.function.name, call.function.arguments);
  return call;
}

describe("XTML (Kimi K3) constrained replies through sluice serve", () => {
  before(async () => {
    const model = make_model("kimi_k3", "k3.sluice", [], (dir) => {
      const tokenizer = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
      for (const t of tokenizer.added_tokens) special[t.content] = t.id;
    });
    assert.ok(special["<|open|>"] !== undefined && special["<|close|>"] !== undefined);
    server = await start(model, []);
    client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0 });
  });

  after(async () => {
    if (server) assert.equal(await stop(server), 0, "sluice serve exits 0 on SIGTERM: " + server.log());
  });

  it("returns a required call, blocking and streamed alike", async () => {
    const call = check_call((await client.chat.completions.create(required)).choices[0]);
    const final = await client.chat.completions.stream({ ...required, stream: true }).finalChatCompletion();
    const streamed = check_call(final.choices[0]);
    assert.equal(streamed.function.name, call.function.name);
    assert.equal(streamed.function.arguments, call.function.arguments);
  });

  it("calls the function tool_choice names", async () => {
    for (const name of ["get_time", "get_weather"]) {
      const choice = (await client.chat.completions.create(
        { ...required, tool_choice: { type: "function", function: { name } } })).choices[0];
      assert.equal(check_call(choice).function.name, name);
    }
  });

  it("holds a call the model opens under tool_choice auto", async () => {
    const choice = (await client.chat.completions.create({ ...required, tool_choice: "auto",
      logit_bias: { [special["<|open|>"]]: 100 } })).choices[0];
    check_call(choice);
  });

  it("writes JSON output after free reasoning, in the response", async () => {
    const schema = { type: "object", properties: { n: { type: "integer", minimum: 0, maximum: 9 } },
                     required: ["n"], additionalProperties: false };
    // The bias ends the reasoning at once; the value must still wait for
    // the response opener and close it after.
    const reply = await client.chat.completions.create({
      messages: question, temperature: 0, max_tokens: 200,
      response_format: { type: "json_schema", json_schema: { name: "n", schema } },
      logit_bias: { [special["<|close|>"]]: 100 },
    });
    const choice = reply.choices[0];
    assert.equal(choice.finish_reason, "stop", JSON.stringify(choice));
    const value = JSON.parse(choice.message.content);
    assert.deepEqual(Object.keys(value), ["n"]);
    assert.ok(Number.isInteger(value.n) && value.n >= 0 && value.n <= 9, choice.message.content);
  });
});
