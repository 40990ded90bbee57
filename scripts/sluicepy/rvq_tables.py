# scripts/sluicepy/rvq_int16.py: the engine's RVQ expert arithmetic
# (compute/kernels/rvq.h: f32 tables, int16 codes, exact integer row sums;
# rvq_decoded.h: f32 decoded weights, or integer weights and int8 inputs),
# modelled bit for bit in numpy so the reference computes what the engine does.
# Reads a container only through sluicepy.container; never writes anything.
import numpy as np
import torch

from . import container as _container
from .int8_activations import BLOCK, quantize_groups

CODE_MAX = np.float32(32767)
_INT32_MIN = -2 ** 31


def table_codes(x, books):
    """x: [cols] f32, books: [3, 256, 8] f32 -> (codes int64 [nv, 3, 256], scale f32).

    f[v][s][c] = (((x8v*C[c][0] + x8v+1*C[c][1]) + ...) + x8v+7*C[c][7]) in f32,
    a = max|f|, scale = a/32767, inv = 32767/a, q = clamp(rint(f*inv), +-32767)."""
    xv = np.asarray(x, dtype=np.float32).reshape(-1, 8)
    products = xv[:, None, None, :] * np.asarray(books, dtype=np.float32)[None]  # [nv, 3, 256, 8]
    exact = products[..., 0]
    for j in range(1, 8):
        exact = exact + products[..., j]
    magnitudes = np.abs(exact)
    amax = np.float32(np.max(np.where(np.isnan(magnitudes), np.float32(0), magnitudes)))
    if not amax > 0:
        return np.zeros(exact.shape, dtype=np.int64), np.float32(0)
    scale, inv = amax / CODE_MAX, CODE_MAX / amax
    scaled = exact * inv
    with np.errstate(invalid="ignore"):
        in_range = np.abs(scaled) < np.float32(2147483520.0)
    rounded = np.where(in_range, np.rint(np.where(in_range, scaled, 0)), _INT32_MIN).astype(np.int64)
    return np.clip(rounded, -32767, 32767), np.float32(scale)


def matvec(codes, scale, indices, row_scales):
    """indices: uint8 [rows, nv, 3]; row_scales: f32 [rows] -> y f32 [rows].

    T[r] = sum of q[v][s][idx(r, v, s)] (exact); y = rowscale * (scale * f32(T))."""
    nv = indices.shape[1]
    picked = codes[np.arange(nv)[None, :, None], np.arange(3)[None, None, :], indices.astype(np.int64)]
    totals = picked.sum(axis=(1, 2)).astype(np.int32).astype(np.float32)
    return np.asarray(row_scales, dtype=np.float32) * (np.float32(scale) * totals)


def decoded_matvec(books, indices, row_scales, x):
    """The decode-once path (compute/kernels/rvq_decoded.h): w = (C0 + C1) + C2 in f32,
    16 lanes of fused multiply-adds in column order, the documented fold, then the row scale.
    Each fma is modelled in float64 (the product is exact there) rounded to f32: that
    rounds twice, which differs from one rounding only when the float64 sum lands on
    an f32 midpoint, about once in 2^29 steps."""
    rows, nv = indices.shape[0], indices.shape[1]
    idx = indices.astype(np.int64)
    w = ((books[0][idx[:, :, 0]] + books[1][idx[:, :, 1]]) + books[2][idx[:, :, 2]]).reshape(rows, nv * 8)
    w = w.astype(np.float64)
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    lanes = np.zeros((rows, 16), dtype=np.float32)
    for c in range(0, nv * 8, 16):
        chunk = w[:, c:c + 16] * x[c:c + 16]
        width = chunk.shape[1]
        lanes[:, :width] = (lanes[:, :width].astype(np.float64) + chunk).astype(np.float32)
    s = lanes[:, :8] + lanes[:, 8:]
    t = s[:, :4] + s[:, 4:]
    total = (t[:, 0] + t[:, 2]) + (t[:, 1] + t[:, 3])
    return np.asarray(row_scales, dtype=np.float32) * total


# compute/kernels/rvq_decoded.h's kRvqInt8TilesFrom and kRvqIntegerBound.
INT8_TILES_FROM = 5
INTEGER_BOUND = np.float32(125)


def integer_weights(books, indices):
    """The int8 tiles' weights (compute/kernels/rvq_decoded.h): bound = (m0 + m1) + m2
    of the stages' max |C|, q = rint(C * (125/bound)) clamped to +-127, w = q0 + q1 + q2
    (int32 [rows, cols]) and their step sigma = bound/125 (0s when bound is 0)."""
    books = np.asarray(books, dtype=np.float32)
    bound = np.float32(0)
    for s in range(3):
        bound = np.float32(bound + np.max(np.abs(books[s])))
    inverse = INTEGER_BOUND / bound if bound > 0 else np.float32(0)
    integers = np.clip(np.rint(books * inverse), -127, 127).astype(np.int32)
    rows, nv = indices.shape[0], indices.shape[1]
    idx = indices.astype(np.int64)
    w = (integers[0][idx[:, :, 0]] + integers[1][idx[:, :, 1]] + integers[2][idx[:, :, 2]]).reshape(rows, nv * 8)
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

    def __init__(self, c, decode_crossover=None, activation=None, int8_tiles_from=None):
        """decode_crossover: from this many tokens per expert and call on, model
        the decode-once path (rvq_decode_crossover()) instead of the tables; None
        models the tables only, which is what the engine runs today. activation:
        f(gate, up) in f32 (K3's SiTU); None: silu(gate) * up. int8_tiles_from:
        with int8 activations, INT8_TILES_FROM: decode-once calls of that many
        tokens or more take the int8 tiles' arithmetic."""
        self.c = c
        self.decode_crossover = decode_crossover
        self.int8_tiles_from = int8_tiles_from
        self.activation = activation or (lambda gate, up: silu(gate) * up)
        self._cache = {}
        self._integer_cache = {}  # (layer, expert, kind) -> integer_weights(), built once

    def _matrix(self, layer, expert, kind):
        key = (layer, expert, kind)
        if key not in self._cache:
            info = self.c.layers[layer]
            lay = info["layout"]
            record = self.c.read_record(layer, expert)
            rows, cols = lay["shapes"][kind]
            rows_padded, nv = -(-rows // _container.ROW_BLOCK) * _container.ROW_BLOCK, cols // _container.VEC_DIM
            raw = np.frombuffer(record, dtype=np.uint8, count=rows_padded * nv * 3, offset=lay["offsets"][kind])
            # byte (r, v, s) sits at ((r/16)*nv*3 + v*3 + s)*16 + r%16
            idx = raw.reshape(rows_padded // _container.ROW_BLOCK, nv, 3, _container.ROW_BLOCK)
            idx = idx.transpose(0, 3, 1, 2).reshape(rows_padded, nv, 3)[:rows]
            k = _container.KINDS.index(kind)
            books = self.c.codebooks[info["base"] + 3 * k: info["base"] + 3 * k + 3]
            scales = np.frombuffer(record, dtype="<f2", count=rows, offset=lay["scales"][kind]).astype(np.float32)
            self._cache[key] = (idx, books, scales)
        return self._cache[key]

    def _apply(self, layer, expert, kind, x, decoded):
        idx, books, scales = self._matrix(layer, expert, kind)
        if decoded == "int8":
            key = (layer, expert, kind)
            if key not in self._integer_cache:
                self._integer_cache[key] = integer_weights(books, idx)
            return decoded_int8_matvec(*self._integer_cache[key], scales, x)
        if decoded:
            return decoded_matvec(books, idx, scales, x)
        codes, scale = table_codes(x, books)
        return matvec(codes, scale, idx, scales)

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
