# scripts/sluicepy/code_shapes.py: what other 3.00-bit code shapes cost in
# quantization error against the container's (FORMAT.md, format 3: 4-dim
# vectors, two residual stages of 64 entries). Format 2's shape (8-dim vectors,
# three stages of 256) is one of them: the one-token RVQ step was bound by its
# three codebook loads per 8 weights, and format 3 took 64-entry codebooks that
# fit in registers (pshufb) for their speed, so the study keeps showing what
# that change costs in quality. Rows are normalised by their largest
# magnitude, as the converter does; codebooks are trained by k-means++ and
# Lloyd on a sample and measured on the rest, per (layer, matrix) for a
# checkpoint, as the converter trains its own.
import re
from dataclasses import dataclass

import numpy as np

from . import SluiceError, fp8, safetensors


@dataclass(frozen=True)
class Shape:
    name: str
    dim: int
    entries: int
    stages: int
    lookup: str

    @property
    def bits_per_weight(self):
        return self.stages * np.log2(self.entries) / self.dim


SHAPES = (
    Shape("rvq 4d 2x64", 4, 64, 2, "the container's (format 3): a 64-entry table per stage and dim, "
          "one vpermb (AVX-512 VBMI), four pshufb and three blends (AVX2) per 32 codes"),
    Shape("rvq 8d 3x256", 8, 256, 3, "format 2's: three 32-byte codebook loads per 8 weights"),
    Shape("rvq 4d 3x16", 4, 16, 3, "a 16-entry table per stage and dim: one pshufb per 32 codes"),
    Shape("scalar 8 levels", 1, 8, 1, "one 8-entry table: one pshufb per 32 weights"),
)
CONTAINER = SHAPES[0].name  # the shape every other is compared against


def nearest(vectors, codebook, chunk=1 << 16):
    """Index of the nearest entry for each vector (squared distance; ties: lowest)."""
    norms = (codebook * codebook).sum(1)
    out = np.empty(len(vectors), dtype=np.int64)
    for i in range(0, len(vectors), chunk):
        out[i:i + chunk] = np.argmin(norms[None, :] - 2.0 * vectors[i:i + chunk] @ codebook.T, axis=1)
    return out


def kmeans(vectors, entries, iterations, rng):
    """k-means++ seeding, then Lloyd; an entry left without vectors keeps its place."""
    seeds = [vectors[rng.integers(len(vectors))]]
    distance = ((vectors - seeds[0]) ** 2).sum(1)
    for _ in range(1, entries):
        total = distance.sum()
        # Fewer distinct vectors than entries: the rest repeat a chosen point.
        pick = rng.choice(len(vectors), p=distance / total) if total > 0 else rng.integers(len(vectors))
        seeds.append(vectors[pick])
        distance = np.minimum(distance, ((vectors - seeds[-1]) ** 2).sum(1))
    codebook = np.array(seeds)
    for _ in range(iterations):
        codes = nearest(vectors, codebook)
        counts = np.bincount(codes, minlength=entries)
        sums = np.zeros_like(codebook)
        np.add.at(sums, codes, vectors)
        filled = counts > 0
        codebook[filled] = sums[filled] / counts[filled, None]
    return codebook


def normalise_rows(matrix):
    amax = np.abs(matrix).max(axis=1, keepdims=True)
    return matrix / np.where(amax > 0, amax, 1.0)


def squared_errors(rows, shapes, sample, iterations, seed):
    """Sum of squared residuals per shape over `rows` (a list of 2-D matrices,
    normalised here), codebooks trained on `sample` vectors of each shape.
    When the sample is the whole group (a tiny model's), the error is measured
    on the training data, which flatters the larger codebooks."""
    normalised = [normalise_rows(np.asarray(m, dtype=np.float32)) for m in rows]
    errors = {}
    for shape in shapes:
        for m in normalised:
            if m.shape[1] % shape.dim:
                raise SluiceError(f"{m.shape[1]} columns are not a multiple of {shape.name}'s {shape.dim}")
        residual = np.concatenate([m.reshape(-1, shape.dim) for m in normalised])
        rng = np.random.default_rng(seed)
        train = residual[rng.choice(len(residual), min(sample, len(residual)), replace=False)]
        for _ in range(shape.stages):
            codebook = kmeans(train, shape.entries, iterations, rng)
            train = train - codebook[nearest(train, codebook)]
            residual = residual - codebook[nearest(residual, codebook)]
        errors[shape.name] = float((residual.astype(np.float64) ** 2).sum())
    energy = float(sum((m.astype(np.float64) ** 2).sum() for m in normalised))
    return errors, energy


_EXPERT = re.compile(r"layers\.(\d+)\..*experts\.\d+\.([A-Za-z0-9_]+)\.weight$")


def checkpoint_groups(files, directory, layers=None):
    """{(layer, matrix): [tensor names]} of a checkpoint's routed experts (files:
    safetensors.checkpoint_files(directory)): the groups the converter trains
    one codebook set for."""
    groups = {}
    for name in files:
        match = _EXPERT.search(name)
        if match and (layers is None or int(match.group(1)) in layers):
            groups.setdefault((int(match.group(1)), match.group(2)), []).append(name)
    if not groups:
        which = "" if layers is None else f" in layers {sorted(layers)}"
        raise SluiceError(f"{directory}: no routed expert weights (…layers.L….experts.E.NAME.weight){which}")
    return dict(sorted(groups.items()))


def load_group(files, names):
    """The group's matrices as f32, FP8 ones dequantized by their block scales;
    each file's header is read once."""
    wanted = set(names) | {n + safetensors.SCALE_SUFFIX for n in names if n + safetensors.SCALE_SUFFIX in files}
    tensors = {}
    for file in sorted({files[n] for n in wanted}):
        tensors.update(safetensors.load_file(file, wanted))
    out = []
    for name in names:
        matrix = tensors[name]
        if matrix.dtype == np.uint8:
            raise SluiceError(f"{name}: packed (MXFP4) experts are not studied; unpack them first")
        scale = tensors.get(name + safetensors.SCALE_SUFFIX)
        if scale is not None:
            matrix = fp8.dequantize(matrix, scale, name)
        if matrix.ndim != 2:
            raise SluiceError(f"{name}: expected a matrix, found shape {list(matrix.shape)}")
        out.append(matrix)
    return out


def report(name, errors, energy, weights, sample):
    relative = {shape: e / energy for shape, e in errors.items()}
    in_sample = {shape.name: sample >= weights // shape.dim for shape in SHAPES if shape.name in errors}
    return {"source": name, "weights": weights, "in_sample": in_sample, "relative_squared_error": relative,
            "against_container": {shape: r / relative[CONTAINER] for shape, r in relative.items()}}
