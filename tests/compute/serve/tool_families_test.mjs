// tests/compute/serve/tool_families_test.mjs: tool_choice "auto" end to end
// through `sluice serve` for the DeepSeek-V3 and Kimi families, whose tiny
// tokenizers carry the real tool-call markers (scripts/sluicepy/bpe.py) and
// whose templates are DeepSeek-V3's own (tests/npm) and the Kimi K2 layout
// (tests/compute/chat/templates/kimi_k2.jinja). logit_bias on the family's
// call opener makes random weights open a call; the server must carry it
// to a whole call of an offered tool, parsed by token id into tool_calls
// (blocking and streamed alike), and the call and its result must go back
// through the template for an answer. Exits 77 without the client.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { ROOT, load_openai, make_model, start, stop } from "./harness.mjs";
import { check_arguments, question, tools } from "./weather_tools.mjs";

const OpenAI = await load_openai();
const CONTEXT = 2048;

function use_template(dir, template) {
  const config_path = path.join(dir, "tokenizer_config.json");
  const config = JSON.parse(fs.readFileSync(config_path, "utf8"));
  config.chat_template = template;
  fs.writeFileSync(config_path, JSON.stringify(config));
}
// The checkpoint's added tokens by content.
function added_ids(model) {
  const tokenizer = JSON.parse(fs.readFileSync(path.join(model + ".checkpoint", "tokenizer.json"), "utf8"));
  return Object.fromEntries(tokenizer.added_tokens.map((t) => [t.content, t.id]));
}

const families = [
  { family: "deepseek_v3", opener: "<｜tool▁calls▁begin｜>", id: /^call_[A-Za-z0-9]{24}$/,
    template: () => JSON.parse(fs.readFileSync(path.join(ROOT, "tests", "npm", "node_modules", "@lenml",
      "tokenizer-deepseek_v3", "models", "tokenizer_config.json"), "utf8")).chat_template },
  // Kimi's call id is functions.NAME:INDEX, the name parsed out of it.
  { family: "kimi_k2", opener: "<|tool_calls_section_begin|>", id: /^functions\.get_(weather|time):(0|[1-9][0-9]{0,5})$/,
    template: () => fs.readFileSync(path.join(ROOT, "tests", "compute", "chat", "templates", "kimi_k2.jinja"),
                                    "utf8") },
];

for (const { family, opener, id, template } of families) {
  describe(`tool_choice auto through sluice serve: ${family}`, () => {
    let server = null, client = null, special = {};

    before(async () => {
      const model = make_model(family, `${family}-tools.sluice`, [`max_position_embeddings=${CONTEXT}`],
                               (dir) => use_template(dir, template()));
      special = added_ids(model);
      server = await start(model, ["--ctx", String(CONTEXT)]);
      client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0 });
    });

    after(async () => {
      if (server) assert.equal(await stop(server), 0, "sluice serve exits 0 on SIGTERM: " + server.log());
    });

    const opened = () => ({ messages: question, tools, parallel_tool_calls: false, temperature: 0, max_tokens: 300,
                            logit_bias: { [special[opener]]: 100 } });

    it("has the real markers as added tokens", () => {
      for (const marker of family === "deepseek_v3"
        ? ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"]
        : ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
           "<|tool_call_end|>", "<|tool_calls_section_end|>"])
        assert.equal(typeof special[marker], "number", `${marker} is an added token`);
    });

    it("holds a call the model opens to the syntax and the schema, blocking and streamed", async () => {
      for (const body of [opened(), { ...opened(), tool_choice: "auto" }]) {
        const choice = (await client.chat.completions.create(body)).choices[0];
        assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice));
        assert.equal(choice.message.content, null);
        assert.equal(choice.message.tool_calls.length, 1);
        const call = choice.message.tool_calls[0];
        assert.equal(call.type, "function");
        assert.match(call.id, id);
        check_arguments(call.function.name, call.function.arguments);
      }
      const blocking = (await client.chat.completions.create(opened())).choices[0].message.tool_calls[0];
      const final = await client.chat.completions.stream({ ...opened(), stream: true }).finalChatCompletion();
      assert.equal(final.choices[0].finish_reason, "tool_calls");
      const streamed = final.choices[0].message.tool_calls;
      assert.equal(streamed.length, 1);
      assert.match(streamed[0].id, id);
      assert.equal(streamed[0].function.name, blocking.function.name);
      assert.equal(streamed[0].function.arguments, blocking.function.arguments);
    });

    it("stays free text without the opener, and answers the tool's result", async () => {
      const free = (await client.chat.completions.create(
        { ...opened(), logit_bias: { [special[opener]]: -100 }, max_tokens: 8 })).choices[0];
      assert.equal(free.message.tool_calls, undefined);
      assert.equal(typeof free.message.content, "string");

      const call = (await client.chat.completions.create(opened())).choices[0].message;
      const answer = await client.chat.completions.create({
        messages: [...question, call,
                   { role: "tool", tool_call_id: call.tool_calls[0].id, content: JSON.stringify({ temperature: 21 }) }],
        tools, tool_choice: "none", temperature: 0, max_tokens: 6 });
      assert.equal(answer.choices[0].message.tool_calls, undefined);
      assert.equal(typeof answer.choices[0].message.content, "string");
      const alone = await client.chat.completions.create(
        { messages: question, tools, tool_choice: "none", temperature: 0, max_tokens: 1 });
      assert.ok(answer.usage.prompt_tokens > alone.usage.prompt_tokens + 4,
                `the call and its result are in the prompt: ${answer.usage.prompt_tokens} vs ${alone.usage.prompt_tokens}`);
    });
  });
}
