// tests/npm/tiktoken_reference.js: runs js-tiktoken (OpenAI's tiktoken BPE in
// JavaScript, with its bundled cl100k_base and o200k_base ranks) for the C++
// tiktoken tests to compare against. Never used by sluice itself.
//
// Usage:
//   node tiktoken_reference.js ENCODING export DIR
//     writes DIR/tiktoken.model (one `base64 rank` line per token),
//     DIR/tokenizer_config.json (the specials as added_tokens_decoder, eos
//     <|endoftext|>) and DIR/pattern.txt (the split pattern, verbatim).
//   node tiktoken_reference.js ENCODING encode < inputs.jsonl > outputs.jsonl
//     input line:  {"b64": "<base64 of the UTF-8 bytes, possibly broken>"}
//     output line: {"markup": [ids], "content": [ids], "text_b64": "...", "decoded_b64": "..."}
//   node tiktoken_reference.js kimi split < inputs.jsonl > outputs.jsonl
//     output line: {"pieces_b64": ["...", ...]}: the pieces Kimi's pattern
//     splits the text into, run by V8's own regex engine. The `v` flag gives
//     JavaScript the class intersection (&&) the pattern needs; (?i:...) is
//     spelled out, with U+017F for s as Rust's Unicode case folding has it.
// "markup" recognises the encoding's special tokens, "content" none of them.
// Bytes become a JS string through WHATWG's TextDecoder (U+FFFD per maximal
// invalid subpart); text_b64 is that string re-encoded; decoded_b64 is
// js-tiktoken's decode of the content ids.
"use strict";
const fs = require("fs");
const path = require("path");
const readline = require("readline");
const { Tiktoken } = require("js-tiktoken/lite");

const encodings = ["cl100k_base", "o200k_base"];
const [name, command, dir] = process.argv.slice(2);
const kimi = name === "kimi" && command === "split";
if (!kimi && (!encodings.includes(name) || !["export", "encode"].includes(command) || (command === "export" && !dir))) {
  process.stderr.write(`usage: tiktoken_reference.js {${encodings.join("|")}} {export DIR|encode} | kimi split\n`);
  process.exit(2);
}

function kimiPattern() {
  const upper = String.raw`[[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]&&[^\p{Script=Han}]]`;
  const lower = String.raw`[[\p{Ll}\p{Lm}\p{Lo}\p{M}]&&[^\p{Script=Han}]]`;
  const contraction = String.raw`(?:'[sS\u017F]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])`;
  const word = String.raw`[^\r\n\p{L}\p{N}]?`;
  return new RegExp(
    [
      String.raw`[\p{Script=Han}]+`,
      `${word}${upper}*${lower}+${contraction}?`,
      `${word}${upper}+${lower}*${contraction}?`,
      String.raw`\p{N}{1,3}`,
      String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
      String.raw`\s*[\r\n]+`,
      String.raw`\s+(?!\S)`,
      String.raw`\s+`,
    ].join("|"),
    "vg"
  );
}

const ranks = kimi ? null : require(`js-tiktoken/ranks/${name}`);
if (command === "export") {
  // bpe_ranks is compressed: lines of "<tag> <first rank> <base64 token>...".
  const lines = [];
  for (const group of ranks.bpe_ranks.split("\n").filter(Boolean)) {
    const [, first, ...tokens] = group.split(" ");
    tokens.forEach((token, i) => lines.push(`${token} ${Number.parseInt(first, 10) + i}\n`));
  }
  fs.writeFileSync(path.join(dir, "tiktoken.model"), lines.join(""));
  const decoder = {};
  for (const [content, id] of Object.entries(ranks.special_tokens)) decoder[String(id)] = { content, special: true };
  fs.writeFileSync(
    path.join(dir, "tokenizer_config.json"),
    JSON.stringify({ added_tokens_decoder: decoder, eos_token: "<|endoftext|>" })
  );
  fs.writeFileSync(path.join(dir, "pattern.txt"), ranks.pat_str);
  process.exit(0);
}

const enc = kimi ? null : new Tiktoken(ranks);
const split = kimi ? kimiPattern() : null;
const decoder = new TextDecoder("utf-8", { fatal: false });
const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
lines.on("line", (line) => {
  if (line.length === 0) return;
  const text = decoder.decode(Buffer.from(JSON.parse(line).b64, "base64"));
  if (kimi) {
    const pieces = [...text.matchAll(split)].map((m) => Buffer.from(m[0], "utf8").toString("base64"));
    out.push(JSON.stringify({ pieces_b64: pieces }));
    return;
  }
  const content = enc.encode(text, [], []);
  // Every special token of both encodings starts with "<|"; without one in
  // the text, encode takes the very same path either way (halves the time).
  const markup = text.includes("<|") ? enc.encode(text, "all") : content;
  out.push(
    JSON.stringify({
      markup,
      content,
      text_b64: Buffer.from(text, "utf8").toString("base64"),
      decoded_b64: Buffer.from(enc.decode(content), "utf8").toString("base64"),
    })
  );
});
lines.on("close", () => {
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
});
