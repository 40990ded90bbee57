# scripts/sluicepy/models.py: PyTorch f32 forward passes of OLMoE and Qwen3-MoE
# written from architectures.md §0, §1.3 and §2.3, with a KV cache. It is the
# oracle the engine is checked against: plain, explicit, never fast-pathed.
import torch

from . import SluiceError, families


def rms_norm(x, weight, eps):
    return weight * (x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps))


def rope_half_split(x, positions, theta):
    """x: [T, heads, d]; element i pairs with i + d/2 (NeoX pairing), f32 like HF."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    angles = positions.float()[:, None] * inv_freq[None, :]          # [T, d/2]
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)[:, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)[:, None, :]
    rotated = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
    return x * cos + rotated * sin


def swiglu(x, gate, up, down):
    return torch.nn.functional.silu(x @ gate.T) * (x @ up.T) @ down.T


def route(logits, top_k, renormalise):
    """Softmax over all experts, then the top_k largest probabilities.

    Ties go to the lower expert id: a stable descending sort keeps index order
    among equal values. Returns (expert ids [T, k], weights [T, k]) in routing
    order (largest probability first)."""
    probs = torch.softmax(logits, dim=-1)
    order = torch.sort(probs, dim=-1, descending=True, stable=True).indices[:, :top_k]
    weights = torch.gather(probs, 1, order)
    if renormalise:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return order, weights


class KvCache:
    def __init__(self, layers):
        self.keys = [None] * layers
        self.values = [None] * layers
        self.length = 0


class MoeModel:
    """OLMoE or Qwen3-MoE over a dict of HF-named f32 tensors."""

    def __init__(self, config, weights):
        self.config = config
        self.family = families.family_of(config)
        self.w = {}
        for name, shape in families.tensor_shapes(config).items():
            if name not in weights:
                raise SluiceError(f"weights lack tensor {name}")
            tensor = torch.as_tensor(weights[name], dtype=torch.float32)
            if list(tensor.shape) != list(shape):
                raise SluiceError(f"tensor {name} has shape {list(tensor.shape)}, the config needs {shape}")
            self.w[name] = tensor
        if config.get("tie_word_embeddings", False):
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config["num_key_value_heads"]
        self.head_dim = families.head_dim(config)
        self.eps = config["rms_norm_eps"]
        self.vocab = config["vocab_size"]
        self.expert_apply = None  # None: f32 matmuls on the weights; else f(layer, expert, rows)
        self.linear_apply = None  # None: f32 matmuls; else f(name, x), None for a tensor it leaves to us

    def _linear(self, name, x):
        """x @ W.T, or the engine's trunk arithmetic when linear_apply is set (trunk_int16.py)."""
        y = self.linear_apply(name, x) if self.linear_apply is not None else None
        return x @ self.w[name].T if y is None else y

    def _dense_mlp(self, p, b):
        if self.linear_apply is None:
            return swiglu(b, self.w[p + "gate_proj.weight"], self.w[p + "up_proj.weight"], self.w[p + "down_proj.weight"])
        h = torch.nn.functional.silu(self._linear(p + "gate_proj.weight", b)) * self._linear(p + "up_proj.weight", b)
        return self._linear(p + "down_proj.weight", h)

    def new_cache(self):
        return KvCache(self.layers)

    def _attention(self, i, a, positions, cache):
        p, c, T, d = f"model.layers.{i}.self_attn.", self.config, a.shape[0], self.head_dim
        q, k, v = (self._linear(p + f"{x}_proj.weight", a) for x in "qkv")
        if self.family == "olmoe":  # one norm over all heads together, before the split
            q = rms_norm(q, self.w[p + "q_norm.weight"], self.eps)
            k = rms_norm(k, self.w[p + "k_norm.weight"], self.eps)
            if c.get("clip_qkv") is not None:
                q, k, v = (t.clamp(-c["clip_qkv"], c["clip_qkv"]) for t in (q, k, v))
        q, k, v = q.view(T, self.heads, d), k.view(T, self.kv_heads, d), v.view(T, self.kv_heads, d)
        if self.family == "qwen3_moe":  # one shared weight, applied to every head
            q = rms_norm(q, self.w[p + "q_norm.weight"], self.eps)
            k = rms_norm(k, self.w[p + "k_norm.weight"], self.eps)
        q = rope_half_split(q, positions, c["rope_theta"])
        k = rope_half_split(k, positions, c["rope_theta"])
        if cache.keys[i] is not None:
            k, v = torch.cat([cache.keys[i], k]), torch.cat([cache.values[i], v])
        cache.keys[i], cache.values[i] = k, v
        group = self.heads // self.kv_heads  # query head h reads kv head h // group
        keys, values = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("thd,shd->hts", q, keys) / d ** 0.5
        key_pos = torch.arange(k.shape[0])
        scores = scores.masked_fill(key_pos[None, None, :] > positions[None, :, None], float("-inf"))
        out = torch.einsum("hts,shd->thd", torch.softmax(scores, dim=-1), values).reshape(T, self.heads * d)
        return self._linear(p + "o_proj.weight", out)

    def _moe(self, i, b, trace):
        p, c = f"model.layers.{i}.mlp.", self.config
        ids, weights = route(b @ self.w[p + "gate.weight"].T, c["num_experts_per_tok"], c["norm_topk_prob"])
        if trace is not None:
            trace.append((i, ids.clone(), weights.clone()))
        outputs = torch.zeros(b.shape[0], ids.shape[1], b.shape[1])
        for e in torch.unique(ids).tolist():
            rows, slots = (ids == e).nonzero(as_tuple=True)
            q = f"{p}experts.{e}."
            if self.expert_apply is not None:  # the engine's expert arithmetic (rvq_int16.py)
                outputs[rows, slots] = self.expert_apply(i, e, b[rows])
                continue
            outputs[rows, slots] = swiglu(b[rows], self.w[q + "gate_proj.weight"], self.w[q + "up_proj.weight"],
                                          self.w[q + "down_proj.weight"])
        total = torch.zeros_like(b)
        for slot in range(ids.shape[1]):  # summed in routing order, like the engine
            total = total + weights[:, slot:slot + 1] * outputs[:, slot]
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
            h = h + self._attention(i, rms_norm(h, self.w[p + "input_layernorm.weight"], self.eps), positions, cache)
            b = rms_norm(h, self.w[p + "post_attention_layernorm.weight"], self.eps)
            if families.is_moe_layer(self.config, i):
                h = h + self._moe(i, b, trace)
            else:
                h = h + self._dense_mlp(p + "mlp.", b)
        cache.length += ids.numel()
        return self._linear("lm_head.weight", rms_norm(h, self.w["model.norm.weight"], self.eps))
