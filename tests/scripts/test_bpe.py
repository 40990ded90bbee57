# tests/scripts/test_bpe.py: the tiny checkpoints' tokenizer.json is a byte-level
# BPE in Hugging Face's schema with exactly vocab_size ids, each family's real
# pre-tokenizer, and it round-trips text through sluicepy's encoder.
import json
import os
import shutil
import subprocess
import unittest

import helpers
from sluicepy import bpe

TEXT = ("We hold these truths to be self-evident, that all men are created equal.\n\n"
        "  Numbers 1234567 and symbols #$%&*()_+ {}[];:'\"<>?/\\|~` tabs\tend.\r\n"
        "It's they'll we've I'm you'd don't -- zzz qqq xylophone!")

NODE_MODULES = os.path.join(helpers.SOURCE_ROOT, "tests", "npm", "node_modules")


class TokenizerTest(unittest.TestCase):
    def check_family(self, family, specials):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, family)
            with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
                spec = json.load(f)
            with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
                tok_config = json.load(f)
            with open(os.path.join(d, "config.json")) as f:
                config = json.load(f)
        model = spec["model"]
        self.assertEqual(model["type"], "BPE")
        ids = set(model["vocab"].values()) | {t["id"] for t in spec["added_tokens"]}
        self.assertEqual(ids, set(range(config["vocab_size"])))
        self.assertEqual(len(model["merges"]), config["vocab_size"] - 256 - len(specials))
        for m in model["merges"]:  # every merge joins two tokens into a token of the vocabulary
            a, b = m.split(" ")
            self.assertIn(a, model["vocab"])
            self.assertIn(b, model["vocab"])
            self.assertIn(a + b, model["vocab"])
        added = {t["content"]: t for t in spec["added_tokens"]}
        for content in specials:
            self.assertTrue(added[content]["special"])
        self.assertEqual(added[tok_config["eos_token"]]["id"], config["eos_token_id"])
        self.assertEqual(spec["decoder"]["type"], "ByteLevel")
        self.assertEqual(spec["normalizer"], {"type": "NFC"})
        self.assertIn("chat_template", tok_config)
        tok = bpe.Tokenizer(spec)
        encoded = tok.encode(TEXT)
        self.assertEqual(tok.decode(encoded), TEXT)
        self.assertLess(len(encoded), len(TEXT.encode()) * 0.8)  # merges actually apply
        with_special = "hello" + specials[-1] + "world"
        self.assertIn(added[specials[-1]]["id"], tok.encode(with_special))
        self.assertEqual(tok.decode(tok.encode(with_special)), with_special)
        return spec, tok_config

    def test_olmoe_tokenizer(self):
        spec, tok_config = self.check_family("olmoe", ["<|endoftext|>", "<|padding|>", "|||IP_ADDRESS|||"])
        self.assertEqual(spec["pre_tokenizer"]["type"], "ByteLevel")
        self.assertTrue(spec["pre_tokenizer"]["use_regex"])
        self.assertIn("<|assistant|>", tok_config["chat_template"])

    def test_qwen3_tokenizer(self):
        spec, tok_config = self.check_family("qwen3_moe", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        split, byte_level = spec["pre_tokenizer"]["pretokenizers"]
        self.assertEqual(split["type"], "Split")
        self.assertEqual(split["pattern"]["Regex"], bpe.QWEN2_REGEX)
        self.assertEqual((byte_level["type"], byte_level["use_regex"]), ("ByteLevel", False))
        self.assertIn("<|im_start|>", tok_config["chat_template"])
        # Qwen2's regex splits digits one by one; GPT-2's keeps runs together.
        tok = bpe.Tokenizer(spec)
        self.assertEqual(len(tok.encode("1776")), 4)

    def test_byte_alphabet_is_a_bijection_of_printable_characters(self):
        chars = bpe.byte_alphabet()
        self.assertEqual(len(set(chars)), 256)
        self.assertTrue(all(c.isprintable() and not c.isspace() for c in chars))
        self.assertEqual(chars[ord(" ")], "\u0120")  # 'Ġ', as in every GPT-2 style vocabulary

    def test_independent_tokenizer_agrees(self):
        self.assertTrue(shutil.which("node") and os.path.isdir(NODE_MODULES),
                        "node or tests/npm/node_modules missing (scripts/setup installs them)")
        texts = [TEXT, "IT'S DON'T 1776 caf\u00e9 na\u00efve \u4e2d\u6587 \U0001F600 e\u0301",
                 "a<|im_end|>b<|endoftext|>c |||IP_ADDRESS||| <|padding|>"]
        for family in ("olmoe", "qwen3_moe"):
            with self.subTest(family=family), helpers.scratch() as d:
                helpers.make_checkpoint(d, family)
                result = subprocess.run(["node", os.path.join(os.path.dirname(__file__), "lenml_encode.js"),
                                         NODE_MODULES, d], input=json.dumps(texts), capture_output=True,
                                        text=True, check=True)
                tok = bpe.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
                self.assertEqual(json.loads(result.stdout), [tok.encode(t) for t in texts])

    def test_cli_encode_decode(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "olmoe")
            path = os.path.join(d, "tokenizer.json")
            ids = json.loads(helpers.run_script(None, "-m", "sluicepy.bpe", "encode", path, "Liberty and Life").stdout)
            text = helpers.run_script(None, "-m", "sluicepy.bpe", "decode", path, ",".join(map(str, ids))).stdout
            self.assertEqual(text, "Liberty and Life")


if __name__ == "__main__":
    unittest.main()
