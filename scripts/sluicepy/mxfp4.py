# scripts/sluicepy/mxfp4.py: Kimi K3's MXFP4 expert format (k3.md §3) in numpy:
# E2M1 nibbles (element 2j in the low nibble of byte j) with one E8M0 scale
# 2^(e-127) per 32 values of a row. Encoding follows the shipped quantiser
# (e = ceil(log2(amax/6)) + 127, nearest E2M1); decoding is exact.
import numpy as np

from . import SluiceError

GROUP = 32
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
PACKED, SCALE = "_packed", "_scale"


def encode(w):
    """(packed uint8 [rows, cols/2], scales uint8 [rows, cols/32]) of a f32 matrix."""
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape
    if cols % GROUP:
        raise SluiceError(f"MXFP4: {cols} columns are not whole groups of {GROUP}")
    groups = w.reshape(rows, cols // GROUP, GROUP).astype(np.float64)
    amax = np.abs(groups).max(axis=-1)
    with np.errstate(divide="ignore"):
        k = np.where(amax > 0, np.ceil(np.log2(np.where(amax > 0, amax, 1) / 6.0)), -127)
    k = np.clip(k, -127, 127)
    q = groups / np.exp2(k)[..., None]
    index = np.abs(np.abs(q)[..., None] - E2M1).argmin(axis=-1)  # ties to the smaller magnitude
    nibbles = (index | np.where((q < 0) & (index > 0), 8, 0)).astype(np.uint8).reshape(rows, cols)
    packed = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    return packed.astype(np.uint8), (k + 127).astype(np.uint8)


def decode(packed, scales):
    """The exact f32 matrix of MXFP4 tensors."""
    packed, scales = np.asarray(packed, dtype=np.uint8), np.asarray(scales, dtype=np.uint8)
    rows = packed.shape[0]
    nibbles = np.empty((rows, packed.shape[1] * 2), dtype=np.uint8)
    nibbles[:, 0::2], nibbles[:, 1::2] = packed & 0x0F, packed >> 4
    values = E2M1[nibbles & 7] * np.where(nibbles & 8, -1.0, 1.0).astype(np.float32)
    if (scales == 255).any():
        raise SluiceError("MXFP4: an E8M0 scale is 255 (NaN)")
    factor = np.exp2(scales.astype(np.float64) - 127).astype(np.float32)
    return values * np.repeat(factor, GROUP, axis=1)


def decode_weights(weights):
    """A copy of a checkpoint's tensors with every X.weight_packed + X.weight_scale pair as X.weight."""
    out = dict(weights)
    for name in [n for n in weights if n.endswith("weight" + PACKED)]:
        weight = name[:-len(PACKED)]
        out[weight] = decode(out.pop(name), out.pop(weight + SCALE))
    return out
