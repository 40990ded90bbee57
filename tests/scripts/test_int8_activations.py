# tests/scripts/test_int8_activations.py: sluicepy.int8_activations models
# quant.h's int8 activations: per group of 128, d = amax/127 and round half to
# even, and only products with a registered trunk matrix are quantized.
import unittest

import numpy as np
import torch

import helpers  # noqa: F401 (puts scripts/ on the path)
from sluicepy.int8_activations import quantize_dequantize, with_int8_activations


class QuantizeTest(unittest.TestCase):
    def test_ties_round_to_even_and_zero_groups_stay_zero(self):
        # Group 0: amax 127, so x · 127/amax = x and every k.5 is a tie.
        group = [127.0, 2.5, 3.5, -2.5, -0.5, 0.5, 1.25] + [0.0] * 121
        x = torch.tensor([group + [0.0] * 128 + [4.0, -2.0]], dtype=torch.float32)  # 258 columns: a partial group
        out = quantize_dequantize(x)[0].numpy()
        np.testing.assert_array_equal(out[:7], [127.0, 2.0, 4.0, -2.0, 0.0, 0.0, 1.0])
        np.testing.assert_array_equal(out[128:256], np.zeros(128))
        # Group 2 holds 4 and -2 only: d = 4/127, -2 · 127/4 = -63.5 rounds to -64.
        d = np.float32(4.0) / np.float32(127.0)
        self.assertEqual(out.shape, (258,))
        np.testing.assert_allclose(out[256:], [127 * float(d), -64 * float(d)], rtol=1e-7)  # x's f32

    def test_each_row_has_its_own_scales(self):
        x = torch.tensor([[1.0] * 128, [1000.0] + [1.0] * 127])
        out = quantize_dequantize(x).numpy()
        np.testing.assert_array_equal(out[0], np.ones(128))
        np.testing.assert_array_equal(out[1, 1:], np.zeros(127))  # 1 · 127/1000 rounds to 0
        self.assertEqual(out[1, 0], np.float32(1000.0))


class ModeTest(unittest.TestCase):
    class Model:
        def __init__(self):
            g = torch.Generator().manual_seed(3)
            self.w = {"a.weight": torch.randn(5, 40, generator=g), "b.weight": torch.randn(5, 40, generator=g),
                      "kv_b_proj.weight": torch.randn(5, 40, generator=g)}

        def forward(self, x):
            return x @ self.w["a.weight"].T, x @ self.w["b.weight"].T, x @ self.w["kv_b_proj.weight"].T

    def test_only_quantized_trunk_matrices_take_int8_inputs(self):
        model = self.Model()
        x = torch.randn(3, 40, generator=torch.Generator().manual_seed(4))
        plain = model.forward(x)
        with_int8_activations(model, {"a.weight": "q4g128", "b.weight": "f32", "kv_b_proj.weight": "q4g128"})
        a, b, kv_b = model.forward(x)
        torch.testing.assert_close(a, quantize_dequantize(x) @ model.w["a.weight"].T, rtol=0, atol=0)
        self.assertFalse(torch.equal(a, plain[0]))
        torch.testing.assert_close(b, plain[1], rtol=0, atol=0)  # an f32 tensor keeps f32 inputs
        torch.testing.assert_close(kv_b, plain[2], rtol=0, atol=0)  # read by rows in the engine


if __name__ == "__main__":
    unittest.main()
