// tests/scripts/lenml_encode.js: encodes a JSON list of strings with the
// independent @lenml/tokenizers (transformers.js lineage, installed under
// tests/npm) from a checkpoint's tokenizer files; prints a JSON list of id lists.
// Usage: node lenml_encode.js NODE_MODULES CHECKPOINT_DIR < texts.json
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require(path.join(process.argv[2], "@lenml/tokenizers"));
const dir = process.argv[3];
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json")));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json")));
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const texts = JSON.parse(fs.readFileSync(0));
process.stdout.write(JSON.stringify(texts.map((t) => tokenizer.encode(t, { add_special_tokens: false }))));
