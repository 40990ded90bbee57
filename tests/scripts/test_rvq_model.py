# tests/scripts/test_rvq_model.py: scripts/sluicepy/rvq_int16.py models the
# engine's RVQ expert kernels bit for bit, so the reference computes what the
# engine does: the tables with int16 codes, the decode-once path in f32 and,
# with int8 activations from INT8_TILES_FROM tokens, its integer tiles. The
# kernels run in tests/compute/kernels/rvq_model_dump.cpp (path: argv[1]) at
# every instruction set this CPU has, on shapes with partial row blocks,
# partial 128-column groups and several tiles, and on heavy-tailed inputs.
import os
import subprocess
import sys
import unittest

import numpy as np

import helpers
from sluicepy import rvq_int16

DUMP = None  # set from argv in __main__
ISAS = ("scalar", "avx2", "avx512")
ROW_BLOCK = 16


def container_layout(indices):
    """[rows padded to 16, nv, 3] -> the container's bytes (rowblock16.vector.stage.row)."""
    blocks, nv = indices.shape[0] // ROW_BLOCK, indices.shape[1]
    return indices.reshape(blocks, ROW_BLOCK, nv, 3).transpose(0, 2, 3, 1).reshape(-1)


def case(rows, cols, tokens, seed):
    rng = np.random.default_rng(seed)
    padded = -(-rows // ROW_BLOCK) * ROW_BLOCK
    books = (rng.standard_normal((3, 256, 8)) * np.array([0.3, 0.1, 0.03])[:, None, None]).astype(np.float32)
    indices = rng.integers(0, 256, size=(padded, cols // 8, 3), dtype=np.uint8)
    scales = (0.5 + np.abs(rng.standard_normal(padded))).astype(np.float16)
    x = rng.standard_normal((tokens, cols)).astype(np.float32)
    x *= np.where(rng.random((tokens, cols)) < 0.02, 8.0, 1.0).astype(np.float32)  # outliers set group scales
    x[0, :min(cols, 128)] = 0.0  # a group of zeros: its int8 scale is 0
    return books, indices, scales, x


def run_kernels(directory, isa, rows, books, indices, scales, x):
    """The kernels' outputs {path: [tokens, rows]}, or None when this CPU lacks `isa`."""
    with open(os.path.join(directory, "shape"), "w") as f:
        f.write(f"{rows} {indices.shape[1] * 8} {x.shape[0]}")
    books.tofile(os.path.join(directory, "books.f32"))
    container_layout(indices).tofile(os.path.join(directory, "indices.u8"))
    scales.tofile(os.path.join(directory, "scales.f16"))
    x.tofile(os.path.join(directory, "x.f32"))
    done = subprocess.run([DUMP, directory, isa], capture_output=True, text=True)
    if done.returncode == helpers.SKIP:
        return None
    if done.returncode != 0:
        raise AssertionError(f"rvq_model_dump {isa}: {done.returncode}\n{done.stderr}")
    return {path: np.fromfile(os.path.join(directory, f"{isa}-{path}.f32"), dtype=np.float32).reshape(-1, rows)
            for path in ("tables", "decoded-f32", "decoded-int8")}


class ModelTest(unittest.TestCase):
    def check(self, rows, cols, tokens, seed):
        books, indices, scales, x = case(rows, cols, tokens, seed)
        used, row_scales = indices[:rows], scales[:rows].astype(np.float32)
        tables, decoded = [], []
        for t in range(tokens):
            codes, scale = rvq_int16.table_codes(x[t], books)
            tables.append(rvq_int16.matvec(codes, scale, used, row_scales))
            decoded.append(rvq_int16.decoded_matvec(books, used, row_scales, x[t]))
        if tokens >= rvq_int16.INT8_TILES_FROM:
            weights, sigma = rvq_int16.integer_weights(books, used)
            int8 = [rvq_int16.decoded_int8_matvec(weights, sigma, row_scales, x[t]) for t in range(tokens)]
        else:  # below the threshold int8 activations leave the experts in f32
            int8 = decoded
        model = {"tables": np.array(tables), "decoded-f32": np.array(decoded), "decoded-int8": np.array(int8)}
        ran = 0
        with helpers.scratch() as d:
            for isa in ISAS:
                engine = run_kernels(d, isa, rows, books, indices, scales, x)
                if engine is None:
                    continue
                ran += 1
                for path, expected in model.items():
                    with self.subTest(isa=isa, path=path, rows=rows, cols=cols, tokens=tokens):
                        differ = np.flatnonzero(expected.view(np.uint32) != engine[path].view(np.uint32))
                        self.assertEqual(differ.size, 0, f"first differing output {differ[:3]}: model "
                                         f"{expected.ravel()[differ[:3]]}, engine {engine[path].ravel()[differ[:3]]}")
        self.assertGreaterEqual(ran, 2)  # scalar and at least AVX2 on any machine this suite runs on
        return model

    def test_the_int8_tiles_a_partial_group_and_a_partial_row_block(self):
        model = self.check(rows=48 + 5, cols=1040, tokens=6, seed=1)
        # The int8 arithmetic differs from the f32 one, or the check above proves nothing about it.
        self.assertFalse(np.array_equal(model["decoded-int8"], model["decoded-f32"]))

    def test_below_the_threshold_int8_activations_change_nothing(self):
        self.check(rows=17, cols=136, tokens=rvq_int16.INT8_TILES_FROM - 1, seed=2)

    def test_more_tokens_than_a_tile_and_rows_over_several_tiles(self):
        self.check(rows=200, cols=520, tokens=9, seed=3)


if __name__ == "__main__":
    DUMP = sys.argv.pop(1)
    unittest.main()
