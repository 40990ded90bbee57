# scripts/sluicepy/rvq_tables.py: the engine's RVQ expert arithmetic
# (compute/kernels/rvq.h: f32 tables, int8 or int16 codes with one scale per
# 128 inputs, exact integer group sums; rvq_decoded.h: f32 decoded weights, or
# integer weights and int8 inputs), modelled bit for bit in numpy so the reference
# computes what the engine does. Reads a container only through
# sluicepy.container; never writes anything.
import numpy as np
import torch

from . import container as _container
from .int8_activations import BLOCK, quantize_groups

STAGES, VEC_DIM = _container.STAGES, _container.VEC_DIM
# compute/kernels/rvq.h's kRvqGroupVectors (vectors per table scale: 128 inputs)
# and rvq_table_code_max(): int8 codes with int8 activations, int16 with f32 ones.
GROUP_VECTORS = 32
CODE_MAX_INT8, CODE_MAX_F32 = 127, 32767
_INT32_MIN = -2 ** 31
# The kernels' rounding (compute/kernels/rounding.h) takes f32 products of
# this magnitude or more as outside int32.
_INT32_LIMIT = np.float32(2147483520.0)


def fma_f32(a, b, c):
    """f32(a·b + c) rounded once, as the kernels' fused multiply-add, for f32 a, b
    and c whose product a·b is exact in float64 (both f32, or an f32 times an
    integer below 2^29). The float64 sum s is exact but for an error e (TwoSum);
    rounding s to f32 is then the one rounding of s + e unless s falls on an f32
    midpoint with e ≠ 0, where e decides the side."""
    a, b, c = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    p = a * b
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + c
        virtual = s - p
        e = (p - (s - virtual)) + (c - virtual)
        r = s.astype(np.float32)
        toward = np.nextafter(r, np.where(s > r, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
        midpoint = (r.astype(np.float64) + toward.astype(np.float64)) * 0.5
        on_midpoint = (s != r) & (s == midpoint) & (e != 0) & np.isfinite(s)
        # On a midpoint, r is the even neighbour; the exact sum lies on e's side of s.
        beyond = on_midpoint & ((e > 0) == (toward > r))
    return np.where(beyond, toward, r).astype(np.float32)


def _groups(nv):
    return -(-nv // GROUP_VECTORS)


def table_codes(x, books, code_max):
    """x: [cols] f32, books: [2, 64, 4] f32, code_max: Q (CODE_MAX_INT8 or
    CODE_MAX_F32) -> (codes int64 [nv, 2, 64], d f32 [groups]).

    f[v][s][c] = ((x4v*C_s[c][0] + x4v+1*C_s[c][1]) + x4v+2*C_s[c][2]) + x4v+3*C_s[c][3]
    in f32; per group g of 32 vectors, a_g = max|f| (NaNs ignored), d_g = a_g/Q,
    inv_g = Q/a_g (both 0 when a_g is 0), q = clamp(rint(f*inv_g), +-Q) with a NaN
    or out-of-int32 product as -2^31 before the clamp."""
    xv = np.asarray(x, dtype=np.float32).reshape(-1, VEC_DIM)
    nv = xv.shape[0]
    products = xv[:, None, None, :] * np.asarray(books, dtype=np.float32)[None]  # [nv, 2, 64, 4]
    exact = products[..., 0]
    for j in range(1, VEC_DIM):
        exact = exact + products[..., j]
    magnitudes = np.abs(exact).reshape(nv, -1)
    magnitudes = np.where(np.isnan(magnitudes), np.float32(0), magnitudes)
    padded = np.zeros((_groups(nv) * GROUP_VECTORS, magnitudes.shape[1]), np.float32)
    padded[:nv] = magnitudes
    amax = padded.reshape(_groups(nv), -1).max(axis=1)
    with np.errstate(divide="ignore"):
        scales = np.where(amax > 0, amax / np.float32(code_max), np.float32(0)).astype(np.float32)
        inverses = np.where(amax > 0, np.float32(code_max) / amax, np.float32(0)).astype(np.float32)
    per_vector = np.repeat(inverses, GROUP_VECTORS)[:nv, None, None]
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = exact * per_vector
        in_range = np.abs(scaled) < _INT32_LIMIT
    rounded = np.where(in_range, np.rint(np.where(in_range, scaled, 0)), _INT32_MIN).astype(np.int64)
    return np.clip(rounded, -code_max, code_max), scales


def matvec(codes, scales, indices, row_scales):
    """codes, scales: table_codes(); indices: uint8 [rows, nv, 2]; row_scales: f32
    [rows] -> y f32 [rows]. L_g[r] = sum of q[v][s][idx(r, v, s)] over the group's
    vectors (exact); acc = fma(d_g, f32(L_g), acc) for g ascending; y = rowscale*acc."""
    rows, nv = indices.shape[0], indices.shape[1]
    picked = codes[np.arange(nv)[None, :, None], np.arange(STAGES)[None, None, :], indices.astype(np.int64)]
    per_vector = np.zeros((rows, _groups(nv) * GROUP_VECTORS), np.int64)
    per_vector[:, :nv] = picked.sum(axis=2)
    sums = per_vector.reshape(rows, _groups(nv), GROUP_VECTORS).sum(axis=2).astype(np.float32)
    acc = np.zeros(rows, dtype=np.float32)
    for g in range(sums.shape[1]):
        acc = fma_f32(scales[g], sums[:, g], acc)
    return np.asarray(row_scales, dtype=np.float32) * acc


def decoded_weights(books, indices):
    """w[r][4v + j] = C0[i0][j] + C1[i1][j] in f32, f32 [rows, cols]."""
    books = np.asarray(books, dtype=np.float32)
    idx = indices.astype(np.int64)
    return (books[0][idx[:, :, 0]] + books[1][idx[:, :, 1]]).reshape(idx.shape[0], -1)


def decoded_matvec(books, indices, row_scales, x):
    """The decode-once path (compute/kernels/rvq_decoded.h): w = C0 + C1 in f32,
    16 lanes of fused multiply-adds in column order, the documented fold, then
    the row scale."""
    w = decoded_weights(books, indices)
    x = np.asarray(x, dtype=np.float32)
    lanes = np.zeros((w.shape[0], 16), dtype=np.float32)
    for c in range(0, w.shape[1], 16):
        width = min(16, w.shape[1] - c)
        lanes[:, :width] = fma_f32(w[:, c:c + width], x[c:c + width], lanes[:, :width])
    s = lanes[:, :8] + lanes[:, 8:]
    t = s[:, :4] + s[:, 4:]
    total = (t[:, 0] + t[:, 2]) + (t[:, 1] + t[:, 3])
    return np.asarray(row_scales, dtype=np.float32) * total


# compute/kernels/rvq_decoded.h's kRvqInt8TilesFrom and kRvqIntegerBound.
INT8_TILES_FROM = 5
INTEGER_BOUND = np.float32(125)


def integer_weights(books, indices):
    """The int8 tiles' weights (compute/kernels/rvq_decoded.h): bound = m0 + m1 of
    the stages' max |C|, q = rint(C * (125/bound)), w = q0 + q1 (int32 [rows, cols],
    at most 126 in magnitude) and their step sigma = bound/125 (0s when bound is 0)."""
    books = np.asarray(books, dtype=np.float32)
    bound = np.float32(np.max(np.abs(books[0])) + np.max(np.abs(books[1])))
    inverse = INTEGER_BOUND / bound if bound > 0 else np.float32(0)
    integers = np.rint(books * inverse).astype(np.int32)
    idx = indices.astype(np.int64)
    w = (integers[0][idx[:, :, 0]] + integers[1][idx[:, :, 1]]).reshape(idx.shape[0], -1)
    return w, np.float32(bound / INTEGER_BOUND)


def decoded_int8_matvec(weights, sigma, row_scales, x):
    """The int8 tiles (compute/kernels/rvq_decoded.h, with int8 activations) on
    integer_weights(): x as int8 per 128-column group (quant.h), exact integer
    group sums, acc = acc + d_g * L_g in f32, then y = rowscale * (sigma * acc)."""
    q, d = quantize_groups(np.asarray(x, dtype=np.float32)[None, :])
    cols = weights.shape[1]
    acc = np.zeros(weights.shape[0], dtype=np.float32)
    for g in range(d.shape[1]):
        lo, hi = g * BLOCK, min(cols, (g + 1) * BLOCK)
        sums = (weights[:, lo:hi].astype(np.int64) * q[0, lo:hi]).sum(axis=1).astype(np.float32)
        acc = (acc + d[0, g] * sums).astype(np.float32)
    return np.asarray(row_scales, dtype=np.float32) * (sigma * acc)


def silu(v):
    """The engine's silu: v / (1 + exp(-v)) in f32."""
    v = np.asarray(v, dtype=np.float32)
    with np.errstate(over="ignore"):
        return v / (np.float32(1) + np.exp(-v))


class ContainerExperts:
    """Applies a container's experts the way the engine does: per token, one table
    per matrix from that token's input, then integer lookups."""

    def __init__(self, c, decode_crossover=None, activation=None, int8_activations=False):
        """decode_crossover: from this many tokens per expert and call on, model
        the decode-once path (rvq_decode_crossover()) instead of the tables; None
        models the tables only, which is what the engine runs today. activation:
        f(gate, up) in f32 (K3's SiTU); None: silu(gate) * up. int8_activations:
        the engine's default mode, with int8 table codes, and decode-once calls of
        INT8_TILES_FROM tokens or more taking the int8 tiles' arithmetic; else
        int16 codes and f32 decoded tiles."""
        self.c = c
        self.decode_crossover = decode_crossover
        self.int8_tiles_from = INT8_TILES_FROM if int8_activations else None
        self.code_max = CODE_MAX_INT8 if int8_activations else CODE_MAX_F32
        self.activation = activation or (lambda gate, up: silu(gate) * up)
        self._cache = {}
        self._integer_cache = {}  # (layer, expert, kind) -> integer_weights(), built once

    def _matrix(self, layer, expert, kind):
        key = (layer, expert, kind)
        if key not in self._cache:
            self._cache[key] = self.c.matrix_codes(layer, kind, self.c.read_record(layer, expert))
        return self._cache[key]

    def _apply(self, layer, expert, kind, x, decoded):
        idx, scales, books = self._matrix(layer, expert, kind)
        if decoded == "int8":
            key = (layer, expert, kind)
            if key not in self._integer_cache:
                self._integer_cache[key] = integer_weights(books, idx)
            return decoded_int8_matvec(*self._integer_cache[key], scales, x)
        if decoded:
            return decoded_matvec(books, idx, scales, x)
        codes, table_scales = table_codes(x, books, self.code_max)
        return matvec(codes, table_scales, idx, scales)

    def __call__(self, layer, expert, rows):
        """rows: torch [n, expert width in] -> torch [n, same], token by token."""
        out = []
        decoded = self.decode_crossover is not None and rows.shape[0] >= self.decode_crossover
        if decoded and self.int8_tiles_from is not None and rows.shape[0] >= self.int8_tiles_from:
            decoded = "int8"
        for x in rows.detach().numpy().astype(np.float32):
            gate, up = (self._apply(layer, expert, k, x, decoded) for k in ("gate", "up"))
            out.append(self._apply(layer, expert, "down", self.activation(gate, up), decoded))
        return torch.from_numpy(np.stack(out))
