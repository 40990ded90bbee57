# scripts/sluicepy/mla.py: DeepSeek-V3 / Kimi K2 multi-head latent attention
# (architectures.md §3.4) in two forms over the same weights: EXPANDED (what HF
# caches: full keys and values per head; the oracle) and ABSORBED (what the
# engine caches: the latent and the rotated rope key). Never mixes the two caches.
# Both start from the engine's cached latent and rope key (halves with int8 activations).
# Kimi-Linear's NoPE variant (§4.4): the rope dims are kept, cached and scored unrotated.
import contextlib

import torch

from . import rope
from .ops import rms_norm

EXPANDED, ABSORBED = "expanded", "absorbed"
FORMS = (EXPANDED, ABSORBED)
# q_a_layernorm / kv_a_layernorm are built with the RMSNorm class default, not rms_norm_eps.
LATENT_NORM_EPS = 1e-6
HALF_MAX = 65504.0


_half_cache = [False]


@contextlib.contextmanager
def cached_as_halves():
    """While active, as_cached models the engine with int8 trunk activations, whose MLA
    cache holds IEEE halves; with f32 activations (the exact path) it caches f32."""
    _half_cache[0] = True
    try:
        yield
    finally:
        _half_cache[0] = False


def as_cached(t):
    """What the engine's cache keeps of a latent or rope key: under cached_as_halves,
    IEEE halves saturated at f16's largest finite value (compute/model/mla_mixer.cpp),
    the sums staying in t's dtype; otherwise t itself."""
    if not _half_cache[0]:
        return t
    return t.clamp(-HALF_MAX, HALF_MAX).to(torch.float16).to(t.dtype)


class Mla:
    """One model's MLA geometry and frequencies; per-layer state lives in the cache."""

    def __init__(self, config, weights, dtype):
        c = config
        self.w, self.heads = weights, c["num_attention_heads"]
        self.nope, self.rope, self.v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.rank, self.q_rank = c["kv_lora_rank"], c["q_lora_rank"]
        self.use_nope = bool(c.get("mla_use_nope"))
        if self.use_nope:  # no rotation anywhere, softmax scale (nope + rope)^-1/2 without YaRN
            self.scale, self.rotate = (self.nope + self.rope) ** -0.5, None
        else:
            self.inv_freq, self.multiplier = rope.frequencies(self.rope, c["rope_theta"], c["rope_scaling"], dtype)
            self.scale = (self.nope + self.rope) ** -0.5 * rope.softmax_mscale_squared(c["rope_scaling"])
            self.rotate = rope.rotate_adjacent if c["rope_interleave"] else rope.rotate_half_split

    def _project(self, i, x, positions):
        """(q_nope [T,H,n], q_rope [T,H,r] rotated, latent [T,R] normed, k_rope [T,r] rotated;
        both rope parts unrotated under NoPE)."""
        p, w, T = f"model.layers.{i}.self_attn.", self.w, x.shape[0]
        if self.q_rank is None:
            q = x @ w[p + "q_proj.weight"].T
        else:
            q = rms_norm(x @ w[p + "q_a_proj.weight"].T, w[p + "q_a_layernorm.weight"], LATENT_NORM_EPS)
            q = q @ w[p + "q_b_proj.weight"].T
        q = q.view(T, self.heads, self.nope + self.rope)
        a = x @ w[p + "kv_a_proj_with_mqa.weight"].T
        latent = rms_norm(a[:, :self.rank], w[p + "kv_a_layernorm.weight"], LATENT_NORM_EPS)
        q_rope, k_rope = q[:, :, self.nope:], a[:, self.rank:]
        if self.rotate is not None:
            cos, sin = rope.cos_sin(positions, self.inv_freq, self.multiplier)
            q_rope = self.rotate(q_rope, cos, sin)
            k_rope = self.rotate(k_rope[:, None], cos, sin)[:, 0]
        return q[:, :, :self.nope], q_rope, as_cached(latent), as_cached(k_rope)

    def _kv_b(self, i):
        """kv_b_proj as [H, n + v, R]: per head the key half, then the value half."""
        return self.w[f"model.layers.{i}.self_attn.kv_b_proj.weight"].view(self.heads, self.nope + self.v, self.rank)

    def _softmax(self, scores, positions, key_count):
        key_pos = torch.arange(key_count)
        scores = scores.masked_fill(key_pos[None, None, :] > positions[None, :, None], float("-inf"))
        return torch.softmax(scores, dim=-1)

    def expanded(self, i, x, positions, state):
        q_nope, q_rope, latent, k_rope = self._project(i, x, positions)
        T = x.shape[0]
        kv = torch.einsum("hor,tr->tho", self._kv_b(i), latent)  # [T, H, n + v]
        keys = torch.cat([kv[:, :, :self.nope], k_rope[:, None, :].expand(T, self.heads, self.rope)], dim=-1)
        values = kv[:, :, self.nope:]
        if "keys" in state:
            keys, values = torch.cat([state["keys"], keys]), torch.cat([state["values"], values])
        state["keys"], state["values"] = keys, values
        query = torch.cat([q_nope, q_rope], dim=-1)
        probs = self._softmax(torch.einsum("thd,shd->hts", query, keys) * self.scale, positions, keys.shape[0])
        out = torch.einsum("hts,shd->thd", probs, values).reshape(T, self.heads * self.v)
        return out @ self.w[f"model.layers.{i}.self_attn.o_proj.weight"].T

    def absorbed(self, i, x, positions, state):
        q_nope, q_rope, latent, k_rope = self._project(i, x, positions)
        T = x.shape[0]
        if "latent" in state:
            latent, k_rope = torch.cat([state["latent"], latent]), torch.cat([state["k_rope"], k_rope])
        state["latent"], state["k_rope"] = latent, k_rope
        kv_b = self._kv_b(i)
        w_uk, w_uv = kv_b[:, :self.nope], kv_b[:, self.nope:]
        q_latent = torch.einsum("thn,hnr->thr", q_nope, w_uk)  # the key half folded into the query
        scores = torch.einsum("thr,sr->hts", q_latent, latent) + torch.einsum("thd,sd->hts", q_rope, k_rope)
        probs = self._softmax(scores * self.scale, positions, latent.shape[0])
        mixed = torch.einsum("hts,sr->thr", probs, latent)
        out = torch.einsum("thr,hvr->thv", mixed, w_uv).reshape(T, self.heads * self.v)  # value half after the mix
        return out @ self.w[f"model.layers.{i}.self_attn.o_proj.weight"].T
