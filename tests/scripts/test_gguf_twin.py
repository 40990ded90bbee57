# tests/scripts/test_gguf_twin.py: the part of the GGUF twin that can be checked
# without llama.cpp's gguf-py: kv_b_proj split into the k_b / v_b that
# llama.cpp's absorbed MLA reads gives the scores and values of the
# unabsorbed form, and a kv_b of the wrong shape is refused by name.
import unittest

import numpy as np

import helpers  # noqa: F401 (puts scripts/ on the path)
from sluicepy import SluiceError
from sluicepy.gguf_twin import split_kv_b

HEADS, NOPE, V_DIM, KV_LORA = 3, 4, 5, 8


class SplitKvBTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(7)
        self.kv_b = rng.standard_normal((HEADS * (NOPE + V_DIM), KV_LORA))
        self.latent = rng.standard_normal(KV_LORA)
        self.query = rng.standard_normal((HEADS, NOPE))
        self.k_b, self.v_b = split_kv_b(self.kv_b, HEADS, NOPE, V_DIM, "kv_b")

    def test_shapes_are_llamas(self):
        # numpy order of ggml's {nope, kv_lora, heads} and {kv_lora, v_dim, heads}
        self.assertEqual(self.k_b.shape, (HEADS, KV_LORA, NOPE))
        self.assertEqual(self.v_b.shape, (HEADS, V_DIM, KV_LORA))

    def test_absorbed_query_scores_as_the_decompressed_keys(self):
        for h in range(HEADS):
            rows = self.kv_b[h * (NOPE + V_DIM):h * (NOPE + V_DIM) + NOPE]
            want = self.query[h] @ (rows @ self.latent)
            absorbed = self.k_b[h] @ self.query[h]  # ggml mul_mat: over k_b's last axis
            self.assertAlmostEqual(absorbed @ self.latent, want, places=12)

    def test_values_are_the_decompressed_values(self):
        for h in range(HEADS):
            rows = self.kv_b[h * (NOPE + V_DIM) + NOPE:(h + 1) * (NOPE + V_DIM)]
            np.testing.assert_allclose(self.v_b[h] @ self.latent, rows @ self.latent, rtol=1e-12)

    def test_wrong_row_count_is_refused_by_name(self):
        with self.assertRaisesRegex(SluiceError, r"layer 2 kv_b is \[26, 8\], not \[27, kv_lora_rank\]"):
            split_kv_b(self.kv_b[:-1], HEADS, NOPE, V_DIM, "layer 2 kv_b")


if __name__ == "__main__":
    unittest.main()
