# scripts/sluicepy/fp8.py: fp8 e4m3fn (architectures.md §0.9) without a torch
# fp8 dtype: the 256-entry decode table, round-to-nearest-even encoding, and
# the 128x128 block scales of DeepSeek-style checkpoints. Pure numpy, no files.
import numpy as np

from . import SluiceError

BLOCK = 128
MAX_FINITE = 448.0
# Halfway from 448 to 480 (which e4m3fn spends on NaN): nearer values still round to 448.
_OVERFLOW = 464.0


def _decode_table():
    table = np.empty(256, dtype=np.float32)
    for byte in range(256):
        sign = -1.0 if byte & 0x80 else 1.0
        exponent, mantissa = (byte >> 3) & 0x0F, byte & 0x07
        if exponent == 0x0F and mantissa == 0x07:
            table[byte] = np.nan  # e4m3fn has no infinities: only these two codes are NaN
        elif exponent == 0:
            table[byte] = sign * (mantissa / 8.0) * 2.0 ** -6
        else:
            table[byte] = sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)
    return table


DECODE = _decode_table()
_POSITIVE = DECODE[:0x7F].astype(np.float64)  # codes 0x00..0x7E, increasing


def decode(codes):
    """f32 values of e4m3fn bytes (any shape of uint8)."""
    return DECODE[np.asarray(codes, dtype=np.uint8)]


def encode(values, name="tensor"):
    """e4m3fn bytes of f32 values, rounding to nearest with ties to the even
    code. A finite value that would not round to ±448 or less is refused:
    the block scale must prevent it."""
    x = np.asarray(values, dtype=np.float32)
    magnitude = np.abs(x).astype(np.float64)
    finite = np.isfinite(x)
    if np.any(magnitude[finite] >= _OVERFLOW):
        raise SluiceError(f"{name}: value {float(magnitude[finite].max())} exceeds the e4m3 range ±448")
    upper = np.clip(np.searchsorted(_POSITIVE, np.where(finite, magnitude, 0.0)), 1, 0x7E)
    lower = upper - 1
    below, above = magnitude - _POSITIVE[lower], _POSITIVE[upper] - magnitude
    take_upper = (above < below) | ((above == below) & (upper % 2 == 0))
    code = np.where(take_upper, upper, lower).astype(np.uint8)
    code = np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)
    return np.where(finite, code, np.uint8(0x7F)).astype(np.uint8)


def scale_shape(shape):
    rows, cols = shape
    return [-(-rows // BLOCK), -(-cols // BLOCK)]


def block_scales(weight):
    """f32 [ceil(rows/128), ceil(cols/128)]: amax/448 of each block (1 for an all-zero block)."""
    w = np.asarray(weight, dtype=np.float32)
    rows, cols = w.shape
    out = np.ones(scale_shape(w.shape), dtype=np.float32)
    for br in range(out.shape[0]):
        for bc in range(out.shape[1]):
            amax = float(np.abs(w[br * BLOCK:(br + 1) * BLOCK, bc * BLOCK:(bc + 1) * BLOCK]).max())
            if amax > 0:
                out[br, bc] = np.float32(amax / MAX_FINITE)
    return out


def expand_scales(scales, shape):
    """The per-element multiplier: scale_inv[r // 128][c // 128], partial edge blocks cut."""
    rows, cols = shape
    return np.repeat(np.repeat(scales, BLOCK, axis=0), BLOCK, axis=1)[:rows, :cols]


def dequantize(values, scale_inv, name="tensor"):
    """W = fp8(W) · scale_inv[r/128][c/128] for decoded values [rows, cols]."""
    if values.ndim != 2:
        raise SluiceError(f"{name}: an F8_E4M3 tensor must be 2-D, it has shape {list(values.shape)}")
    want = scale_shape(values.shape)
    if list(scale_inv.shape) != want:
        raise SluiceError(f"{name}_scale_inv: shape {list(scale_inv.shape)}, the weight {list(values.shape)} "
                          f"needs {want} (128x128 blocks)")
    return (values * expand_scales(scale_inv, values.shape)).astype(np.float32)
