# tests/scripts/test_rvq_model.py: scripts/sluicepy/rvq_tables.py models the
# engine's RVQ expert kernels bit for bit, so the reference computes what the
# engine does: the tables (their int8 or int16 codes and group scales, then the rows),
# the decode-once path in f32 and, with int8 activations from INT8_TILES_FROM
# tokens, its integer tiles. The kernels run in
# tests/compute/kernels/rvq_model_dump.cpp (path: argv[1]) at every instruction
# set this CPU has, on shapes with partial 32-row blocks, partial 128-column
# groups and several tiles, and on heavy-tailed inputs. The model's own fused
# multiply-add and its rounding against exact arithmetic are checked here too.
import os
import subprocess
import sys
import unittest
from fractions import Fraction

import numpy as np

import helpers
from sluicepy import container, rvq_tables

DUMP = None  # set from argv in __main__
ISAS = ("scalar", "avx2", "avx512")


def case(rows, cols, tokens, seed):
    rng = np.random.default_rng(seed)
    padded = -(-rows // container.ROW_BLOCK) * container.ROW_BLOCK
    books = (rng.standard_normal((2, 64, 4)) * np.array([0.3, 0.1])[:, None, None]).astype(np.float32)
    indices = rng.integers(0, 64, size=(padded, cols // 4, 2), dtype=np.uint8)
    scales = (0.5 + np.abs(rng.standard_normal(padded))).astype(np.float16)
    x = rng.standard_normal((tokens, cols)).astype(np.float32)
    x *= np.where(rng.random((tokens, cols)) < 0.02, 8.0, 1.0).astype(np.float32)  # outliers set group scales
    if cols > 128:
        x[0, :128] = 0.0  # a group of zeros: its table and int8 scales are 0
    return books, indices, scales, x


# Table precisions by activations mode (the dump's file names) and their code max.
PRECISIONS = {"int8": rvq_tables.CODE_MAX_INT8, "f32": rvq_tables.CODE_MAX_F32}


def kernel_layout(codes, code_max):
    """Model codes [nv, 2, 64] -> token_codes()'s bytes: byte plane p of q[v][s][c]
    at (v·planes + p)·128 + (c/16)·32 + s·16 + c%16 (compute/kernels/rvq.h); one
    plane of int8 codes, or the low (unsigned) and high (signed) bytes of int16 ones."""
    quarters = codes.reshape(-1, 2, 4, 16).transpose(0, 2, 1, 3).reshape(codes.shape[0], 1, 128)
    if code_max == rvq_tables.CODE_MAX_INT8:
        return quarters.reshape(-1).astype(np.int8)
    planes = np.concatenate([quarters & 255, quarters >> 8], axis=1)  # >> floors: q = 256·high + low
    return planes.reshape(-1).astype(np.uint8).view(np.int8)


def run_kernels(directory, isa, rows, books, indices, scales, x):
    """The kernels' outputs {name: array}, or None when this CPU lacks `isa`."""
    tokens, cols = x.shape
    with open(os.path.join(directory, "shape"), "w") as f:
        f.write(f"{rows} {cols} {tokens}")
    books.tofile(os.path.join(directory, "books.f32"))
    with open(os.path.join(directory, "indices.u8"), "wb") as f:
        f.write(container.pack_codes(indices))
    scales.tofile(os.path.join(directory, "scales.f16"))
    x.tofile(os.path.join(directory, "x.f32"))
    done = subprocess.run([DUMP, directory, isa], capture_output=True, text=True)
    if done.returncode == helpers.SKIP:
        return None
    if done.returncode != 0:
        raise AssertionError(f"rvq_model_dump {isa}: {done.returncode}\n{done.stderr}")
    names = ["decoded-f32", "decoded-int8"] + [f"{p}-{n}" for p in PRECISIONS for n in ("tables", "scales")]
    out = {name: np.fromfile(os.path.join(directory, f"{isa}-{name}.f32"), dtype=np.float32).reshape(tokens, -1)
           for name in names}
    for p in PRECISIONS:
        out[f"{p}-codes"] = np.fromfile(os.path.join(directory, f"{isa}-{p}-codes.i8"),
                                        dtype=np.int8).reshape(tokens, -1)
    return out


class KernelTest(unittest.TestCase):
    def check(self, rows, cols, tokens, seed):
        books, indices, scales, x = case(rows, cols, tokens, seed)
        used, row_scales = indices[:rows], scales[:rows].astype(np.float32)
        model = {}
        for p, code_max in PRECISIONS.items():
            codes, table_scales, tables = [], [], []
            for t in range(tokens):
                q, d = rvq_tables.table_codes(x[t], books, code_max)
                codes.append(kernel_layout(q, code_max))
                table_scales.append(d)
                tables.append(rvq_tables.matvec(q, d, used, row_scales))
            model.update({f"{p}-codes": np.array(codes), f"{p}-scales": np.array(table_scales),
                          f"{p}-tables": np.array(tables)})
        decoded = [rvq_tables.decoded_matvec(books, used, row_scales, x[t]) for t in range(tokens)]
        if tokens >= rvq_tables.INT8_TILES_FROM:
            weights, sigma = rvq_tables.integer_weights(books, used)
            int8 = [rvq_tables.decoded_int8_matvec(weights, sigma, row_scales, x[t]) for t in range(tokens)]
        else:  # below the threshold int8 activations leave the experts in f32
            int8 = decoded
        model.update({"decoded-f32": np.array(decoded), "decoded-int8": np.array(int8)})
        ran = 0
        with helpers.scratch() as d:
            for isa in ISAS:
                engine = run_kernels(d, isa, rows, books, indices, scales, x)
                if engine is None:
                    continue
                ran += 1
                for name, expected in model.items():
                    with self.subTest(isa=isa, name=name, rows=rows, cols=cols, tokens=tokens):
                        self.assertEqual(engine[name].shape, expected.shape)
                        bits = np.uint8 if expected.dtype == np.int8 else np.uint32
                        differ = np.flatnonzero(expected.view(bits) != engine[name].view(bits))
                        self.assertEqual(differ.size, 0, f"first differing values at {differ[:3]}: model "
                                         f"{expected.ravel()[differ[:3]]}, engine {engine[name].ravel()[differ[:3]]}")
        self.assertGreaterEqual(ran, 2)  # scalar and at least AVX2 on any machine this suite runs on
        return model

    def test_the_int8_tiles_a_partial_group_and_a_partial_row_block(self):
        # 69 rows: two 32-row blocks and 5 rows; 1040 columns: 8 groups of 128 and 16 columns.
        model = self.check(rows=64 + 5, cols=1040, tokens=rvq_tables.INT8_TILES_FROM + 1, seed=1)
        # The int8 arithmetic differs from the f32 one, or the check above proves nothing about it.
        self.assertFalse(np.array_equal(model["decoded-int8"], model["decoded-f32"]))
        # Codes reach ±127 and some group's scale is 0 (token 0's first group), or the
        # clamp and the zero scale went untested; int16 codes have negative low bytes
        # (a plane split with a borrow) and reach the high plane's extremes.
        self.assertEqual(np.abs(model["int8-codes"].astype(np.int32)).max(), 127)
        self.assertEqual(model["int8-scales"][0, 0], 0)
        self.assertEqual(model["f32-scales"][0, 0], 0)
        high = model["f32-codes"].reshape(-1, 2, 128)[:, 1]
        self.assertEqual((int(high.min()), int(high.max())), (-128, 127))

    def test_below_the_threshold_int8_activations_change_nothing(self):
        self.check(rows=17, cols=136, tokens=rvq_tables.INT8_TILES_FROM - 1, seed=2)

    def test_more_tokens_than_a_tile_and_rows_over_several_tiles(self):
        self.check(rows=200, cols=520, tokens=9, seed=3)

    def test_one_row_of_one_vector_pair(self):
        self.check(rows=1, cols=8, tokens=1, seed=4)


def exactly_rounded(a, b, c):
    """f32 nearest to a·b + c computed exactly (ties to even)."""
    value = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    near = np.float32(float(value))
    candidates = (near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf)))
    return min(candidates, key=lambda v: (abs(Fraction(float(v)) - value), int(np.array(v).view(np.uint32)) & 1))


class ModelTest(unittest.TestCase):
    def test_fma_rounds_once_where_float64_would_round_twice(self):
        # a·b = 2^-24 ± 2^-60 lands a float64 sum with c ∈ [1, 2) on an f32 midpoint,
        # half of them on the side that rounding the float64 sum again gets wrong.
        rng = np.random.default_rng(5)
        c = (1 + rng.integers(0, 2 ** 23, size=400) * 2.0 ** -23).astype(np.float32)
        a = np.float32(2.0 ** -24 * (1 + 2.0 ** -18))
        twice = 0
        for b in (np.float32(1 + 2.0 ** -18), np.float32(1 - 2.0 ** -18)):
            for sign in (1, -1):
                got = rvq_tables.fma_f32(sign * a, b, c)
                want = np.array([exactly_rounded(sign * a, b, v) for v in c], dtype=np.float32)
                np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
                twice += int(np.sum((c.astype(np.float64) + float(sign * a) * float(b)).astype(np.float32) != want))
        self.assertGreater(twice, 0)  # the cases do reach the double rounding

    def test_table_codes_are_the_entries_in_steps_of_a_qth_of_the_group_max(self):
        rng = np.random.default_rng(6)
        books = (rng.standard_normal((2, 64, 4)) * np.array([0.3, 0.1])[:, None, None]).astype(np.float32)
        x = rng.standard_normal(1040).astype(np.float32)
        x[128:256] *= 50  # groups of very different scales
        exact = np.einsum("vj,scj->vsc", x.reshape(-1, 4).astype(np.float64), books.astype(np.float64))
        for q in PRECISIONS.values():
            codes, scales = rvq_tables.table_codes(x, books, q)
            self.assertEqual(codes.shape, (260, 2, 64))
            self.assertEqual(scales.shape, (9,))  # 8 groups of 32 vectors and one of 1
            for g, d in enumerate(scales.astype(np.float64)):
                entries = exact[32 * g:32 * g + 32]
                amax = np.abs(entries).max()
                self.assertAlmostEqual(d, amax / q, delta=amax * 1e-6)
                self.assertEqual(np.abs(codes[32 * g:32 * g + 32]).max(), q)
                self.assertLessEqual(np.abs(codes[32 * g:32 * g + 32] * d - entries).max(), d / 2 + amax * 1e-6)

    def test_every_path_is_close_to_the_exact_product(self):
        books, indices, scales, x = case(rows=40, cols=264, tokens=1, seed=7)
        used, row_scales = indices[:40], scales[:40].astype(np.float32)
        w = (books[0][used[:, :, 0]].astype(np.float64) + books[1][used[:, :, 1]]).reshape(40, 264)
        exact = row_scales * (w @ x[0].astype(np.float64))
        for q in PRECISIONS.values():
            codes, d = rvq_tables.table_codes(x[0], books, q)
            # Each of a group's 2 × 32 lookups is off by at most half its step; the
            # f32 table entries by a few roundings each.
            table_bound = row_scales * ((32 * d.astype(np.float64)).sum() * 1.001 + 1e-6 * np.abs(exact).max())
            table = rvq_tables.matvec(codes, d, used, row_scales)
            self.assertTrue(np.all(np.abs(table - exact) <= table_bound))
        decoded = rvq_tables.decoded_matvec(books, used, row_scales, x[0])
        np.testing.assert_allclose(decoded, exact, rtol=0, atol=1e-5 * np.abs(exact).max())
        weights, sigma = rvq_tables.integer_weights(books, used)
        self.assertLessEqual(np.abs(weights).max(), 126)
        int8 = rvq_tables.decoded_int8_matvec(weights, sigma, row_scales, x[0])
        np.testing.assert_allclose(int8, exact, rtol=0, atol=0.05 * np.abs(exact).max())


if __name__ == "__main__":
    DUMP = sys.argv.pop(1)
    unittest.main()
