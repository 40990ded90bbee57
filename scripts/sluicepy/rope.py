# scripts/sluicepy/rope.py: rotary position embeddings (architectures.md §0.5)
# with plain or YaRN frequencies (§0.6, as Hugging Face computes them), both
# pairings. Frequencies in f32 like HF unless the caller asks for f64.
import math

import torch


def yarn_mscale(factor, mscale=1.0):
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _correction_dim(rotations, dim, base, original_max):
    return dim * math.log(original_max / (rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_range(scaling, dim, base):
    """(low, high) pair indices of the ramp: below low the frequency is kept,
    above high it is divided by the factor (HF truncates to integers by default)."""
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1  # 0 too, as HF's `or`
    low = _correction_dim(beta_fast, dim, base, scaling["original_max_position_embeddings"])
    high = _correction_dim(beta_slow, dim, base, scaling["original_max_position_embeddings"])
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def frequencies(dim, base, scaling=None, dtype=torch.float32):
    """(inverse frequencies [dim/2], cos/sin multiplier). With YaRN (the config's
    `factor`, as transformers v5 and DeepSeek's remote code use it; 4.5x used
    max_position_embeddings / original instead, equal in every real checkpoint):
    θ'_i = θ_i·(1 − ramp_i) + (θ_i / f)·ramp_i and the multiplier
    mscale(f, m) / mscale(f, m_all) when both are set, else mscale(f, 1)
    (transformers' rule; DeepSeek's remote code differs only when one is missing)."""
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim
    if scaling is None:
        return 1.0 / (base ** exponents), 1.0
    factor = float(scaling["factor"])
    low, high = yarn_range(scaling, dim, base)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=dtype) - low) / (high - low)).clamp(0, 1)
    extrapolated = 1.0 / (base ** exponents)
    interpolated = 1.0 / (factor * base ** exponents)
    inv_freq = interpolated * ramp + extrapolated * (1 - ramp)
    if scaling.get("attention_factor") is not None:
        return inv_freq, float(scaling["attention_factor"])
    mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all:
        return inv_freq, yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all)
    return inv_freq, yarn_mscale(factor)


def softmax_mscale_squared(scaling):
    """DeepSeek MLA's extra softmax factor mscale(f, m_all)² (1 without YaRN or m_all)."""
    if scaling is None or not scaling.get("mscale_all_dim"):
        return 1.0
    return yarn_mscale(float(scaling["factor"]), scaling["mscale_all_dim"]) ** 2


def cos_sin(positions, inv_freq, multiplier):
    """cos, sin [T, dim/2] of position·θ_i, times the YaRN multiplier."""
    angles = positions.to(inv_freq.dtype)[:, None] * inv_freq[None, :]
    return angles.cos() * multiplier, angles.sin() * multiplier


def rotate_half_split(x, cos, sin):
    """x: [T, heads, d]; element i pairs with i + d/2 (NeoX pairing)."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def rotate_adjacent(x, cos, sin):
    """x: [T, heads, d]; element 2i pairs with 2i+1 (DeepSeek's stored layout),
    the result kept in that layout."""
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
