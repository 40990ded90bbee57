// tests/compute/serve/tool_calls_test.mjs: a whole tool loop through `sluice
// serve` with the official openai client, on a tiny Qwen3-MoE whose tokenizer
// carries <tool_call> and </tool_call> and whose template is the real Qwen3
// one. tool_choice "required" (or a named function) constrains the reply, so
// even random weights emit a call of an offered tool with valid arguments:
// blocking and streamed alike it arrives as tool_calls with finish_reason
// "tool_calls", the result goes back as a tool message and a final answer
// comes. Under "auto" a call the model opens (made to by logit_bias) is held
// to the syntax and the schema; parallel calls come with content null.
// "none" parses no call out. Exits 77 without the client.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { load_openai, make_model, start, stop } from "./harness.mjs";
import { add_tool_markers, check_arguments, question, tools } from "./weather_tools.mjs";

const OpenAI = await load_openai();
const CONTEXT = 4096;
let server = null;
let client = null;
let tool_call_id = null;  // the <tool_call> token's id
let end_ids = [];  // <|im_end|> and <|endoftext|>

// One call, so the reply ends (a random model could chain calls to the cap).
const required = { messages: question, tools, tool_choice: "required", parallel_tool_calls: false,
                   temperature: 0, max_tokens: 400 };

// The arguments parse and satisfy the tool's schema (checked by hand here,
// independently of the server's grammar).

describe("tool calls through sluice serve", () => {
  before(async () => {
    const model = make_model("qwen3_moe", "tools.sluice", [`max_position_embeddings=${CONTEXT}`], (dir) => {
      ({ tool_call_id, end_ids } = add_tool_markers(dir));
    });
    server = await start(model, ["--ctx", String(CONTEXT)]);
    client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0 });
  });

  after(async () => {
    if (server) assert.equal(await stop(server), 0, "sluice serve exits 0 on SIGTERM: " + server.log());
  });

  it("returns a required call, then answers the tool's result", async () => {
    const reply = await client.chat.completions.create(required);
    const choice = reply.choices[0];
    assert.equal(choice.finish_reason, "tool_calls");
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, "function");
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    check_arguments(call.function.name, call.function.arguments);

    const answer = await client.chat.completions.create({
      messages: [...question, choice.message,
                 { role: "tool", tool_call_id: call.id, content: JSON.stringify({ temperature: 21 }) }],
      tools, tool_choice: "none", temperature: 0, max_tokens: 12,
    });
    assert.equal(answer.choices[0].message.role, "assistant");
    assert.equal(typeof answer.choices[0].message.content, "string");
    assert.equal(answer.choices[0].message.tool_calls, undefined);
    assert.ok(["stop", "length"].includes(answer.choices[0].finish_reason));
    // The tool loop's prompt holds the call and its result besides the question.
    const alone = await client.chat.completions.create(
      { messages: question, tools, tool_choice: "none", temperature: 0, max_tokens: 1 });
    const result_tokens = JSON.stringify({ temperature: 21 }).length / 4;
    assert.ok(answer.usage.prompt_tokens > alone.usage.prompt_tokens + result_tokens,
              `${answer.usage.prompt_tokens} vs ${alone.usage.prompt_tokens}`);
  });

  it("streams the call as OpenAI does, the same call as the blocking reply", async () => {
    const blocking = (await client.chat.completions.create(required)).choices[0].message.tool_calls[0];
    // The helper enforces the stream's shape: the role, each call's index,
    // id, type and name in its first fragment, and one finish_reason.
    const final = await client.chat.completions.stream({ ...required, stream: true }).finalChatCompletion();
    assert.equal(final.choices[0].finish_reason, "tool_calls");
    const streamed = final.choices[0].message.tool_calls;
    assert.equal(streamed.length, 1);
    assert.equal(streamed[0].function.name, blocking.function.name);
    assert.equal(streamed[0].function.arguments, blocking.function.arguments);

    let first = null, args = "", finishes = [];
    for await (const chunk of await client.chat.completions.create({ ...required, stream: true })) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      for (const fragment of choice.delta.tool_calls || []) {
        assert.equal(fragment.index, 0);
        if (!first) {
          first = fragment;
          assert.equal(fragment.type, "function");
          assert.match(fragment.id, /^call_/);
          assert.equal(fragment.function.arguments, "");
        } else {
          assert.equal(fragment.id, undefined, "the id comes once");
        }
        args += fragment.function.arguments || "";
      }
      assert.equal(choice.delta.content || "", "", "no content around a required call");
      if (choice.finish_reason) finishes.push(choice.finish_reason);
    }
    assert.deepEqual(finishes, ["tool_calls"]);
    assert.equal(first.function.name, blocking.function.name);
    assert.equal(args, blocking.function.arguments);
    check_arguments(first.function.name, args);
  });

  it("calls the function tool_choice names", async () => {
    for (const name of ["get_time", "get_weather"]) {
      const reply = await client.chat.completions.create(
        { ...required, tool_choice: { type: "function", function: { name } } });
      const call = reply.choices[0].message.tool_calls[0];
      assert.equal(call.function.name, name);
      check_arguments(name, call.function.arguments);
    }
  });

  it("holds a call the model opens under tool_choice auto to the syntax and the schema", async () => {
    // The bias makes even random weights open a call at once; the grammar
    // must then carry it to a whole call of an offered tool.
    const opened = { messages: question, tools, parallel_tool_calls: false, temperature: 0, max_tokens: 400,
                     logit_bias: { [tool_call_id]: 100 } };
    for (const body of [opened, { ...opened, tool_choice: "auto" }]) {
      const choice = (await client.chat.completions.create(body)).choices[0];
      assert.equal(choice.finish_reason, "tool_calls");
      assert.equal(choice.message.content, null);
      assert.equal(choice.message.tool_calls.length, 1);
      check_arguments(choice.message.tool_calls[0].function.name, choice.message.tool_calls[0].function.arguments);
    }
    const final = await client.chat.completions.stream({ ...opened, stream: true }).finalChatCompletion();
    assert.equal(final.choices[0].finish_reason, "tool_calls");
    const call = final.choices[0].message.tool_calls[0];
    check_arguments(call.function.name, call.function.arguments);
    // Without the opener the reply stays free text.
    const free = (await client.chat.completions.create({ ...opened, logit_bias: { [tool_call_id]: -100 },
                                                         max_tokens: 8 })).choices[0];
    assert.equal(free.message.tool_calls, undefined);
    assert.equal(typeof free.message.content, "string");
  });

  it("sends content null, not the newline between them, with parallel calls", async () => {
    // The end tokens banned: the reply chains calls until max_tokens.
    const ends = Object.fromEntries(end_ids.map((id) => [id, -100]));
    const body = { messages: question, tools, tool_choice: "required", temperature: 0, max_tokens: 120,
                   logit_bias: ends };
    const choice = (await client.chat.completions.create(body)).choices[0];
    assert.ok(choice.message.tool_calls.length >= 2, JSON.stringify(choice.message));
    assert.equal(choice.message.content, null);
    for (const call of choice.message.tool_calls.slice(0, -1)) check_arguments(call.function.name, call.function.arguments);
    let content = "";
    for await (const chunk of await client.chat.completions.create({ ...body, stream: true }))
      content += chunk.choices[0]?.delta?.content || "";
    assert.equal(content, "");
  });

  it("parses no call out with tool_choice none, even when the model writes the markers", async () => {
    const reply = await client.chat.completions.create({
      messages: question, tools, tool_choice: "none", temperature: 0, max_tokens: 6,
      logit_bias: { [tool_call_id]: 100 },
    });
    const choice = reply.choices[0];
    assert.equal(choice.message.tool_calls, undefined);
    assert.equal(choice.finish_reason, "length");
    assert.equal(choice.message.content, "<tool_call>".repeat(6));
  });

  it("refuses tool choices it cannot enforce, naming the field", async () => {
    const refused = async (body, param) => assert.rejects(client.chat.completions.create(body), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.param, param);
      return true;
    });
    await refused({ messages: question, tool_choice: "required" }, "tool_choice");
    await refused({ ...required, tool_choice: { type: "function", function: { name: "get_wind" } } },
                  "tool_choice.function.name");
    const loose = [{ type: "function", function: { name: "f", parameters: { type: "object", patternProperties: {} } } }];
    await refused({ ...required, tools: loose }, "tools[0].function.parameters");
    await refused({ ...required, response_format: { type: "json_object" } }, "response_format");
  });
});
