# tests/scripts/test_container.py: sluicepy.container against a container this
# test assembles byte by byte from proto/FORMAT.md (so it runs without the C++
# converter): exact decoding, header and crc checks, and the refusals.
import json
import os
import struct
import unittest
import zlib

import numpy as np

import helpers
from sluicepy import SluiceError, container

# Gate and up: 40 rows, a full 32-row block and a partial one using both halves.
HIDDEN, WIDTH, EXPERTS, LAYER = 16, 40, 3, 1


def align(x, a):
    return (x + a - 1) // a * a


def store_code(indices, r, v, s, nv, code):
    """Writes the 6-bit code of (row r, vector v, stage s) into one matrix's index
    bytes, bit by bit as FORMAT.md's layout rowblock32.vector.split6 says."""
    unit = (r // 32 * nv + v) * 48
    i, h = r % 16, r % 32 // 16
    indices[unit + 16 * s + i] |= (code & 15) << (4 * h)
    indices[unit + 32 + i] |= (code >> 4) << (4 * s + 2 * h)


class Synthetic:
    """Writes a one-MoE-layer container and remembers what every value must decode to."""

    def __init__(self, path, rng):
        self.path = path
        os.makedirs(path)
        # One codebook per (kind, stage), 64 entries of 4, at base + kind·2 + stage.
        self.codebooks = rng.standard_normal((6, 64, 4)).astype(np.float32)
        self.codebooks.astype("<f4").tofile(os.path.join(path, "codebooks.bin"))
        shapes = [(WIDTH, HIDDEN), (WIDTH, HIDDEN), (HIDDEN, WIDTH)]
        offsets, cursor = [], 64
        for rows, cols in shapes:
            offsets.append(cursor)
            cursor = align(cursor + align(rows, 32) * (cols // 4) * 12 // 8, 64)  # 2 x 6 bits per 4 weights
        scales_off = cursor
        payload_end = scales_off + 2 * sum(align(r, 32) for r, _ in shapes)
        self.stride = align(payload_end, 4096)
        self.expected = {}
        self.indices = {}  # (expert, kind) -> (codes [rows, nv, 2], the matrix's index bytes)
        bank = bytearray()
        for e in range(EXPERTS):
            record = bytearray(self.stride)
            scale_cursor = scales_off
            for k, (rows, cols) in enumerate(shapes):
                nv = cols // 4
                idx = rng.integers(0, 64, size=(rows, nv, 2))
                scales = (rng.random(rows) + 0.5).astype(np.float16)
                scales[0] = 0  # an all-zero row keeps scale 0
                indices = bytearray(align(rows, 32) * nv * 12 // 8)
                w = np.zeros((rows, cols), np.float32)
                for r in range(rows):
                    for v in range(nv):
                        for s in range(2):
                            store_code(indices, r, v, s, nv, int(idx[r, v, s]))
                        for j in range(4):
                            total = np.float32(self.codebooks[2 * k, idx[r, v, 0], j]
                                               + self.codebooks[2 * k + 1, idx[r, v, 1], j])
                            w[r, 4 * v + j] = np.float32(total * np.float32(scales[r]))
                record[offsets[k]:offsets[k] + len(indices)] = indices
                self.indices[(e, container.KINDS[k])] = (idx, bytes(indices))
                record[scale_cursor:scale_cursor + 2 * rows] = scales.astype("<f2").tobytes()
                scale_cursor += 2 * align(rows, 32)
                self.expected[(e, container.KINDS[k])] = w
            crc = zlib.crc32(bytes(record[64:payload_end]))
            struct.pack_into("<IHHIIIIIIIII", record, 0, 0x52584C53, 2, LAYER, e, 0, self.stride,
                             *offsets, scales_off, payload_end, crc)
            bank += record
        with open(os.path.join(path, f"experts-L{LAYER:03d}.bin"), "wb") as f:
            f.write(bank)
        self.trunk_expected, tensors, trunk = {}, [], bytearray()

        def place(data):
            nonlocal trunk
            trunk += bytes(align(len(trunk), 64) - len(trunk))
            at = len(trunk)
            trunk += data
            return at

        # q8g128 [3, 130]: 2 groups per row, padding zeros.
        q8 = rng.integers(-127, 128, size=(3, 256)).astype(np.int8)
        q8[:, 130:] = 0
        s8 = (rng.random((3, 2)) * 0.01).astype(np.float16)
        off = place(q8.tobytes())
        soff = place(s8.astype("<f2").tobytes())
        tensors.append({"name": "model.embed_tokens.weight", "format": "q8g128", "shape": [3, 130], "offset": off,
                        "bytes": 3 * 256, "scale_offset": soff, "scale_bytes": 12})
        self.trunk_expected["model.embed_tokens.weight"] = np.array(
            [[np.float32(q8[r, c]) * np.float32(s8[r, c // 128]) for c in range(130)] for r in range(3)], np.float32)
        # q4g128 [2, 200]: element 2i low nibble, 2i+1 high nibble, nibble = q + 8.
        q4 = rng.integers(-8, 8, size=(2, 256))
        q4[:, 200:] = 0
        packed = ((q4[:, 0::2] + 8) | ((q4[:, 1::2] + 8) << 4)).astype(np.uint8)
        s4 = (rng.random((2, 2)) * 0.01).astype(np.float16)
        off = place(packed.tobytes())
        soff = place(s4.astype("<f2").tobytes())
        tensors.append({"name": "model.layers.0.self_attn.q_proj.weight", "format": "q4g128", "shape": [2, 200],
                        "offset": off, "bytes": 256, "scale_offset": soff, "scale_bytes": 8})
        self.trunk_expected["model.layers.0.self_attn.q_proj.weight"] = np.array(
            [[np.float32(q4[r, c]) * np.float32(s4[r, c // 128]) for c in range(200)] for r in range(2)], np.float32)
        norm = rng.standard_normal(HIDDEN).astype(np.float32)
        off = place(norm.astype("<f4").tobytes())
        tensors.append({"name": "model.norm.weight", "format": "f32", "shape": [HIDDEN], "offset": off,
                        "bytes": 4 * HIDDEN, "scale_offset": 0, "scale_bytes": 0})
        self.trunk_expected["model.norm.weight"] = norm
        # q6g128 [3, 200]: per 32 columns 24 bytes; byte i < 16 holds u = q + 32's low
        # four bits of column i (low nibble) and 16 + i (high), byte 16 + j the top
        # two bits of columns j, j + 8, j + 16, j + 24 at bits 0, 2, 4, 6.
        q6 = rng.integers(-32, 32, size=(3, 256))
        q6[:, 200:] = 0
        packed6 = bytearray(3 * 192)
        for r in range(3):
            for c in range(256):
                u, block, p = int(q6[r, c]) + 32, r * 192 + c // 32 * 24, c % 32
                packed6[block + p % 16] |= (u & 0x0F) << (0 if p < 16 else 4)
                packed6[block + 16 + p % 8] |= (u >> 4) << (2 * (p // 8))
        s6 = (rng.random((3, 2)) * 0.01).astype(np.float16)
        off = place(bytes(packed6))
        soff = place(s6.astype("<f2").tobytes())
        tensors.append({"name": "lm_head.weight", "format": "q6g128", "shape": [3, 200],
                        "offset": off, "bytes": 3 * 192, "scale_offset": soff, "scale_bytes": 12})
        self.trunk_expected["lm_head.weight"] = np.array(
            [[np.float32(q6[r, c]) * np.float32(s6[r, c // 128]) for c in range(200)] for r in range(3)], np.float32)
        with open(os.path.join(path, "trunk.bin"), "wb") as f:
            f.write(trunk)
        config = {"model_type": "olmoe", "num_hidden_layers": 2, "num_experts": EXPERTS, "num_experts_per_tok": 2,
                  "hidden_size": HIDDEN, "intermediate_size": WIDTH, "vocab_size": 3}
        self.manifest = {
            "format": "sluice", "format_version": 3, "arch": "olmoe", "config": config,
            "source": {"files": [], "config_crc32": 0},
            "expert_quant": {"method": "rvq", "stages": 2, "entries": 64, "vec_dim": 4, "index_bits": 6,
                             "bits_per_weight": 3.0, "row_block": 32, "index_layout": "rowblock32.vector.split6",
                             "scale": "f16_row_absmax", "codebook_sharing": "layer.matrix.stage"},
            "trunk": {"file": "trunk.bin", "bytes": len(trunk), "tensors": tensors},
            "codebooks": {"file": "codebooks.bin", "bytes": 6 * 1024, "count": 6},
            "moe_layers": [{"layer": LAYER, "file": f"experts-L{LAYER:03d}.bin", "experts": EXPERTS,
                            "record_stride": self.stride, "bytes": EXPERTS * self.stride, "codebook_base": 0,
                            "hidden": HIDDEN, "expert_width": WIDTH}],
            "tokenizer": {"files": [], "chat_template": None}}
        self.write_manifest()

    def write_manifest(self):
        with open(os.path.join(self.path, "manifest.json"), "w") as f:
            json.dump(self.manifest, f)

    def patch_bank(self, offset, data):
        with open(os.path.join(self.path, f"experts-L{LAYER:03d}.bin"), "r+b") as f:
            f.seek(offset)
            f.write(data)


class ContainerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = helpers.scratch()
        self.c = Synthetic(os.path.join(self.tmp.name, "m.sluice"), np.random.default_rng(11))

    def tearDown(self):
        self.tmp.cleanup()

    def test_decodes_experts_exactly(self):
        reader = container.Container(self.c.path)
        for e in range(EXPERTS):
            for kind, matrix in reader.expert(LAYER, e, verify_crc=True).items():
                np.testing.assert_array_equal(matrix, self.c.expected[(e, kind)])

    def test_pack_codes_writes_the_layout_the_reader_reads(self):
        # container_writer.py and test_rvq_model.py store codes through pack_codes.
        for (e, kind), (codes, stored) in self.c.indices.items():
            with self.subTest(expert=e, kind=kind):
                self.assertEqual(container.pack_codes(codes), stored)
                rows, cols = codes.shape[0], codes.shape[1] * 4
                np.testing.assert_array_equal(container.unpack_codes(np.frombuffer(stored, np.uint8), rows, cols),
                                              codes)
        with self.assertRaisesRegex(SluiceError, "below 64"):
            container.pack_codes(np.full((1, 2, 2), 64))

    def test_dequantizes_trunk_exactly(self):
        reader = container.Container(self.c.path)
        for name, want in self.c.trunk_expected.items():
            np.testing.assert_array_equal(reader.trunk_tensor(name), want)

    def test_dump_expert_cli_writes_rows_by_cols_f32(self):
        out = os.path.join(self.tmp.name, "down.f32")
        helpers.run_script(None, "-m", "sluicepy.container", "dump-expert", self.c.path, "--layer", str(LAYER),
                           "--expert", "2", "--matrix", "down", "--out", out)
        got = np.fromfile(out, dtype="<f4").reshape(HIDDEN, WIDTH)
        np.testing.assert_array_equal(got, self.c.expected[(2, "down")])

    def test_missing_manifest_means_incomplete(self):
        os.remove(os.path.join(self.c.path, "manifest.json"))
        with self.assertRaisesRegex(SluiceError, "incomplete container: conversion did not finish"):
            container.Container(self.c.path)
        result = helpers.run_script(None, "-m", "sluicepy.container", "verify", self.c.path, check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("incomplete container: conversion did not finish", result.stderr)

    def test_other_format_version_is_named(self):
        self.c.manifest["format_version"] = 7
        self.c.write_manifest()
        with self.assertRaisesRegex(SluiceError, r"format_version 7 is not supported \(this reader reads 3\)$"):
            container.Container(self.c.path)
        # Format 2 stored 8-weight codes in 3 stages of 256 entries: only a new conversion helps.
        self.c.manifest["format_version"] = 2
        self.c.write_manifest()
        with self.assertRaisesRegex(SluiceError, "format_version 2 is not supported .*convert the checkpoint again"):
            container.Container(self.c.path)

    def test_unknown_arch_and_bound_violations(self):
        cases = [(("arch",), "mixtral9", "unknown arch"),
                 (("moe_layers", 0, "codebook_base"), 1, "codebook_base 1"),
                 (("moe_layers", 0, "record_stride"), 8192, "record_stride 8192"),
                 (("moe_layers", 0, "experts"), 2, "bytes"),
                 (("codebooks", "count"), 10, "codebooks count 10"),
                 (("config", "num_experts"), 5000, "num_experts 5000"),
                 (("trunk", "tensors", 2, "offset"), 1 << 20, "outside"),
                 (("moe_layers", 0, "file"), "../trunk.bin", "not a plain file name")]
        original = json.loads(json.dumps(self.c.manifest))
        for path, value, message in cases:
            with self.subTest(path=path):
                self.c.manifest = json.loads(json.dumps(original))
                target = self.c.manifest
                for key in path[:-1]:
                    target = target[key]
                target[path[-1]] = value
                self.c.write_manifest()
                with self.assertRaisesRegex(SluiceError, message):
                    container.Container(self.c.path)

    def test_f32_tensors_keep_their_hf_shape_up_to_4d(self):
        # Kimi-Linear's conv weights [P, 1, K] and A_log [1, 1, H, 1] stay as the checkpoint has them.
        norm = self.c.manifest["trunk"]["tensors"][2]
        for shape in ([HIDDEN // 4, 1, 4], [1, 1, HIDDEN, 1]):
            with self.subTest(shape=shape):
                norm["shape"] = shape
                self.c.write_manifest()
                got = container.Container(self.c.path).trunk_tensor("model.norm.weight")
                np.testing.assert_array_equal(got, self.c.trunk_expected["model.norm.weight"].reshape(shape))
        for tensor, shape, message in ((2, [1, 1, 1, 1, HIDDEN], "bad shape"), (2, [HIDDEN, 2, 1], "bytes"),
                                       (1, [2, 1, 200], "format 'q4g128' with shape \\[2, 1, 200\\]")):
            with self.subTest(shape=shape):
                original = self.c.manifest["trunk"]["tensors"][tensor]["shape"]
                self.c.manifest["trunk"]["tensors"][tensor]["shape"] = shape
                self.c.write_manifest()
                with self.assertRaisesRegex(SluiceError, message):
                    container.Container(self.c.path)
                self.c.manifest["trunk"]["tensors"][tensor]["shape"] = original

    def test_record_header_checks_name_the_record(self):
        self.c.patch_bank(self.c.stride * 1 + 4, struct.pack("<H", 1))  # format 2's record version
        with self.assertRaisesRegex(SluiceError, "layer 1 expert 1: header format version mismatch "
                                                 r"\(found 1, expected 2\)"):
            container.Container(self.c.path).expert(LAYER, 1)
        self.c.patch_bank(self.c.stride * 1, b"XXXX")
        reader = container.Container(self.c.path)
        reader.expert(LAYER, 0)
        with self.assertRaisesRegex(SluiceError, "layer 1 expert 1: header magic mismatch"):
            reader.expert(LAYER, 1)
        self.c.patch_bank(self.c.stride * 2 + 8, struct.pack("<I", 0))
        with self.assertRaisesRegex(SluiceError, "layer 1 expert 2: header expert id mismatch"):
            reader.expert(LAYER, 2)

    def test_crc_is_checked_only_when_asked(self):
        self.c.patch_bank(200, b"\x01")
        reader = container.Container(self.c.path)
        reader.expert(LAYER, 0)
        with self.assertRaisesRegex(SluiceError, "layer 1 expert 0: payload crc32 mismatch"):
            reader.expert(LAYER, 0, verify_crc=True)


if __name__ == "__main__":
    unittest.main()
