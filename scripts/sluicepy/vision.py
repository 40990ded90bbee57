# scripts/sluicepy/vision.py: Kimi K3's vision tower, projector and image
# preprocessing (k3.md §4.2, §4.4) as an oracle written from the spec in f64,
# independent of compute/vision/: torch's interpolate for both resizes, complex
# rotations for the 2-D RoPE, einsum attention. Never fast-pathed.
import math

import numpy as np
import torch

from . import SluiceError

DTYPE = torch.float64
TOWER_EPS = 2.0 ** -23  # the tower's norms are built without eps: f32 machine epsilon
PROJECTOR_EPS = 1e-5
ROPE_THETA = 10000.0
MAX_PATCHES = 1024
MEAN = STD = 0.5  # media_proc_cfg


def tensor_names(vision_config):
    """The tower's and projector's HF names (k3.md §4.1), blocks in order."""
    t = "vision_tower."
    names = [t + "patch_embed.proj.weight", t + "patch_embed.pos_emb.weight"]
    for b in range(vision_config["vt_num_hidden_layers"]):
        p = f"{t}encoder.blocks.{b}."
        names += [p + n for n in ("norm0.weight", "wqkv.weight", "wo.weight", "norm1.weight",
                                  "mlp.fc0.weight", "mlp.fc1.weight")]
    return names + [t + "encoder.final_layernorm.weight", "mm_projector.proj.0.weight",
                    "mm_projector.proj.2.weight", "mm_projector.post_norm.weight"]


def grid_for(width, height, max_patches=MAX_PATCHES, patch=14):
    """(gw, gh) of §4.4: scale down to max_patches, round, at least 2 and even per side,
    then take 2 off the larger side while over the cap."""
    s = min(1.0, math.sqrt(max_patches * patch * patch / (width * height)))

    def side(n):
        v = max(2, math.floor(n * s / patch + 0.5))  # half away from zero, as C rounds
        return v - v % 2
    gw, gh = side(width), side(height)
    while gw * gh > max_patches:
        if gw >= gh:
            gw -= 2
        else:
            gh -= 2
    return gw, gh


def preprocess(rgb, max_patches=MAX_PATCHES, patch=14):
    """uint8 [H, W, 3] → (pixels [3, p·gh, p·gw] f64 normalised, (gw, gh))."""
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise SluiceError(f"image array must be uint8 [H, W, 3], not {rgb.dtype} {list(rgb.shape)}")
    height, width = rgb.shape[:2]
    gw, gh = grid_for(width, height, max_patches, patch)
    image = torch.as_tensor(rgb.astype(np.float64)).permute(2, 0, 1)[None] / 255.0
    image = (image - MEAN) / STD
    resized = torch.nn.functional.interpolate(image, size=(patch * gh, patch * gw), mode="bilinear",
                                              align_corners=False, antialias=False)
    return resized[0], (gw, gh)


def _rms(x, weight, eps):
    return weight * x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)


def _rope_2d(x, gh, gw, rows_on_even_pairs=False):
    """x [n, heads, d]: pair j of each head turns by col·ω_{j//2} (even j) or row·ω_{j//2} (odd j);
    `rows_on_even_pairs` swaps them (the reference's docstring, not its code: a wrong model for tests)."""
    n, heads, d = x.shape
    omega = ROPE_THETA ** (-4.0 * torch.arange(d // 4, dtype=DTYPE) / d)
    rows = torch.arange(gh, dtype=DTYPE).repeat_interleave(gw)
    cols = torch.arange(gw, dtype=DTYPE).repeat(gh)
    if rows_on_even_pairs:
        rows, cols = cols, rows
    angles = torch.empty(n, d // 2, dtype=DTYPE)
    angles[:, 0::2] = cols[:, None] * omega[None, :]
    angles[:, 1::2] = rows[:, None] * omega[None, :]
    turn = torch.polar(torch.ones_like(angles), angles)[:, None, :]
    z = torch.view_as_complex(x.reshape(n, heads, d // 2, 2).contiguous())
    return torch.view_as_real(z * turn).reshape(n, heads, d)


def tower(weights, vision_config, pixels, rows_on_even_pairs=False):
    """weights: name → array (HF shapes, or the container's [out, 3p²] / [h·w, width] rows);
    pixels [3, p·gh, p·gw]. Returns the projector rows [(gh/2)(gw/2), text_hidden] (f64)."""
    v = vision_config
    p, width, heads = v["patch_size"], v["vt_hidden_size"], v["vt_num_attention_heads"]
    qkv_width = v["qkv_hidden_size"]
    d = qkv_width // heads
    w = {name: torch.as_tensor(np.asarray(weights[name])).to(DTYPE) for name in tensor_names(v)}
    pixels = torch.as_tensor(pixels).to(DTYPE)
    _, ph, pw = pixels.shape
    if ph % p or pw % p or (ph // p) % 2 or (pw // p) % 2:
        raise SluiceError(f"pixels of {pw}x{ph} are not an even number of {p}-pixel patches per side")
    gh, gw = ph // p, pw // p
    patches = pixels.reshape(3, gh, p, gw, p).permute(1, 3, 0, 2, 4).reshape(gh * gw, 3 * p * p)
    x = patches @ w["vision_tower.patch_embed.proj.weight"].reshape(width, -1).T
    grid = w["vision_tower.patch_embed.pos_emb.weight"].reshape(v["init_pos_emb_height"], v["init_pos_emb_width"], width)
    grid = torch.nn.functional.interpolate(grid.permute(2, 0, 1)[None], size=(gh, gw), mode="bilinear",
                                           align_corners=False, antialias=False)
    x = x + grid[0].permute(1, 2, 0).reshape(gh * gw, width)
    n = gh * gw
    for b in range(v["vt_num_hidden_layers"]):
        pre = f"vision_tower.encoder.blocks.{b}."
        y = _rms(x, w[pre + "norm0.weight"], TOWER_EPS)
        q, k, val = (y @ w[pre + "wqkv.weight"].T).split(qkv_width, dim=-1)
        q = _rope_2d(q.reshape(n, heads, d), gh, gw, rows_on_even_pairs)
        k = _rope_2d(k.reshape(n, heads, d), gh, gw, rows_on_even_pairs)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        out = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), val.reshape(n, heads, d))
        x = x + out.reshape(n, qkv_width) @ w[pre + "wo.weight"].T
        y = _rms(x, w[pre + "norm1.weight"], TOWER_EPS)
        inner = torch.nn.functional.gelu(y @ w[pre + "mlp.fc0.weight"].T, approximate="tanh")
        x = x + inner @ w[pre + "mlp.fc1.weight"].T
    x = _rms(x, w["vision_tower.encoder.final_layernorm.weight"], TOWER_EPS)
    merged = x.reshape(gh // 2, 2, gw // 2, 2, width).permute(0, 2, 1, 3, 4).reshape(n // 4, 4 * width)
    hidden = torch.nn.functional.gelu(merged @ w["mm_projector.proj.0.weight"].T)  # exact erf
    rows = hidden @ w["mm_projector.proj.2.weight"].T
    return _rms(rows, w["mm_projector.post_norm.weight"], PROJECTOR_EPS)
