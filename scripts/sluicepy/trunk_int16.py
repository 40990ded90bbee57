# scripts/sluicepy/trunk_int16.py: the engine's q8g128/q4g128 trunk arithmetic
# (compute/kernels/quant.h: int16 activations per 128-column group, exact
# integer group sums, one f32 fold per group), modelled bit for bit in numpy.
# Reads a container's trunk through sluicepy.container; never writes anything.
import numpy as np
import torch

from . import SluiceError
from . import container as _container

ACTIVATION_MAX = np.float32(32767)
GROUP = _container.GROUP


def quantize_activations(x, groups):
    """x: f32 [cols] -> (xq int64 [groups*128], steps f32 [groups]) as quant.h documents."""
    x = np.asarray(x, dtype=np.float32)
    xq = np.zeros(groups * GROUP, dtype=np.int64)
    steps = np.zeros(groups, dtype=np.float32)
    for g in range(groups):
        part = x[g * GROUP:(g + 1) * GROUP]
        amax = np.float32(np.max(np.abs(part))) if part.size else np.float32(0)
        if not amax > 0:
            continue
        steps[g], inv = amax / ACTIVATION_MAX, ACTIVATION_MAX / amax
        scaled = part * inv
        with np.errstate(invalid="ignore"):
            in_range = np.abs(scaled) < np.float32(2147483520.0)
        rounded = np.where(in_range, np.rint(np.where(in_range, scaled, 0)), -2 ** 31).astype(np.int64)
        xq[g * GROUP:g * GROUP + part.size] = np.clip(rounded, -32767, 32767)
    return xq, steps


def matvec(q, scales, x):
    """q: int64 [rows, groups*128] stored integers, scales: f32 [rows, groups], x: f32 [cols]."""
    groups = scales.shape[1]
    xq, steps = quantize_activations(x, groups)
    sums = (q.reshape(q.shape[0], groups, GROUP) * xq.reshape(groups, GROUP)).sum(axis=2)  # exact
    acc = np.zeros(q.shape[0], dtype=np.float32)
    for g in range(groups):
        acc = acc + (scales[:, g] * steps[g]) * sums[:, g].astype(np.int32).astype(np.float32)
    return acc


class ContainerLinears:
    """Applies a container's q8g128/q4g128 trunk matrices the engine's way;
    returns None for f32 tensors (the caller multiplies those itself)."""

    def __init__(self, c):
        self.c = c
        self._cache = {}

    def _integers(self, name):
        if name not in self._cache:
            t = self.c.trunk.get(name)
            if t is None:
                raise SluiceError(f"{self.c.path}: no trunk tensor {name}")
            if t["format"] == "f32":
                self._cache[name] = None
                return None
            with open(self.c.trunk_file, "rb") as f:
                f.seek(t["offset"])
                data = f.read(t["bytes"])
                f.seek(t["scale_offset"])
                scale_data = f.read(t["scale_bytes"])
            rows, cols = t["shape"]
            padded = -(-cols // GROUP) * GROUP
            raw = np.frombuffer(data, dtype=np.uint8).reshape(rows, -1)
            if t["format"] == "q8g128":
                q = raw.view(np.int8).astype(np.int64)
            else:
                q = np.empty((rows, padded), dtype=np.int64)
                q[:, 0::2] = (raw & 0x0F).astype(np.int64) - 8
                q[:, 1::2] = (raw >> 4).astype(np.int64) - 8
            scales = np.frombuffer(scale_data, dtype="<f2").astype(np.float32).reshape(rows, padded // GROUP)
            self._cache[name] = (q, scales)
        return self._cache[name]

    def __call__(self, name, x):
        """x: torch [T, cols] -> torch [T, rows], or None when the tensor is f32."""
        if name == "lm_head.weight" and name not in self.c.trunk:
            name = "model.embed_tokens.weight"  # tied embeddings, as the engine loads them
        stored = self._integers(name)
        if stored is None:
            return None
        q, scales = stored
        rows = [matvec(q, scales, row) for row in x.detach().reshape(-1, x.shape[-1]).numpy()]
        return torch.from_numpy(np.stack(rows)).reshape(*x.shape[:-1], q.shape[0])
