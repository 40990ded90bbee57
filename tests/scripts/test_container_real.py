# tests/scripts/test_container_real.py: sluicepy.container and reference.py on
# containers made by the real `sluice convert` from tiny checkpoints. Fails
# when $SLUICE_BIN has no convert command.
import json
import os
import shutil
import subprocess
import sys
import unittest

import numpy as np

import helpers
from sluicepy import SluiceError, container, safetensors

SLUICE_BIN = os.environ.get("SLUICE_BIN", "")


def converter_available():
    if not SLUICE_BIN or not os.path.exists(SLUICE_BIN):
        return False
    return subprocess.run([SLUICE_BIN, "convert", "--help"], capture_output=True).returncode == 0


def convert(src, out):
    result = subprocess.run([SLUICE_BIN, "convert", src, out], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"sluice convert {src} {out} failed:\n{result.stdout}\n{result.stderr}")
    return out


class RealContainerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = helpers.scratch()
        root = cls.tmp.name
        cls.models = {}
        for family, extra in (("olmoe", ["--dtype", "f32"]), ("qwen3_moe", ["--shards", "2"])):
            src = helpers.make_checkpoint(os.path.join(root, family), family, "--seed", "5", *extra)
            cls.models[family] = (src, convert(src, os.path.join(root, family + ".sluice")))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_manifest_config_tokenizer_and_every_record(self):
        for family, (src, out) in self.models.items():
            with self.subTest(family=family):
                c = container.Container(out)
                self.assertEqual(c.arch, family)
                with open(os.path.join(src, "config.json")) as f:
                    self.assertEqual(c.config, json.load(f))
                for name in ("tokenizer.json", "tokenizer_config.json"):
                    with open(os.path.join(src, name), "rb") as a, open(os.path.join(out, name), "rb") as b:
                        self.assertEqual(a.read(), b.read())
                self.assertEqual(sorted(c.layers), list(range(c.config["num_hidden_layers"])))
                result = helpers.run_script(None, "-m", "sluicepy.container", "verify", out)
                self.assertEqual(json.loads(result.stdout)["records"], 8 * c.config["num_hidden_layers"])

    def test_trunk_is_within_one_half_step_of_the_source(self):
        for family, (src, out) in self.models.items():
            c = container.Container(out)
            source = safetensors.load_checkpoint(src)
            for name, info in c.trunk.items():
                with self.subTest(family=family, tensor=name):
                    got, want = c.trunk_tensor(name), source[name]
                    self.assertEqual(got.shape, want.shape)
                    if info["format"] == "f32":
                        np.testing.assert_array_equal(got, want)
                        continue
                    levels = 127 if info["format"] == "q8g128" else 7
                    cols = want.shape[1]
                    padded = np.zeros((want.shape[0], -(-cols // 128) * 128), np.float32)
                    padded[:, :cols] = want
                    amax = np.abs(padded.reshape(want.shape[0], -1, 128)).max(axis=2)
                    step = np.repeat(amax / levels, 128, axis=1)[:, :cols]
                    # half a step, plus the f16 rounding of the scale (q8: 127 steps of it)
                    self.assertTrue(np.all(np.abs(got - want) <= step * 0.5 + step * levels * 2 ** -10 + 1e-7))
                    expect_format = "q8g128" if name in ("model.embed_tokens.weight", "lm_head.weight") else "q4g128"
                    self.assertEqual(info["format"], expect_format)

    def test_experts_decode_close_to_the_source(self):
        for family, (src, out) in self.models.items():
            c = container.Container(out)
            source = safetensors.load_checkpoint(src)
            errors = []
            for layer in c.layers:
                for e in range(c.layers[layer]["experts"]):
                    for kind, matrix in c.expert(layer, e).items():
                        w = source[f"model.layers.{layer}.mlp.experts.{e}.{kind}_proj.weight"]
                        self.assertEqual(matrix.shape, w.shape)
                        errors.append(np.linalg.norm(matrix - w) / np.linalg.norm(w))
            # 3 bits per weight on Gaussian weights: clearly better than nothing, clearly lossy.
            self.assertLess(float(np.mean(errors)), 0.5, family)
            self.assertGreater(float(np.mean(errors)), 0.01, family)

    def test_dump_expert_matches_the_library(self):
        _, out = self.models["qwen3_moe"]
        path = os.path.join(self.tmp.name, "up.f32")
        helpers.run_script(None, "-m", "sluicepy.container", "dump-expert", out, "--layer", "2", "--expert", "7",
                           "--matrix", "up", "--out", path)
        want = container.Container(out).expert_matrix(2, 7, "up")
        np.testing.assert_array_equal(np.fromfile(path, dtype="<f4").reshape(want.shape), want)

    def test_reference_on_container_and_compare(self):
        src, out = self.models["olmoe"]
        result = helpers.run_script("reference.py", out, "--prompt-ids", "3,50,60,70,80", "-n", "4", "--json")
        self.assertEqual(len(json.loads(result.stdout)["tokens"]), 4)
        report = json.loads(helpers.run_script("reference.py", out, "--prompt-ids", "3,50,60,70,80", "-n", "4",
                                               "--compare", src).stdout)
        self.assertEqual(report["rows"], 5)
        self.assertTrue(0.0 <= report["top1_agreement"] <= 1.0)
        self.assertGreater(report["max_abs_logit_error"], 0.0)
        self.assertEqual(set(report["relative_weight_error"]) >= {"gate_proj", "up_proj", "down_proj"}, True)

    def test_edited_copies_are_refused(self):
        _, out = self.models["olmoe"]
        copy = os.path.join(self.tmp.name, "edited.sluice")
        shutil.copytree(out, copy)
        manifest_path = os.path.join(copy, "manifest.json")
        with open(manifest_path) as f:
            manifest = json.load(f)
        manifest["format_version"] = container.MANIFEST_FORMAT_VERSION + 1
        with open(manifest_path, "w") as f:
            json.dump(manifest, f)
        with self.assertRaisesRegex(SluiceError, f"format_version {container.MANIFEST_FORMAT_VERSION + 1}"):
            container.Container(copy)
        os.remove(manifest_path)
        with self.assertRaisesRegex(SluiceError, "incomplete container: conversion did not finish"):
            container.Container(copy)


if __name__ == "__main__":
    if not converter_available():
        sys.exit(f"{SLUICE_BIN or '$SLUICE_BIN'} has no `convert` command: the converter is broken or unbuilt")
    unittest.main()
