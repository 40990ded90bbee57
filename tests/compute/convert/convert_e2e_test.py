#!/usr/bin/python3
# tests/compute/convert/convert_e2e_test.py: end-to-end tests of `sluice
# convert` on tiny checkpoints from scripts/make_tiny_checkpoint.py: the
# container matches FORMAT.md, output is byte-identical across runs, thread
# counts and kill-and-resume, and bad inputs fail without a manifest.
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

from kill_at_report import kill_at_report

SLUICE = os.environ["SLUICE_BIN"]
ROOT = os.environ["SLUICE_SOURCE_ROOT"]
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
MAKE = os.path.join(ROOT, "scripts", "make_tiny_checkpoint.py")
FAST = ["--kmeans-sample", "4096", "--kmeans-iters", "4"]


def make_checkpoint(family, out, *args):
    subprocess.run([PYTHON, MAKE, family, out, *args], check=True)
    return out


def convert(src, out, *args, env=None):
    return subprocess.run([SLUICE, "convert", src, out, "-q", *FAST, *args], capture_output=True, text=True,
                          env=env)


def tree(directory):
    files = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isdir(path):
            files[name + "/"] = tree(path)
        else:
            with open(path, "rb") as f:
                files[name] = f.read()
    return files


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return header, data


def write_safetensors(path, header, data):
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


class ConvertTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sluice-convert-e2e-")
        cls.olmoe = make_checkpoint("olmoe", os.path.join(cls.tmp, "olmoe"))
        cls.qwen = make_checkpoint("qwen3_moe", os.path.join(cls.tmp, "qwen"), "--shards", "2", "--dtype", "f16",
                                   "--set", "mlp_only_layers=[1]")
        cls.slow = make_checkpoint("olmoe", os.path.join(cls.tmp, "slow"), "--set", "num_hidden_layers=4")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def out(self, name):
        path = os.path.join(self.tmp, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def check_container(self, src, out):
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        with open(os.path.join(src, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(manifest["format_version"], 3)
        self.assertEqual({k: v for k, v in manifest["expert_quant"].items() if k != "kmeans"},
                         {"method": "rvq", "stages": 2, "entries": 64, "vec_dim": 4, "index_bits": 6,
                          "bits_per_weight": 3.0, "row_block": 32, "index_layout": "rowblock32.vector.split6",
                          "scale": "f16_row_absmax", "codebook_sharing": "layer.matrix.stage"})
        self.assertEqual(manifest["arch"], config["model_type"])
        self.assertEqual(manifest["config"], config)
        self.assertEqual(sorted(n for n in os.listdir(out)),
                         sorted(["manifest.json", "trunk.bin", "codebooks.bin", "tokenizer.json",
                                 "tokenizer_config.json", "tokenizer.bin"] + [m["file"] for m in manifest["moe_layers"]]))
        self.assertEqual(manifest["tokenizer"]["files"][-1], "tokenizer.bin")  # compiled, not copied
        for name in manifest["tokenizer"]["files"][:-1]:
            with open(os.path.join(src, name), "rb") as a, open(os.path.join(out, name), "rb") as b:
                self.assertEqual(a.read(), b.read())
        with open(os.path.join(src, "tokenizer_config.json")) as f:
            self.assertEqual(manifest["tokenizer"]["chat_template"], json.load(f).get("chat_template"))
        trunk = manifest["trunk"]
        self.assertEqual(os.path.getsize(os.path.join(out, "trunk.bin")), trunk["bytes"])
        for t in trunk["tensors"]:
            self.assertEqual(t["offset"] % 64, 0, t["name"])
            self.assertLessEqual(max(t["offset"] + t["bytes"], t["scale_offset"] + t["scale_bytes"]), trunk["bytes"])
        books = manifest["codebooks"]
        self.assertEqual(books["count"], 6 * len(manifest["moe_layers"]))
        self.assertEqual(os.path.getsize(os.path.join(out, "codebooks.bin")), books["bytes"])
        self.assertEqual(books["bytes"], books["count"] * 1024)
        for index, layer in enumerate(manifest["moe_layers"]):
            self.assertEqual(layer["codebook_base"], 6 * index)
            self.assertEqual(layer["experts"], config["num_experts"])
            stride = layer["record_stride"]
            self.assertEqual(stride % 4096, 0)
            path = os.path.join(out, layer["file"])
            self.assertEqual(os.path.getsize(path), layer["bytes"])
            self.assertEqual(layer["bytes"], layer["experts"] * stride)
            with open(path, "rb") as f:
                bank = f.read()
            for e in range(layer["experts"]):
                record = bank[e * stride:(e + 1) * stride]
                magic, version, layer_id, expert, book, rec_stride = struct.unpack_from("<IHHIII", record, 0)
                payload_end, crc = struct.unpack_from("<II", record, 36)
                self.assertEqual((magic, version, layer_id, expert, book, rec_stride),
                                 (0x52584C53, 2, layer["layer"], e, layer["codebook_base"], stride))
                self.assertEqual(crc, zlib.crc32(record[64:payload_end]))
        return manifest

    def test_both_families_convert(self):
        for src, layers, name in ((self.olmoe, [0, 1], "olmoe"), (self.qwen, [0, 2], "qwen")):
            out = self.out(name + ".sluice")
            run = convert(src, out, "--json")
            self.assertEqual(run.returncode, 0, run.stderr)
            summary = json.loads(run.stdout)
            manifest = self.check_container(src, out)
            self.assertEqual([m["layer"] for m in manifest["moe_layers"]], layers)
            self.assertEqual([m["layer"] for m in summary["layers"]], layers)
            for kind in ("gate", "up", "down"):
                self.assertGreater(summary["relative_error"][kind], 0.05)
                self.assertLess(summary["relative_error"][kind], 0.35)
            self.assertLess(summary["trunk_relative_error"]["q8g128"], 0.01)
            self.assertGreater(summary["weights_per_second"], 0)
            self.assertEqual(summary["container_bytes"], sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out)))
            print(f"{name}: relative error {summary['relative_error']}, {summary['weights_per_second']:.0f} weights/s",
                  file=sys.stderr)
        names = [t["name"] for t in manifest["trunk"]["tensors"]]
        self.assertIn("model.layers.1.mlp.down_proj.weight", names)  # qwen's dense layer

    def test_each_source_byte_is_read_once(self):
        # The converter counts what it reads from the shards; expected here from their headers: every
        # header once and every tensor the model runs once (K3's vision tower only when the config
        # has a vision_config: without one it is skipped, not read).
        k3 = make_checkpoint("kimi_k3", os.path.join(self.tmp, "k3-mxfp4"), "--mxfp4", "--shards", "2")
        for src, name in ((self.qwen, "qwen"), (k3, "k3")):
            shards = sorted(n for n in os.listdir(src) if n.endswith(".safetensors"))
            self.assertEqual(len(shards), 2)
            with open(os.path.join(src, "config.json")) as f:
                skipped = () if "vision_config" in json.load(f) else ("vision_tower.", "mm_projector.")
            expected, size = 0, 0
            for shard in shards:
                path = os.path.join(src, shard)
                header, _ = read_header(path)
                with open(path, "rb") as f:
                    expected += 8 + struct.unpack("<Q", f.read(8))[0]
                expected += sum(t["data_offsets"][1] - t["data_offsets"][0] for n, t in header.items()
                                if n != "__metadata__" and not (skipped and n.startswith(skipped)))
                size += os.path.getsize(path)
            out = self.out(name + "-once.sluice")
            run = convert(src, out, "--json", "--threads", "2")
            self.assertEqual(run.returncode, 0, run.stderr)
            summary = json.loads(run.stdout)
            self.assertEqual(summary["source_bytes"], size, name)
            self.assertEqual(summary["source_bytes_read"], expected, name)

    def test_byte_identical_across_runs_and_threads(self):
        a, b, c = self.out("det-a"), self.out("det-b"), self.out("det-c")
        self.assertEqual(convert(self.qwen, a, "--threads", "2").returncode, 0)
        self.assertEqual(convert(self.qwen, b, "--threads", "2").returncode, 0)
        self.assertEqual(convert(self.qwen, c, "--threads", "1").returncode, 0)
        self.assertEqual(tree(a), tree(b))
        self.assertEqual(tree(a), tree(c))
        run = convert(self.qwen, a)
        self.assertEqual(run.returncode, 0, run.stderr)  # already complete: a no-op
        self.assertEqual(tree(a), tree(c))

    def test_byte_identical_across_instruction_sets(self):
        # The nearest-code search and row normalisation have a scalar, an AVX2
        # and an AVX-512 path; MXFP4 experts go through all of them.
        k3 = make_checkpoint("kimi_k3", os.path.join(self.tmp, "k3-isa"), "--mxfp4")
        trees = {}
        for isa in ("scalar", "avx2", "avx512"):
            for threads in ("1", "3"):
                out = self.out(f"isa-{isa}-{threads}")
                run = convert(k3, out, "--json", "--threads", threads, env=dict(os.environ, SLUICE_KERNELS=isa))
                if run.returncode != 0 and "SLUICE_KERNELS" in run.stderr:
                    break  # this machine cannot run `isa`
                self.assertEqual(run.returncode, 0, run.stderr)
                self.assertEqual(json.loads(run.stdout)["search"], isa)
                trees[(isa, threads)] = tree(out)
        for key, files in trees.items():
            self.assertEqual(files, trees[("scalar", "1")], key)

    def kill_at(self, out, report, src=None):
        """Kills a conversion into `out` when it reports `report` (a phase of
        its progress); a run that got to the end first is run again."""
        for _ in range(5):
            shutil.rmtree(out, ignore_errors=True)
            killed = kill_at_report([SLUICE, "convert", src or self.slow, out, *FAST], report)
            if killed and not os.path.exists(os.path.join(out, "manifest.json")):
                return
        self.fail(f"convert finished five times before it could be killed at {report!r}")

    def test_resume_after_kill_is_byte_identical(self):
        reference = self.out("resume-reference")
        self.assertEqual(convert(self.slow, reference).returncode, 0)
        points = {  # label: (the progress phase to stop at, layers the rerun must find finished at least)
            "during-trunk": ("trunk", 0),
            "encoding-first-layer": ("layer 0: encoding", 0),
            "after-second-layer": ("layer 2: reading", 2),
        }
        for label, (report, finished) in points.items():
            out = self.out("resume-" + label)
            self.kill_at(out, report)
            run = convert(self.slow, out, "--json")
            self.assertEqual(run.returncode, 0, run.stderr)
            summary = json.loads(run.stdout)
            self.assertGreaterEqual(summary["resumed_layers"], finished, label)
            # A finished piece is read once to check it, the rest once to convert: never twice.
            self.assertLessEqual(summary["source_bytes_read"], summary["source_bytes"], label)
            self.assertEqual(tree(out), tree(reference), label)

    def test_resume_over_changed_source_values_redoes_that_layer(self):
        src = os.path.join(self.tmp, "changing")
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(self.slow, src)
        out = self.out("resume-changed")
        self.kill_at(out, "layer 2: reading", src=src)
        # New values for one expert of layer 0; header and size stay as they were.
        path = os.path.join(src, "model.safetensors")
        with open(path, "r+b") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            begin = header["model.layers.0.mlp.experts.3.up_proj.weight"]["data_offsets"][0]
            f.seek(8 + n + begin)
            f.write(struct.pack("<4H", 0x3f00, 0xbf00, 0x3e80, 0x4000))  # bf16 0.5, -0.5, 0.25, 2
        run = convert(src, out, "--json")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("layer 0: the source tensors changed since the interrupted run; converting it again",
                      run.stderr)
        self.assertNotIn("layer 1: the source", run.stderr)
        self.assertEqual(json.loads(run.stdout)["restarted"], [0])
        fresh = self.out("resume-changed-fresh")
        self.assertEqual(convert(src, fresh).returncode, 0)
        self.assertEqual(tree(out), tree(fresh))

    def test_other_parameters_refused_then_forced(self):
        out = self.out("force")
        self.kill_at(out, "layer 0: encoding")
        run = convert(self.slow, out, "--seed", "7")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("--force", run.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "manifest.json")))
        self.assertEqual(convert(self.slow, out, "--seed", "7", "--force").returncode, 0)
        fresh = self.out("force-fresh")
        self.assertEqual(convert(self.slow, fresh, "--seed", "7").returncode, 0)
        self.assertEqual(tree(out), tree(fresh))
        run = convert(self.olmoe, out)  # a finished container of another source
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("different source", run.stderr)

    def test_finished_container_of_an_older_format_is_refused_then_forced(self):
        out, fresh = self.out("older"), self.out("older-fresh")
        self.assertEqual(convert(self.olmoe, fresh).returncode, 0)
        shutil.copytree(fresh, out)
        path = os.path.join(out, "manifest.json")
        with open(path) as f:
            manifest = json.load(f)
        manifest["format_version"] = 2  # the same source and parameters, the 8-weight layout
        with open(path, "w") as f:
            json.dump(manifest, f)
        run = convert(self.olmoe, out)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn(f"{out}: holds a container of format_version 2 (this build writes 3); use --force",
                      run.stderr)
        run = convert(self.olmoe, out, "--force", "--json")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertFalse(json.loads(run.stdout)["already_complete"])
        self.assertEqual(tree(out), tree(fresh))

    def test_head_quant_stores_only_the_lm_head_in_that_format(self):
        def formats(out):
            with open(os.path.join(out, "manifest.json")) as f:
                return {t["name"]: t["format"] for t in json.load(f)["trunk"]["tensors"]}

        default, q8, q4 = self.out("head-default"), self.out("head-q8"), self.out("head-q4")
        self.assertEqual(convert(self.olmoe, default).returncode, 0)
        self.assertEqual(convert(self.olmoe, q8, "--head-quant", "q8").returncode, 0)
        self.assertEqual(convert(self.olmoe, q4, "--head-quant", "q4").returncode, 0)
        self.assertEqual(tree(default), tree(q8))
        self.check_container(self.olmoe, q4)
        self.assertEqual(formats(q8)["lm_head.weight"], "q8g128")
        self.assertEqual(formats(q4)["lm_head.weight"], "q4g128")
        self.assertEqual({k: v for k, v in formats(q4).items() if k != "lm_head.weight"},
                         {k: v for k, v in formats(q8).items() if k != "lm_head.weight"})
        for name in os.listdir(q8):  # experts and codebooks do not depend on the head
            if name.startswith("experts-") or name == "codebooks.bin":
                self.assertEqual(tree(q8)[name], tree(q4)[name], name)
        self.assertLess(os.path.getsize(os.path.join(q4, "trunk.bin")), os.path.getsize(os.path.join(q8, "trunk.bin")))
        run = subprocess.run([SLUICE, "run", q4, "--prompt-ids", "5,17,200", "-n", "2", "--temp", "0", "--json"],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(len(json.loads(run.stdout)["tokens"]), 2)
        # A finished container with the other head is not taken for this run's.
        run = convert(self.olmoe, q4)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("different parameters", run.stderr)
        self.assertEqual(formats(q4)["lm_head.weight"], "q4g128")
        self.assertTrue(json.loads(convert(self.olmoe, q4, "--head-quant", "q4", "--json").stdout)["already_complete"])
        run = convert(self.olmoe, self.out("head-bad"), "--head-quant", "q2")
        self.assertEqual(run.returncode, 2)
        self.assertIn("--head-quant", run.stderr)

    def damaged_copy(self, name):
        src = os.path.join(self.tmp, "bad-" + name)
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(self.olmoe, src)
        return src

    def edit_header(self, src, edit):
        path = os.path.join(src, "model.safetensors")
        header, data = read_header(path)
        edit(header)
        write_safetensors(path, header, data)

    def expect_failure(self, src, *fragments):
        out = self.out("bad.sluice")
        run = convert(src, out)
        self.assertNotEqual(run.returncode, 0)
        for fragment in fragments:
            self.assertIn(fragment, run.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "manifest.json")))

    def test_bad_inputs_fail_without_manifest(self):
        expert = "model.layers.1.mlp.experts.3.up_proj.weight"
        src = self.damaged_copy("missing")
        self.edit_header(src, lambda h: h.pop(expert))
        self.expect_failure(src, "model.safetensors", expert, "missing", "[64, 128]")

        src = self.damaged_copy("shape")
        self.edit_header(src, lambda h: h[expert].update(shape=[128, 64]))
        self.expect_failure(src, "model.safetensors", expert, "[128, 64]", "[64, 128]")

        src = self.damaged_copy("dtype")
        def to_fp8(h):
            begin = h[expert]["data_offsets"][0]
            h[expert].update(dtype="F8_E4M3", data_offsets=[begin, begin + 64 * 128])
        self.edit_header(src, to_fp8)
        # An fp8 weight is read only with its block scales (architectures.md §0.9).
        self.expect_failure(src, f"fp8 tensor {expert} has no block scale tensor {expert}_scale_inv")

        src = self.damaged_copy("dtype")
        self.edit_header(src, lambda h: h[expert].update(dtype="I16"))
        self.expect_failure(src, f"model.safetensors: tensor {expert}: unsupported dtype I16")

        src = self.damaged_copy("truncated")
        path = os.path.join(src, "model.safetensors")
        os.truncate(path, os.path.getsize(path) - 100)
        self.expect_failure(src, "model.safetensors: tensor ", "outside")

        src = self.damaged_copy("config")
        with open(os.path.join(src, "config.json"), "w") as f:
            f.write('{"model_type": "olmoe",')
        self.expect_failure(src, "config.json", "not valid JSON")

        src = self.damaged_copy("type")
        with open(os.path.join(src, "config.json")) as f:
            config = json.load(f)
        config["model_type"] = "gpt2"
        with open(os.path.join(src, "config.json"), "w") as f:
            json.dump(config, f)
        self.expect_failure(src, "config.json", "model_type gpt2 is not supported")

        src = self.damaged_copy("nan")
        path = os.path.join(src, "model.safetensors")
        header, data = read_header(path)
        begin = header[expert]["data_offsets"][0]
        data = data[:begin] + b"\xc0\x7f" + data[begin + 2:]  # bf16 NaN as the first element
        write_safetensors(path, header, data)
        self.expect_failure(src, expert, "non-finite")

    def test_help_lists_every_flag(self):
        run = subprocess.run([SLUICE, "convert", "--help"], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0)
        for flag in ("--threads", "--seed", "--kmeans-sample", "--kmeans-iters", "--head-quant", "--json", "--quiet",
                     "--force"):
            self.assertIn(flag, run.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
