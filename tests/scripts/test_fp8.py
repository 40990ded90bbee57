# tests/scripts/test_fp8.py: sluicepy.fp8 against architectures.md §0.9: every
# one of the 256 e4m3fn bytes decodes by the stated rules, encoding rounds to the
# nearest code with ties to even, and 128x128 block scales (partial edge blocks)
# dequantize; the checkpoint loader refuses an fp8 weight without a proper scale.
import math
import os
import unittest

import numpy as np

import helpers
from sluicepy import SluiceError, fp8, safetensors


def rule(byte):
    """§0.9 written out: sign bit 7, exponent bits 6..3 (bias 7), mantissa bits 2..0."""
    sign = -1.0 if byte >= 128 else 1.0
    e, m = (byte % 128) // 8, byte % 8
    if e == 15 and m == 7:
        return math.nan
    if e == 0:
        return sign * math.ldexp(m, -9)  # (m/8)·2^-6
    return sign * math.ldexp(8 + m, e - 10)  # (1 + m/8)·2^(e-7)


class Fp8Test(unittest.TestCase):
    def test_all_256_bytes_decode_by_the_rules(self):
        decoded = fp8.decode(np.arange(256, dtype=np.uint8))
        for byte in range(256):
            want = rule(byte)
            if math.isnan(want):
                self.assertTrue(math.isnan(decoded[byte]), hex(byte))
            else:
                self.assertEqual(float(decoded[byte]), want, hex(byte))
        self.assertEqual([hex(b) for b in range(256) if math.isnan(decoded[b])], ["0x7f", "0xff"])
        self.assertEqual(float(np.nanmax(decoded)), 448.0)
        self.assertEqual((float(decoded[0x38]), float(decoded[0xB8]), float(decoded[0x01])), (1.0, -1.0, 2.0 ** -9))
        self.assertTrue(math.copysign(1.0, float(decoded[0x80])) < 0 and decoded[0x80] == 0)

    def test_encode_is_the_inverse_on_every_code_and_rounds_ties_to_even(self):
        codes = np.array([b for b in range(256) if b not in (0x7F, 0xFF)], dtype=np.uint8)
        np.testing.assert_array_equal(fp8.encode(fp8.decode(codes)), codes)
        # 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39): the even code wins;
        # 1.1875 is halfway between 0x39 and 1.25 (0x3A): again the even one.
        ties = fp8.encode(np.array([1.0625, 1.1875, -1.0625, 1.06, 1.07], np.float32))
        self.assertEqual(ties.tolist(), [0x38, 0x3A, 0xB8, 0x38, 0x39])
        # Halfway between the two smallest subnormals (2^-9 and 2^-8) -> 2^-8 (code 2, even).
        self.assertEqual(fp8.encode(np.float32([1.5 * 2 ** -9]))[()], 0x02)
        self.assertEqual(fp8.encode(np.float32([460.0, np.nan]))[:].tolist(), [0x7E, 0x7F])
        with self.assertRaisesRegex(SluiceError, "w.*exceeds the e4m3 range"):
            fp8.encode(np.float32([464.0]), "w")

    def test_block_scales_cover_partial_edge_blocks(self):
        rng = np.random.default_rng(3)
        w = rng.standard_normal((130, 300)).astype(np.float32)
        scales = fp8.block_scales(w)
        self.assertEqual(scales.shape, (2, 3))
        self.assertEqual(float(scales[1, 2]), float(np.float32(np.abs(w[128:, 256:]).max() / 448)))
        self.assertEqual(float(scales[0, 1]), float(np.float32(np.abs(w[:128, 128:256]).max() / 448)))
        codes = fp8.encode(w / fp8.expand_scales(scales, w.shape))
        back = fp8.dequantize(fp8.decode(codes), scales)
        # e4m3 keeps 3 mantissa bits: relative error <= 2^-4, plus the subnormal step of each block.
        bound = np.abs(w) * 2 ** -4 + fp8.expand_scales(scales, w.shape) * 2 ** -10
        self.assertTrue(np.all(np.abs(back - w) <= bound))
        self.assertEqual(float(back[129, 299]), float(fp8.decode(codes[129, 299]) * scales[1, 2]))
        with self.assertRaisesRegex(SluiceError, r"x_scale_inv: shape \[2, 2\].*needs \[2, 3\]"):
            fp8.dequantize(fp8.decode(codes), scales[:, :2], "x")

    def test_loader_dequantizes_and_refuses_a_missing_or_wrong_scale(self):
        w = np.array([[1.0, -2.0], [0.5, 448.0]], np.float32)
        with helpers.scratch() as d:
            path = os.path.join(d, "model.safetensors")
            safetensors.save_file(path, {"a.weight": w, "a.weight_scale_inv": np.float32([[0.25]])},
                                  {"a.weight": "F8_E4M3", "a.weight_scale_inv": "F32"})
            got = safetensors.load_checkpoint(d)
            self.assertEqual(list(got), ["a.weight"])
            np.testing.assert_array_equal(got["a.weight"], w * 0.25)
            safetensors.save_file(path, {"a.weight": w}, "F8_E4M3")
            with self.assertRaisesRegex(SluiceError, "F8_E4M3 tensor a.weight has no a.weight_scale_inv"):
                safetensors.load_checkpoint(d)
            safetensors.save_file(path, {"a.weight": w, "a.weight_scale_inv": np.float32([[1.0]])},
                                  {"a.weight": "F8_E4M3", "a.weight_scale_inv": "BF16"})
            with self.assertRaisesRegex(SluiceError, "a.weight_scale_inv is BF16, a block scale must be F32"):
                safetensors.load_checkpoint(d)
            safetensors.save_file(path, {"b.weight": w, "b.weight_scale_inv": np.float32([[1.0]])}, "F32")
            with self.assertRaisesRegex(SluiceError, "b.weight_scale_inv scales a tensor that is not F8_E4M3"):
                safetensors.load_checkpoint(d)


if __name__ == "__main__":
    unittest.main()
