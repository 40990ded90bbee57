#!/usr/bin/python3
# tests/compute/convert/synth_e2e_test.py: `sluice synth` end to end. Each
# shape's container (OLMoE-1B-7B at 2 full layers; the larger shapes with
# test cuts of experts and vocabulary, so the suite stays fast) passes
# `sluice verify`, its record headers say what FORMAT.md computes, `info
# --json` shows the dimensions of architectures.md, `run -n 2` gives finite
# logits; the same seed gives the same bytes; bad requests fail naming the
# flag and leave nothing that looks complete. Kimi K3's shape (nested
# text_config) with records at its latent width. Expected numbers are written
# here from architectures.md and FORMAT.md, never read from the program.
import json
import math
import os
import shutil
import struct
import subprocess
import tempfile
import unittest
import zlib

from kill_at_report import kill_at_report

SLUICE = os.environ["SLUICE_BIN"]

# architectures.md §1.1, §2.1, §3.1, §4.1 (and §6 for the record payloads).
SHAPES = {
    "olmoe-1b-7b": {"arch": "olmoe", "hidden": 2048, "layers": 16, "experts": 64, "top_k": 8,
                    "expert_width": 1024, "vocab": 50304, "payload": 2359296},
    "qwen3-30b-a3b": {"arch": "qwen3_moe", "hidden": 2048, "layers": 48, "experts": 128, "top_k": 8,
                      "expert_width": 768, "vocab": 151936, "payload": 1769472},
    "deepseek-v3": {"arch": "deepseek_v3", "hidden": 7168, "layers": 61, "experts": 256, "top_k": 8,
                    "expert_width": 2048, "vocab": 129280, "payload": 16515072},
    "kimi-linear-48b": {"arch": "kimi_linear", "hidden": 2304, "layers": 27, "experts": 256, "top_k": 8,
                        "expert_width": 1024, "vocab": 163840, "payload": 2654208},
}
# Where each written test container stops: the layers that reach a MoE layer
# (DeepSeek-V3's first three are dense; Kimi-Linear's fourth is its first
# latent-attention layer), and the cuts of experts and vocabulary.
CUTS = {
    "qwen3-30b-a3b": ["--layers", "2", "--experts", "16", "--vocab", "4096"],
    "kimi-linear-48b": ["--layers", "4", "--experts", "16", "--vocab", "4096"],
}


def sluice(*args, timeout=600):
    return subprocess.run([SLUICE, *args], capture_output=True, text=True, timeout=timeout)


def align(value, to):
    return (value + to - 1) // to * to


def index_bytes(rows, cols):
    """FORMAT.md "Index bytes": 48 bytes per row block of 32 and vector of 4."""
    return align(rows, 32) // 32 * (cols // 4) * 48


def record_geometry(hidden, width):
    """FORMAT.md "Expert records": the section offsets and the stride."""
    offsets, at = [], 64
    shapes = [(width, hidden), (width, hidden), (hidden, width)]
    for rows, cols in shapes:
        offsets.append(at)
        at = align(at + index_bytes(rows, cols), 64)
    scales_off = at
    payload_end = scales_off + sum(align(rows, 32) for rows, _ in shapes) * 2
    return offsets, scales_off, payload_end, align(payload_end, 4096)


def check_headers(test, container, manifest):
    for layer in manifest["moe_layers"]:
        offsets, scales_off, payload_end, stride = record_geometry(layer["hidden"], layer["expert_width"])
        test.assertEqual(layer["record_stride"], stride)
        with open(os.path.join(container, layer["file"]), "rb") as f:
            for e in range(layer["experts"]):
                f.seek(e * stride)
                record = f.read(stride)
                fields = struct.unpack("<IHHIIIIIIIII", record[:44])
                test.assertEqual(fields, (0x52584C53, 2, layer["layer"], e, layer["codebook_base"], stride,
                                          *offsets, scales_off, payload_end, fields[11]))
                test.assertEqual(fields[11], zlib.crc32(record[64:payload_end]))
                test.assertEqual(record[44:64], bytes(20))
                test.assertEqual(record[payload_end:], bytes(stride - payload_end))


def tree(directory):
    files = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            files[name] = f.read()
    return files


class SynthTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="synth_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def synth(self, shape, out, *args):
        run = sluice("synth", shape, out, "-q", "--json", *args)
        self.assertEqual(run.returncode, 0, run.stderr)
        return json.loads(run.stdout)

    def check_container(self, shape, out, layers, experts=None, vocab=None):
        want = SHAPES[shape]
        verify = sluice("verify", out)
        self.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)
        info = sluice("info", out, "--json")
        self.assertEqual(info.returncode, 0, info.stderr)
        d = json.loads(info.stdout)
        self.assertEqual(d["arch"], want["arch"])
        self.assertEqual(d["layers"], layers)
        self.assertEqual(d["hidden"], want["hidden"])
        self.assertEqual(d["experts"], experts or want["experts"])
        self.assertEqual(d["top_k"], min(want["top_k"], experts or want["top_k"]))
        self.assertEqual(d["expert_width"], want["expert_width"])
        self.assertEqual(d["vocab_size"], vocab or want["vocab"])
        # 3 bits per weight of index bytes (§6), then headers, scales and alignment.
        h, w = want["hidden"], want["expert_width"]
        self.assertEqual(2 * index_bytes(w, h) + index_bytes(h, w), want["payload"])
        self.assertEqual(d["index_bits_per_weight"], 3.0)
        self.assertEqual(d["record_bytes"], record_geometry(h, w)[3])
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["format_version"], 3)
        self.assertEqual(manifest["expert_quant"],  # FORMAT.md, with no k-means for random contents
                         {"method": "rvq", "stages": 2, "entries": 64, "vec_dim": 4, "index_bits": 6,
                          "bits_per_weight": 3.0, "row_block": 32, "index_layout": "rowblock32.vector.split6",
                          "scale": "f16_row_absmax", "codebook_sharing": "layer.matrix.stage", "kmeans": None})
        self.assertEqual(manifest["codebooks"]["count"], 6 * len(manifest["moe_layers"]))
        self.assertEqual(manifest["codebooks"]["bytes"], manifest["codebooks"]["count"] * 1024)
        check_headers(self, out, manifest)
        dump = os.path.join(self.tmp, "logits.f32")
        run = sluice("run", out, "The river", "-n", "2", "--seed", "3", "--temp", "0.8", "--dump-logits", dump)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(dump, "rb") as f:
            raw = f.read()
        rows = len(raw) // 4 // d["vocab_size"]
        self.assertGreaterEqual(rows, 2)
        values = struct.unpack(f"<{len(raw) // 4}f", raw)
        self.assertTrue(all(math.isfinite(v) for v in values))
        # Random weights scaled to keep activations of order 1: logits are
        # neither all equal nor huge.
        self.assertGreater(max(values) - min(values), 1e-3)
        self.assertLess(max(abs(v) for v in values), 1e3)
        return d

    def test_olmoe_two_full_layers(self):
        out = os.path.join(self.tmp, "olmoe.sluice")
        summary = self.synth("olmoe-1b-7b", out, "--layers", "2")
        self.assertFalse(summary["already_complete"])
        d = self.check_container("olmoe-1b-7b", out, 2)
        self.assertEqual(d["moe_layers"], 2)
        self.assertEqual(d["records"], 2 * 64)
        # Rerunning finds it complete and writes nothing.
        self.assertTrue(self.synth("olmoe-1b-7b", out, "--layers", "2")["already_complete"])

    def test_cut_shapes_run_and_verify(self):
        for shape, cut in CUTS.items():
            with self.subTest(shape=shape):
                out = os.path.join(self.tmp, shape + ".sluice")
                self.synth(shape, out, *cut)
                d = self.check_container(shape, out, int(cut[1]), experts=16, vocab=4096)
                if shape == "kimi-linear-48b":
                    self.assertEqual(d["model"]["kda_layers"], [0, 1, 2])
                    self.assertEqual(d["moe_layers"], 3)  # layer 0 is dense
                shutil.rmtree(out)

    def test_same_seed_same_bytes(self):
        args = ["--layers", "2", "--experts", "8", "--vocab", "1024"]
        a, b, c = (os.path.join(self.tmp, n) for n in ("a.sluice", "b.sluice", "c.sluice"))
        self.synth("qwen3-30b-a3b", a, *args, "--seed", "5", "--threads", "1")
        self.synth("qwen3-30b-a3b", b, *args, "--seed", "5", "--threads", "2")
        self.synth("qwen3-30b-a3b", c, *args, "--seed", "6")
        ta, tb, tc = tree(a), tree(b), tree(c)
        self.assertEqual(ta, tb)
        for name in ("trunk.bin", "codebooks.bin", "experts-L000.bin", "experts-L001.bin"):
            self.assertNotEqual(ta[name], tc[name], name)
        # --head-quant q4 changes the LM head's format and nothing else the seed makes.
        d = os.path.join(self.tmp, "d.sluice")
        self.synth("qwen3-30b-a3b", d, *args, "--seed", "5", "--head-quant", "q4")
        td = tree(d)
        for name in ("codebooks.bin", "experts-L000.bin", "experts-L001.bin"):
            self.assertEqual(ta[name], td[name], name)
        formats = {t["name"]: t["format"] for t in json.loads(td["manifest.json"])["trunk"]["tensors"]}
        self.assertEqual(formats["lm_head.weight"], "q4g128")
        self.assertEqual(formats["model.embed_tokens.weight"], "q8g128")
        self.assertLess(len(td["trunk.bin"]), len(ta["trunk.bin"]))
        self.check_container("qwen3-30b-a3b", d, 2, experts=8, vocab=1024)

    def test_resume_after_kill_keeps_finished_banks(self):
        args = ["--layers", "2", "--experts", "8", "--vocab", "1024"]
        reference, out = os.path.join(self.tmp, "ref.sluice"), os.path.join(self.tmp, "resumed.sluice")
        self.synth("qwen3-30b-a3b", reference, *args)
        first_bank, second_bank = (os.path.join(out, f"experts-L00{i}.bin") for i in (0, 1))
        # Killed when it reports the second bank: the first is whole, the second
        # not yet (a run that got further first is run again).
        for _ in range(5):
            shutil.rmtree(out, ignore_errors=True)
            killed = kill_at_report([SLUICE, "synth", "qwen3-30b-a3b", out, *args], "layer 1")
            if killed and not os.path.exists(second_bank):  # written whole, then renamed
                break
        else:
            self.fail("synth wrote the second bank five times before it could be killed")
        self.assertTrue(os.path.exists(first_bank))
        self.assertFalse(os.path.exists(os.path.join(out, "manifest.json")))
        self.assertEqual(sluice("info", out).returncode, 1)  # refused: unfinished
        summary = self.synth("qwen3-30b-a3b", out, *args)
        self.assertEqual(summary["resumed_files"], 2)  # trunk.bin and experts-L000.bin
        self.assertEqual(tree(out), tree(reference))

    def test_full_configs_match_the_table(self):
        for shape, want in SHAPES.items():
            with self.subTest(shape=shape):
                run = sluice("synth", shape, "--print-config")
                self.assertEqual(run.returncode, 0, run.stderr)
                path = os.path.join(self.tmp, shape + ".json")
                with open(path, "w") as f:
                    f.write(run.stdout)
                config = json.loads(run.stdout)
                self.assertEqual(config["hidden_size"], want["hidden"])
                self.assertEqual(config["num_hidden_layers"], want["layers"])
                self.assertEqual(config["vocab_size"], want["vocab"])
                plan = sluice("plan", "--config", path, "--json")
                self.assertEqual(plan.returncode, 0, plan.stderr)

    def test_k3_cut_runs_and_verifies_with_latent_records(self):
        # k3.md §1.2, §7.1: hidden 7168, 896 experts of width 3072 in a 3584-wide latent, whose
        # record is 48 B of header, 12,386,304 B of indices, 19,456 B of scales: 3,029 pages.
        out = os.path.join(self.tmp, "k3.sluice")
        self.synth("k3", out, "--layers", "2", "--experts", "8", "--vocab", "4096", "--threads", "2")
        verify = sluice("verify", out)
        self.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)
        d = json.loads(sluice("info", out, "--json").stdout)
        self.assertEqual((d["arch"], d["layers"], d["hidden"], d["experts"], d["top_k"], d["expert_width"],
                          d["vocab_size"]), ("kimi_k3", 2, 7168, 8, 8, 3072, 4096))
        self.assertEqual(3 * 3072 * (3584 // 8) * 3, 12386304)
        self.assertEqual(d["record_bytes"], record_geometry(3584, 3072)[3])
        self.assertEqual(d["record_bytes"], 3029 * 4096)
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual([(m["layer"], m["hidden"]) for m in manifest["moe_layers"]], [(1, 3584)])
        check_headers(self, out, manifest)
        run = sluice("run", out, "The river", "-n", "1", "--temp", "0")
        self.assertEqual(run.returncode, 0, run.stderr)

    def test_k3_full_config_and_layer_cut(self):
        run = sluice("synth", "k3", "--print-config")
        self.assertEqual(run.returncode, 0, run.stderr)
        config = json.loads(run.stdout)
        self.assertEqual(config["architectures"], ["KimiK3ForConditionalGeneration"])
        text = config["text_config"]
        self.assertEqual((text["hidden_size"], text["num_hidden_layers"], text["num_experts"],
                          text["routed_expert_hidden_size"], text["vocab_size"]), (7168, 93, 896, 3584, 163840))
        self.assertEqual(len(text["linear_attn_config"]["kda_layers"]), 69)
        self.assertEqual(len(text["linear_attn_config"]["full_attn_layers"]), 24)
        path = os.path.join(self.tmp, "k3.json")
        with open(path, "w") as f:
            f.write(run.stdout)
        plan = sluice("plan", "--config", path, "--json")
        self.assertEqual(plan.returncode, 0, plan.stderr)
        cut = json.loads(sluice("synth", "k3", "--print-config", "--layers", "13", "--vocab", "1000").stdout)
        self.assertEqual(cut["text_config"]["num_hidden_layers"], 13)
        self.assertEqual(cut["text_config"]["linear_attn_config"]["full_attn_layers"], [4, 8, 12])
        self.assertEqual(cut["text_config"]["linear_attn_config"]["kda_layers"], [1, 2, 3, 5, 6, 7, 9, 10, 11, 13])
        self.assertEqual(cut["media_placeholder_token_id"], 999)  # ids past the cut move to its last id
        self.assertEqual(cut["text_config"]["eos_token_id"], 999)

    def test_layer_cut_keeps_kimi_pattern_consistent(self):
        run = sluice("synth", "kimi-linear-48b", "--print-config", "--layers", "9")
        self.assertEqual(run.returncode, 0, run.stderr)
        linear = json.loads(run.stdout)["linear_attn_config"]
        self.assertEqual(linear["kda_layers"], [1, 2, 3, 5, 6, 7, 9])
        self.assertEqual(linear["full_attn_layers"], [4, 8])

    def test_bad_requests_name_the_flag_and_leave_no_manifest(self):
        out = os.path.join(self.tmp, "bad.sluice")
        # An unknown shape is refused by the parser (status 2, with the other usage errors);
        # a cut the shape cannot take, once the shape is read (status 1).
        cases = [
            (["no-such-model", out], "no-such-model", 2),
            (["olmoe-1b-7b", out, "--layers", "17"], "--layers 17", 1),
            (["deepseek-v3", out, "--layers", "3"], "no MoE layer", 1),
            (["olmoe-1b-7b", out, "--experts", "65"], "--experts 65", 1),
            (["olmoe-1b-7b", out, "--vocab", "60000"], "--vocab 60000", 1),
        ]
        for args, named, status in cases:
            with self.subTest(args=args):
                run = sluice("synth", *args, "-q")
                self.assertEqual(run.returncode, status, run.stderr)
                self.assertIn(named, run.stderr)
                self.assertEqual(len(run.stderr.strip().splitlines()), 1, run.stderr)
                self.assertFalse(os.path.exists(os.path.join(out, "manifest.json")))
        os.makedirs(out)
        with open(os.path.join(out, "notes.txt"), "w") as f:
            f.write("mine")
        run = sluice("synth", "olmoe-1b-7b", out, "--layers", "1", "-q")
        self.assertEqual(run.returncode, 1)
        self.assertIn("--force", run.stderr)
        self.assertEqual(os.listdir(out), ["notes.txt"])


if __name__ == "__main__":
    unittest.main()
