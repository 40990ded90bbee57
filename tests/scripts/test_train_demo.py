#!/usr/bin/python3
# tests of scripts/train_demo.py: the R data reader on hand-built XDR bytes,
# the paragraph cleaner, that training through the reference forward learns
# (a periodic sequence becomes predictable), and the perplexity windows.
import argparse
import math
import struct
import unittest

import helpers  # noqa: F401  (puts scripts/ on sys.path)
import torch

import train_demo
from sluicepy import SluiceError

_NIL = 254


def _int(value):
    return struct.pack(">i", value)


def _chars(text):
    data = text.encode()
    return _int(9 | (8 << 12)) + _int(len(data)) + data  # CHARSXP; levels carry the UTF-8 mark


def _strings(values):
    return _int(16) + _int(len(values)) + b"".join(_chars(v) for v in values)


def _named_list(items):
    """An R list with a names attribute, as XDR serialization version 3 writes it."""
    body = _int(19 | (1 << 9)) + _int(len(items)) + b"".join(_strings(v) for v in items.values())
    names = _int(2 | (1 << 10)) + _int(1) + _chars("names") + _strings(list(items)) + _int(_NIL)
    return b"X\n" + _int(3) + _int(0x40201) + _int(0x30500) + _int(5) + b"UTF-8" + body + names


class RDataTest(unittest.TestCase):
    def test_named_list_of_character_vectors(self):
        blob = _named_list({"emma": ["EMMA", "", "By Jane Austen"], "persuasion": ["Chapter 1"]})
        value = train_demo._RUnserializer(blob, "x.rdb").top()
        self.assertEqual(value, {"emma": ["EMMA", "", "By Jane Austen"], "persuasion": ["Chapter 1"]})

    def test_truncated_data_names_the_file(self):
        blob = _named_list({"emma": ["It was a truth universally acknowledged"]})
        with self.assertRaisesRegex(SluiceError, "x.rdb: .*(truncated|past the end)"):
            train_demo._RUnserializer(blob[:40], "x.rdb").top()

    def test_not_xdr(self):
        with self.assertRaisesRegex(SluiceError, "x.rdb: not an XDR"):
            train_demo._RUnserializer(b"RDA2\n", "x.rdb").top()


class ParagraphsTest(unittest.TestCase):
    def test_front_matter_and_headings_dropped_lines_joined(self):
        lines = ["EMMA", "", "By Jane Austen", "", "VOLUME I", "", "CHAPTER I", "",
                 "Emma Woodhouse, _handsome_, clever,", "and rich.", "", "Chapter 2", "",
                 "She was the youngest.", ""]
        self.assertEqual(train_demo.paragraphs(lines),
                         ["Emma Woodhouse, handsome, clever, and rich.", "She was the youngest."])

    def test_prose_before_a_mixed_case_heading_is_front_matter(self):
        lines = ["PRIDE AND PREJUDICE", "", "By Jane Austen", "", "Chapter 1", "", "It is a truth.", ""]
        self.assertEqual(train_demo.paragraphs(lines), ["It is a truth."])


class TrainingTest(unittest.TestCase):
    CONFIG = dict(train_demo.CONFIG, vocab_size=64, hidden_size=32, intermediate_size=16, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, num_experts=4, max_position_embeddings=16)

    def test_training_learns_a_periodic_sequence(self):
        torch.set_num_threads(1)
        period = [7, 3, 40, 11, 25, 9, 60, 2]
        ids = period * 40
        args = argparse.Namespace(seed=3, steps=80, batch=2, lr=1e-2, warmup=5, log_every=1000)
        initial = train_demo.initial_weights(self.CONFIG, 3)
        before = train_demo.perplexity(self.CONFIG, {n: w.detach() for n, w in initial.items()}, ids)
        weights, final_loss = train_demo.train(self.CONFIG, ids, args, lambda message: None)
        after = train_demo.perplexity(self.CONFIG, weights, ids)
        self.assertGreater(before["perplexity"], 30)  # about the vocabulary: untrained
        self.assertLess(after["perplexity"], 2.0)
        self.assertLess(final_loss, math.log(2.0))

    def test_same_seed_same_weights(self):
        first = train_demo.initial_weights(self.CONFIG, 5)
        second = train_demo.initial_weights(self.CONFIG, 5)
        other = train_demo.initial_weights(self.CONFIG, 6)
        name = "model.layers.1.mlp.experts.3.up_proj.weight"
        self.assertTrue(torch.equal(first[name], second[name]))
        self.assertFalse(torch.equal(first[name], other[name]))


class PerplexityTest(unittest.TestCase):
    def test_windows_of_the_context_like_sluice_eval(self):
        config = TrainingTest.CONFIG
        weights = {n: w.detach() for n, w in train_demo.initial_weights(config, 1).items()}
        # 40 tokens, windows of 16: 15 + 15 + 7 targets; a last window of one token scores none.
        self.assertEqual(train_demo.perplexity(config, weights, list(range(40)))["scored"], 37)
        self.assertEqual(train_demo.perplexity(config, weights, list(range(33)))["scored"], 30)


if __name__ == "__main__":
    unittest.main()
