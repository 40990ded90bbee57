#!/usr/bin/python3
# tests/compute/convert/convert_probe_test.py: the converter probe of issue 16
# as a test. Copies of a tiny checkpoint are damaged at seeded random places
# (a byte of the safetensors header or data flipped, the file cut short, a
# config.json value replaced by a valid-JSON one of the wrong kind, the
# tokenizer damaged or gone) and converted. Each case must end in a one-line
# refusal naming the file, key or tensor, with no manifest written, or in a
# container that `sluice verify` calls sound and `sluice run` can use: never
# a crash, never an unusable container. SLUICE_PROBE_SEED repeats a run;
# SLUICE_PROBE_CASES runs more cases (the first 12 of a seed are the default run).
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_e2e_test import SLUICE, convert, make_checkpoint, read_header  # noqa: E402

SEED = int(os.environ.get("SLUICE_PROBE_SEED", random.SystemRandom().randrange(1 << 30)))
CASES = int(os.environ.get("SLUICE_PROBE_CASES", 12))
ODD_VALUES = [-1, 0, -1e-6, 1e30, "2", None, [], {}, True, 0.5, 2 ** 40]


class ConvertProbeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        print("probe seed %d (SLUICE_PROBE_SEED=%d repeats this run)" % (SEED, SEED), flush=True)
        cls.tmp = tempfile.mkdtemp(prefix="sluice-convert-probe-")
        cls.clean = make_checkpoint("olmoe", os.path.join(cls.tmp, "clean"))
        header, _ = read_header(os.path.join(cls.clean, "model.safetensors"))
        with open(os.path.join(cls.clean, "config.json")) as f:
            cls.config = json.load(f)
        # What a refusal may name: a file of the checkpoint, a config key, a tensor.
        cls.names = set(os.listdir(cls.clean)) | set(cls.config) | {k for k in header if k != "__metadata__"}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def damage(self, rng, src):
        kind = rng.choice(["header_flip", "data_flip", "truncate", "config", "tokenizer"])
        weights = os.path.join(src, "model.safetensors")
        if kind in ("header_flip", "data_flip", "truncate"):
            with open(weights, "rb") as f:
                data = bytearray(f.read())
            header_end = 8 + int.from_bytes(data[:8], "little")
            if kind == "truncate":
                at = rng.randrange(0, len(data))
                what = "cut at byte %d of %d" % (at, len(data))
                del data[at:]
            else:
                at = rng.randrange(0, header_end) if kind == "header_flip" else rng.randrange(header_end, len(data))
                data[at] ^= 1 << rng.randrange(8)
                what = "bit flipped at byte %d" % at
            with open(weights, "wb") as f:
                f.write(data)
            return "model.safetensors " + what
        if kind == "config":
            config = dict(self.config)
            key = rng.choice(sorted(config))
            config[key] = rng.choice(ODD_VALUES)
            with open(os.path.join(src, "config.json"), "w") as f:
                json.dump(config, f)
            return "config.json %s = %r" % (key, config[key])
        path = os.path.join(src, "tokenizer.json")
        if rng.random() < 0.5:
            os.unlink(path)
            return "tokenizer.json removed"
        with open(path, "rb") as f:
            text = f.read()
        with open(path, "wb") as f:
            f.write(text[:rng.randrange(len(text))])
        return "tokenizer.json cut short"

    def test_every_damaged_checkpoint_is_refused_by_name_or_converts_to_a_usable_container(self):
        rng = random.Random(SEED)
        outcomes = {"refused": 0, "usable": 0}
        for case in range(CASES):
            src = os.path.join(self.tmp, "case-%d" % case)
            out = os.path.join(self.tmp, "case-%d.sluice" % case)
            shutil.copytree(self.clean, src)
            what = self.damage(rng, src)
            with self.subTest(case=case, damage=what):
                done = convert(src, out)
                self.assertGreaterEqual(done.returncode, 0, "the converter crashed: " + done.stderr)
                if done.returncode != 0:
                    outcomes["refused"] += 1
                    self.assertEqual(done.returncode, 1, done.stderr)
                    self.assertEqual(done.stderr.count("\n"), 1, done.stderr)
                    self.assertTrue(done.stderr.startswith("sluice: error: "), done.stderr)
                    self.assertTrue(any(name in done.stderr for name in self.names),
                                    "the refusal names no file, key or tensor: " + done.stderr)
                    self.assertFalse(os.path.exists(os.path.join(out, "manifest.json")))
                else:
                    outcomes["usable"] += 1
                    verify = subprocess.run([SLUICE, "verify", out], capture_output=True, text=True)
                    self.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)
                    run = subprocess.run([SLUICE, "run", out, "--prompt-ids", "1,2,3", "-n", "2", "--temp", "0",
                                          "--no-cache"], capture_output=True, text=True)
                    self.assertEqual(run.returncode, 0, run.stderr)
            shutil.rmtree(src, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
        print("probe outcomes: %s" % outcomes, flush=True)


if __name__ == "__main__":
    unittest.main()
