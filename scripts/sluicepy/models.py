# scripts/sluicepy/models.py: PyTorch forward passes of every family written
# from architectures.md §0-§5 (GQA here, MLA in mla.py, KDA in kda.py, routing in routing.py),
# with a per-layer cache. It is the oracle the engine is checked against: plain,
# explicit, never fast-pathed; f32 by default, f64 on request.
import torch

from . import SluiceError, families, kda, mla, rope, routing
from .ops import rms_norm, swiglu


class Cache:
    """Per-layer state of one sequence (keys/values, or MLA's latent and rope key)."""

    def __init__(self, layers):
        self.layers = [{} for _ in range(layers)]
        self.length = 0


class MoeModel:
    """One family's decoder over a dict of HF-named tensors.

    mla_form: "expanded" (the oracle) or "absorbed" (DeepSeek / K2 only).
    exclusion: how DeepSeek-style routing excludes unkept groups ("zero": the
    released HF code; "neg-inf": DeepSeek's inference script).
    kda_chunk: Kimi-Linear's KDA token by token (None, the oracle) or chunked in N.
    moe_weights: overrides the config's sluice_moe_weights (Kimi-Linear)."""

    def __init__(self, config, weights, mla_form=mla.EXPANDED, exclusion=routing.EXCLUDE_ZERO,
                 dtype=torch.float32, kda_chunk=None, moe_weights=None):
        if mla_form not in mla.FORMS or exclusion not in routing.EXCLUSIONS:
            raise SluiceError(f"mla_form {mla_form!r} / exclusion {exclusion!r} not in {mla.FORMS} / "
                              f"{routing.EXCLUSIONS}")
        if kda_chunk is not None and kda_chunk < 1:
            raise SluiceError(f"kda chunk {kda_chunk} must be >= 1")
        if moe_weights is not None:
            config = dict(config, **{families.MOE_WEIGHTS_KEY: moe_weights})
        self.config = c = families.resolve(config)
        self.family = families.family_of(c)
        self.dtype = dtype
        self.w = {}
        for name, shape in families.tensor_shapes(c).items():
            if name not in weights:
                raise SluiceError(f"weights lack tensor {name}")
            tensor = torch.as_tensor(weights[name]).to(dtype)
            if list(tensor.shape) != list(shape):
                raise SluiceError(f"tensor {name} has shape {list(tensor.shape)}, the config needs {shape}")
            self.w[name] = tensor
        if c["tie_word_embeddings"]:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.layers, self.eps, self.vocab = c["num_hidden_layers"], c["rms_norm_eps"], c["vocab_size"]
        self.heads = c["num_attention_heads"]
        self.exclusion = exclusion
        if self.family in families.GQA_FAMILIES:
            self.kv_heads, self.head_dim = c["num_key_value_heads"], families.head_dim(c)
            self.inv_freq, self.multiplier = rope.frequencies(self.head_dim, c["rope_theta"], c["rope_scaling"],
                                                              dtype)
            self.mixer = self._attention
        else:
            self.mla = mla.Mla(c, self.w, dtype)
            attention = self.mla.expanded if mla_form == mla.EXPANDED else self.mla.absorbed
            self.kda = kda.Kda(c, self.w, kda_chunk) if self.family == "kimi_linear" else None
            self.mixer = lambda i, *args: (self.kda if families.is_kda_layer(c, i) else attention)(i, *args)
        self.expert_apply = None  # None: f32 matmuls on the weights; else f(layer, expert, rows) (rvq_tables.py)
        self.forced_routing = None  # None: the model chooses its experts; else a routing.ForcedRouting

    def new_cache(self):
        return Cache(self.layers)

    def _attention(self, i, a, positions, state):
        """GQA causal attention (§0.7) with each family's q/k norms (§1.3, §2.3) and Mixtral's window."""
        p, c, T, d = f"model.layers.{i}.self_attn.", self.config, a.shape[0], self.head_dim
        q, k, v = (a @ self.w[p + f"{x}_proj.weight"].T for x in "qkv")
        if self.family == "olmoe":  # one norm over all heads together, before the split
            q = rms_norm(q, self.w[p + "q_norm.weight"], self.eps)
            k = rms_norm(k, self.w[p + "k_norm.weight"], self.eps)
            if c["clip_qkv"] is not None:
                q, k, v = (t.clamp(-c["clip_qkv"], c["clip_qkv"]) for t in (q, k, v))
        q, k, v = q.view(T, self.heads, d), k.view(T, self.kv_heads, d), v.view(T, self.kv_heads, d)
        if self.family == "qwen3_moe":  # one shared weight, applied to every head
            q = rms_norm(q, self.w[p + "q_norm.weight"], self.eps)
            k = rms_norm(k, self.w[p + "k_norm.weight"], self.eps)
        cos, sin = rope.cos_sin(positions, self.inv_freq, self.multiplier)
        q, k = rope.rotate_half_split(q, cos, sin), rope.rotate_half_split(k, cos, sin)
        if "keys" in state:
            k, v = torch.cat([state["keys"], k]), torch.cat([state["values"], v])
        state["keys"], state["values"] = k, v
        group = self.heads // self.kv_heads  # query head h reads kv head h // group
        keys, values = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("thd,shd->hts", q, keys) / d ** 0.5
        key_pos = torch.arange(k.shape[0])
        hidden = key_pos[None, :] > positions[:, None]
        if c.get("sliding_window") is not None:  # HF: a key is visible while t - s < window
            hidden = hidden | (positions[:, None] - key_pos[None, :] >= c["sliding_window"])
        scores = scores.masked_fill(hidden[None], float("-inf"))
        out = torch.einsum("hts,shd->thd", torch.softmax(scores, dim=-1), values).reshape(T, self.heads * d)
        return out @ self.w[p + "o_proj.weight"].T

    def _route(self, i, b, positions=None):
        c, m = self.config, families.moe_prefix(self.config, i)
        logits = b @ self.w[m + "gate.weight"].T
        chosen = None if self.forced_routing is None else self.forced_routing.chosen(i, positions)
        if self.family in families.MLA_FAMILIES:
            return routing.route_sigmoid_grouped(logits, self.w[m + "gate.e_score_correction_bias"],
                                                 c["num_experts_per_tok"], c["n_group"], c["topk_group"],
                                                 c["norm_topk_prob"], c["routed_scaling_factor"], self.exclusion,
                                                 chosen=chosen)
        if self.family == "kimi_linear":  # the released code renormalises only when k > 1
            k = c["num_experts_per_token"]
            return routing.route_sigmoid_grouped(logits, self.w[m + "gate.e_score_correction_bias"], k,
                                                 c["num_expert_group"], c["topk_group"],
                                                 c["moe_renormalize"] and k > 1, c["routed_scaling_factor"],
                                                 routing.EXCLUDE_ZERO,
                                                 biased_weights=c[families.MOE_WEIGHTS_KEY] == "biased",
                                                 chosen=chosen)
        renormalise = True if self.family == "mixtral" else c["norm_topk_prob"]  # Mixtral always renormalises
        return routing.route_softmax(logits, c["num_experts_per_tok"], renormalise, chosen)

    def _moe(self, i, b, trace, positions):
        ids, weights = self._route(i, b, positions)
        if trace is not None:
            trace.append((i, ids.clone(), weights.clone()))
        outputs = torch.zeros(b.shape[0], ids.shape[1], b.shape[1], dtype=self.dtype)
        for e in torch.unique(ids).tolist():
            rows, slots = (ids == e).nonzero(as_tuple=True)
            if self.expert_apply is not None:  # the engine's expert arithmetic (rvq_tables.py)
                outputs[rows, slots] = self.expert_apply(i, e, b[rows])
                continue
            gate, up, down = families.expert_names(self.config, i, e)
            outputs[rows, slots] = swiglu(b[rows], self.w[gate], self.w[up], self.w[down])
        total = torch.zeros_like(b)
        for slot in range(ids.shape[1]):  # summed in routing order, like the engine
            total = total + weights[:, slot:slot + 1] * outputs[:, slot]
        shared = families.moe_prefix(self.config, i) + "shared_experts."
        if shared + "gate_proj.weight" in self.w:
            total = total + swiglu(b, self.w[shared + "gate_proj.weight"], self.w[shared + "up_proj.weight"],
                                   self.w[shared + "down_proj.weight"])
        return total

    def forward(self, token_ids, cache, trace=None):
        """Feeds `token_ids` after what `cache` holds; returns logits [T, vocab].

        `trace`, when a list, receives (layer, expert ids, weights) per MoE layer."""
        ids = torch.as_tensor(token_ids, dtype=torch.int64)
        if ids.numel() == 0 or ids.min() < 0 or ids.max() >= self.vocab:
            raise SluiceError(f"token ids must be non-empty and in [0, {self.vocab})")
        positions = torch.arange(cache.length, cache.length + ids.numel())
        h = self.w["model.embed_tokens.weight"][ids]
        for i in range(self.layers):
            p = f"model.layers.{i}."
            a = rms_norm(h, self.w[p + "input_layernorm.weight"], self.eps)
            h = h + self.mixer(i, a, positions, cache.layers[i])
            b = rms_norm(h, self.w[p + "post_attention_layernorm.weight"], self.eps)
            if families.is_moe_layer(self.config, i):
                h = h + self._moe(i, b, trace, positions)
            else:
                h = h + swiglu(b, self.w[p + "mlp.gate_proj.weight"], self.w[p + "mlp.up_proj.weight"],
                               self.w[p + "mlp.down_proj.weight"])
        cache.length += ids.numel()
        return rms_norm(h, self.w["model.norm.weight"], self.eps) @ self.w["lm_head.weight"].T
