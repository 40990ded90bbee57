# scripts/sluicepy/k3.py: Kimi K3's text model (k3.md §1-§2) as an oracle written
# from k3.md's equations, in f64: detection and the nested text_config, the K3-tiny
# tensor inventory (§6, vision tower included), Attention Residuals, KDA with the
# full-rank output gate and the bounded decay, MLA with the factorised query and the
# output gate, the latent MoE and SiTU. The KDA recurrence is kda.py's. Never fast-pathed.
import copy
import math

import numpy as np
import torch

from . import SluiceError, families, kda, mxfp4
from .mla import as_cached

ARCH = "kimi_k3"
PREFIX = "language_model."
VISION_PREFIXES = ("vision_tower.", "mm_projector.")
DTYPE = torch.float64

TINY = {
    "architectures": ["KimiK3ForConditionalGeneration"], "media_placeholder_token_id": 509,
    "text_config": {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
        "vocab_size": 512, "hidden_size": 128, "num_hidden_layers": 4, "intermediate_size": 256,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_experts": 8,
        "num_experts_per_token": 3, "num_shared_experts": 2, "moe_intermediate_size": 96,
        "routed_expert_hidden_size": 64, "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid", "moe_renormalize": True, "use_grouped_topk": True,
        "num_expert_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0,
        "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
        "mla_use_nope": True, "mla_use_output_gate": True, "hidden_act": "situ",
        "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "attn_res_block_size": 3,
        "linear_attn_config": {"kda_layers": [1, 3], "full_attn_layers": [2, 4], "num_heads": 4,
                               "head_dim": 32, "short_conv_kernel_size": 4, "use_full_rank_gate": True,
                               "gate_lower_bound": -5.0},
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": None,
        "tie_word_embeddings": False, "num_nextn_predict_layers": 0, "model_max_length": 4096,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
    "vision_config": {"patch_size": 14, "vt_hidden_size": 64, "vt_num_attention_heads": 2,
                      "qkv_hidden_size": 96, "vt_intermediate_size": 128, "vt_num_hidden_layers": 2,
                      "init_pos_emb_height": 8, "init_pos_emb_width": 8, "text_hidden_size": 128},
}

# What a missing text_config key means: off for every K3 feature (each on its own key).
_DEFAULTS = {"rms_norm_eps": 1e-6, "first_k_dense_replace": 0, "moe_layer_freq": 1, "num_shared_experts": 0,
             "moe_renormalize": True, "routed_scaling_factor": 1.0, "tie_word_embeddings": False,
             "q_lora_rank": None, "mla_use_output_gate": False, "routed_expert_hidden_size": None,
             "latent_moe_use_norm": False, "attn_res_block_size": None, "hidden_act": "silu",
             "activation_situ_beta": 4.0, "activation_situ_linear_beta": None, "num_nextn_predict_layers": 0}


def is_k3(config):
    """K3 ⇔ a text_config and an outer architectures[0] naming KimiK3 (k3.md §1.1)."""
    arch = config.get("architectures") if isinstance(config, dict) else None
    return (isinstance(config.get("text_config") if isinstance(config, dict) else None, dict)
            and isinstance(arch, list) and bool(arch) and isinstance(arch[0], str) and "KimiK3" in arch[0])


def tiny_config():
    return copy.deepcopy(TINY)


def resolve(config):
    """The text_config with K3's switches read by value; refuses what this oracle cannot run."""
    if not is_k3(config):
        raise SluiceError("config.json: not a Kimi K3 config (text_config and KimiK3 architectures)")
    c = dict(config["text_config"])
    if c.get("model_type", "kimi_linear") != "kimi_linear":
        raise SluiceError(f"config.json: text_config.model_type {c.get('model_type')!r} is not kimi_linear")
    for key, value in _DEFAULTS.items():
        if c.get(key) is None:
            c[key] = value
    if c["hidden_act"] not in ("silu", "situ"):
        raise SluiceError(f"config.json: hidden_act {c['hidden_act']!r} is not supported (silu or situ)")
    if c.get("mla_use_nope") is not True:
        raise SluiceError("config.json: only NoPE MLA (mla_use_nope true) is implemented")
    if c.get("moe_router_activation_func", "sigmoid") != "sigmoid":
        raise SluiceError("config.json: only sigmoid routing is implemented")
    if c.get("num_expert_group", 1) != 1:
        raise SluiceError("config.json: K3 routes in one group (num_expert_group 1)")
    if c["num_nextn_predict_layers"]:
        raise SluiceError("config.json: multi-token-prediction layers are not supported")
    linear = c["linear_attn_config"]
    c["linear_attn_config"] = dict({"use_full_rank_gate": False, "gate_lower_bound": None}, **linear)
    return c


def is_kda_layer(c, layer):
    return (layer + 1) in c["linear_attn_config"]["kda_layers"]


def is_moe_layer(c, layer):
    return layer >= c["first_k_dense_replace"] and layer % c["moe_layer_freq"] == 0


def latent_width(c):
    return c["routed_expert_hidden_size"] or c["hidden_size"]


def expert_names(c, layer, expert):
    p = f"{PREFIX}model.layers.{layer}.block_sparse_moe.experts.{expert}."
    return p + "w1.weight", p + "w3.weight", p + "w2.weight"


def _layer_shapes(c, i, shapes):
    hidden, p = c["hidden_size"], f"{PREFIX}model.layers.{i}."
    shapes[p + "input_layernorm.weight"] = [hidden]
    if c["attn_res_block_size"]:
        for site in ("self_attention_res", "mlp_res"):
            shapes[p + f"{site}_norm.weight"] = [hidden]
            shapes[p + f"{site}_proj.weight"] = [1, hidden]
    a = p + "self_attn."
    if is_kda_layer(c, i):
        linear = c["linear_attn_config"]
        heads, d, kernel = linear["num_heads"], linear["head_dim"], linear["short_conv_kernel_size"]
        width = heads * d
        for x in "qkv":
            shapes[a + f"{x}_proj.weight"] = [width, hidden]
        for x in "qkv":
            shapes[a + f"{x}_conv1d.weight"] = [width, 1, kernel]
        shapes[a + "f_a_proj.weight"] = [d, hidden]
        shapes[a + "f_b_proj.weight"] = [width, d]
        shapes[a + "b_proj.weight"] = [heads, hidden]
        full = linear["use_full_rank_gate"] is True
        shapes[a + "A_log"] = [1, 1, d if full else heads, 1]  # K3 pads A_log to head_dim
        shapes[a + "dt_bias"] = [width]
        if full:
            shapes[a + "g_proj.weight"] = [width, hidden]
        else:
            shapes[a + "g_a_proj.weight"] = [d, hidden]
            shapes[a + "g_b_proj.weight"] = [width, d]
        shapes[a + "o_norm.weight"] = [d]
        shapes[a + "o_proj.weight"] = [hidden, width]
    else:
        heads, qk = c["num_attention_heads"], c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        if c["q_lora_rank"]:
            shapes[a + "q_a_proj.weight"] = [c["q_lora_rank"], hidden]
            shapes[a + "q_a_layernorm.weight"] = [c["q_lora_rank"]]
            shapes[a + "q_b_proj.weight"] = [heads * qk, c["q_lora_rank"]]
        else:
            shapes[a + "q_proj.weight"] = [heads * qk, hidden]
        shapes[a + "kv_a_proj_with_mqa.weight"] = [c["kv_lora_rank"] + c["qk_rope_head_dim"], hidden]
        shapes[a + "kv_a_layernorm.weight"] = [c["kv_lora_rank"]]
        shapes[a + "kv_b_proj.weight"] = [heads * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]]
        if c["mla_use_output_gate"] is True:
            shapes[a + "g_proj.weight"] = [heads * c["v_head_dim"], hidden]
        shapes[a + "o_proj.weight"] = [hidden, heads * c["v_head_dim"]]
    shapes[p + "post_attention_layernorm.weight"] = [hidden]
    if is_moe_layer(c, i):
        m, width, latent = p + "block_sparse_moe.", c["moe_intermediate_size"], latent_width(c)
        shapes[m + "gate.weight"] = [c["num_experts"], hidden]
        shapes[m + "gate.e_score_correction_bias"] = [c["num_experts"]]
        if c["routed_expert_hidden_size"]:
            shapes[m + "routed_expert_down_proj.weight"] = [latent, hidden]
            if c["latent_moe_use_norm"] is True:
                shapes[m + "routed_expert_norm.weight"] = [latent]
            shapes[m + "routed_expert_up_proj.weight"] = [hidden, latent]
        shared = width * c["num_shared_experts"]
        if shared:
            shapes[m + "shared_experts.gate_proj.weight"] = [shared, hidden]
            shapes[m + "shared_experts.up_proj.weight"] = [shared, hidden]
            shapes[m + "shared_experts.down_proj.weight"] = [hidden, shared]
        for e in range(c["num_experts"]):
            gate, up, down = expert_names(c, i, e)
            shapes[gate], shapes[up], shapes[down] = [width, latent], [width, latent], [latent, width]
    else:
        dense = c["intermediate_size"]
        shapes[p + "mlp.gate_proj.weight"] = [dense, hidden]
        shapes[p + "mlp.up_proj.weight"] = [dense, hidden]
        shapes[p + "mlp.down_proj.weight"] = [hidden, dense]


def tensor_shapes(config, vision=False):
    """Names and shapes of the LM (and, when `vision`, the tower and projector of §4.1)."""
    c = resolve(config)
    hidden, vocab = c["hidden_size"], c["vocab_size"]
    shapes = {PREFIX + "model.embed_tokens.weight": [vocab, hidden]}
    for i in range(c["num_hidden_layers"]):
        _layer_shapes(c, i, shapes)
    if c["attn_res_block_size"]:
        shapes[PREFIX + "model.output_attn_res_norm.weight"] = [hidden]
        shapes[PREFIX + "model.output_attn_res_proj.weight"] = [1, hidden]
    shapes[PREFIX + "model.norm.weight"] = [hidden]
    if not c["tie_word_embeddings"]:
        shapes[PREFIX + "lm_head.weight"] = [vocab, hidden]
    if vision:
        shapes.update(_vision_shapes(config["vision_config"]))
    return shapes


def _vision_shapes(v):
    width, patch = v["vt_hidden_size"], v["patch_size"]
    qkv, inner, text = v["qkv_hidden_size"], v["vt_intermediate_size"], v["text_hidden_size"]
    t = "vision_tower."
    shapes = {t + "patch_embed.proj.weight": [width, 3, patch, patch],
              t + "patch_embed.pos_emb.weight": [v["init_pos_emb_height"], v["init_pos_emb_width"], width]}
    for b in range(v["vt_num_hidden_layers"]):
        p = f"{t}encoder.blocks.{b}."
        shapes[p + "norm0.weight"] = [width]
        shapes[p + "norm1.weight"] = [width]
        shapes[p + "wqkv.weight"] = [3 * qkv, width]
        shapes[p + "wo.weight"] = [width, qkv]
        shapes[p + "mlp.fc0.weight"] = [inner, width]
        shapes[p + "mlp.fc1.weight"] = [width, inner]
    shapes[t + "encoder.final_layernorm.weight"] = [width]
    merged = 4 * width
    shapes["mm_projector.proj.0.weight"] = [merged, merged]
    shapes["mm_projector.proj.2.weight"] = [text, merged]
    shapes["mm_projector.post_norm.weight"] = [text]
    return shapes


def init_std_and_mean(config, name):
    """(mean, std) of K3-tiny's random `name` (k3.md §6): its own tensors here, the
    rest by the shared rules of architectures §7 (families.init_std_and_mean)."""
    text = config["text_config"]
    if name.endswith("_res_proj.weight"):
        return 0.0, 2.0 / math.sqrt(text["hidden_size"])
    if name.endswith(("norm0.weight", "norm1.weight")):  # the vision tower's norms
        return 1.0, 0.1
    return families.init_std_and_mean(text, name)


def a_log_values(config, name, rng):
    """K3's padded A_log: ln U(1, 16) for the first num_heads values, exact zeros after."""
    linear = config["text_config"]["linear_attn_config"]
    values = np.zeros(linear["head_dim"], dtype=np.float32)
    values[:linear["num_heads"]] = np.log(rng.uniform(1.0, 16.0, size=linear["num_heads"]))
    return values.reshape(1, 1, -1, 1)


def rms_norm(x, weight, eps):
    return weight * (x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps))


def situ(g, u, beta, linear_beta):
    """β·tanh(g/β)·σ(g) · β_L·tanh(u/β_L) (k3.md §2.5); u unchanged without β_L."""
    up = u if linear_beta is None else linear_beta * torch.tanh(u / linear_beta)
    return beta * torch.tanh(g / beta) * torch.sigmoid(g) * up


def situ_f32(beta, linear_beta):
    """SiTU in numpy f32 for the engine's expert arithmetic (rvq_tables.ContainerExperts)."""
    b, lb = np.float32(beta), None if linear_beta is None else np.float32(linear_beta)

    def act(g, u):
        g, u = np.asarray(g, dtype=np.float32), np.asarray(u, dtype=np.float32)
        up = u if lb is None else lb * np.tanh(u / lb)
        with np.errstate(over="ignore"):
            return b * np.tanh(g / b) / (np.float32(1) + np.exp(-g)) * up
    return act


def attn_res(sources, norm, query, eps):
    """AR(V; n, p): softmax over sources of p · RMSNorm(V_i; n), mixing the raw V_i."""
    v = torch.stack(sources)  # [m, T, hidden]
    scores = (rms_norm(v, norm, eps) * query.reshape(-1)).sum(dim=-1)  # [m, T]
    weights = torch.softmax(scores, dim=0)
    return (weights[:, :, None] * v).sum(dim=0)


class Cache:
    def __init__(self, layers):
        self.layers = [{} for _ in range(layers)]
        self.length = 0


class K3Model:
    """Kimi K3's text model over a dict of HF-named tensors (prefixed), in f64.
    kda_chunk: None runs KDA token by token, N in the chunked form of chunk N.
    skip_final_mixture: reads the last partial sum instead of the output mixture
    (a wrong model, for the test that must notice it)."""

    def __init__(self, config, weights, kda_chunk=None, skip_final_mixture=False):
        self.config = c = resolve(config)
        self.kda_chunk, self.skip_final_mixture = kda_chunk, skip_final_mixture
        if any(name.endswith("weight" + mxfp4.PACKED) for name in weights):
            weights = mxfp4.decode_weights(weights)
        self.w = {}
        for name, shape in tensor_shapes(config).items():
            if name not in weights:
                raise SluiceError(f"weights lack tensor {name}")
            tensor = torch.as_tensor(np.asarray(weights[name])).to(DTYPE)
            if list(tensor.shape) != list(shape):
                raise SluiceError(f"tensor {name} has shape {list(tensor.shape)}, the config needs {shape}")
            self.w[name] = tensor
        if c["tie_word_embeddings"]:
            self.w[PREFIX + "lm_head.weight"] = self.w[PREFIX + "model.embed_tokens.weight"]
        self.layers, self.eps, self.vocab = c["num_hidden_layers"], c["rms_norm_eps"], c["vocab_size"]
        self.media_pad = config.get("media_placeholder_token_id")
        self.block = c["attn_res_block_size"]
        situ_on = c["hidden_act"] == "situ"
        self.beta, self.linear_beta = c["activation_situ_beta"], c["activation_situ_linear_beta"]
        self.expert_activation = situ_f32(self.beta, self.linear_beta) if situ_on else None
        self.act = ((lambda g, u: situ(g, u, self.beta, self.linear_beta)) if situ_on
                    else (lambda g, u: torch.nn.functional.silu(g) * u))
        self.expert_apply = None  # None: f64 matmuls; else f(layer, expert, latent rows) (rvq_tables.py)
        self.forced_routing = None  # None: the model chooses its experts; else a routing.ForcedRouting

    def new_cache(self):
        return Cache(self.layers)

    def _ffn(self, x, gate, up, down):
        return self.act(x @ gate.T, x @ up.T) @ down.T

    def _kda(self, i, x, cache):
        """§2.2 on top of architectures §4.3: the full-rank gate, the bounded decay, A_log per head."""
        p, w = f"{PREFIX}model.layers.{i}.self_attn.", self.w
        linear = self.config["linear_attn_config"]
        heads, d, kernel, steps = linear["num_heads"], linear["head_dim"], linear["short_conv_kernel_size"], x.shape[0]
        width = heads * d
        if "conv" not in cache:
            cache["conv"] = {n: torch.zeros(kernel - 1, width, dtype=DTYPE) for n in "qkv"}
            cache["state"] = torch.zeros(heads, d, d, dtype=DTYPE)
        qkv = {}
        for n in "qkv":
            pre, cache["conv"][n] = kda.short_conv(x @ w[p + f"{n}_proj.weight"].T, w[p + f"{n}_conv1d.weight"],
                                                   cache["conv"][n])
            qkv[n] = torch.nn.functional.silu(pre).view(steps, heads, d)
        z = ((x @ w[p + "f_a_proj.weight"].T) @ w[p + "f_b_proj.weight"].T + w[p + "dt_bias"]).view(steps, heads, d)
        rate = torch.exp(w[p + "A_log"].reshape(-1)[:heads])[:, None]  # the first `heads` of the padded tensor
        bound = linear["gate_lower_bound"]
        if bound is not None:
            g = bound * torch.sigmoid(rate * z)
        else:
            g = -rate * torch.nn.functional.softplus(z)
        beta = torch.sigmoid(x @ w[p + "b_proj.weight"].T)
        q = kda.l2_normalise(qkv["q"]) * d ** -0.5
        k = kda.l2_normalise(qkv["k"])
        args = (q, k, qkv["v"], g, beta, cache["state"])
        if self.kda_chunk is None:
            o, cache["state"] = kda.recurrent(*args)
        else:
            o, cache["state"] = kda.chunked(*args, self.kda_chunk)
        if linear["use_full_rank_gate"] is True:
            gate = x @ w[p + "g_proj.weight"].T
        else:
            gate = (x @ w[p + "g_a_proj.weight"].T) @ w[p + "g_b_proj.weight"].T
        o = rms_norm(o, w[p + "o_norm.weight"], self.eps) * torch.sigmoid(gate.view(steps, heads, d))
        return o.reshape(steps, width) @ w[p + "o_proj.weight"].T

    def _mla(self, i, x, cache):
        """Expanded NoPE MLA (§2.3): factorised query, full keys and values per head, output gate."""
        c, p, w = self.config, f"{PREFIX}model.layers.{i}.self_attn.", self.w
        heads, nope, rope, v_dim = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        latent, steps = c["kv_lora_rank"], x.shape[0]
        if c["q_lora_rank"]:
            q = rms_norm(x @ w[p + "q_a_proj.weight"].T, w[p + "q_a_layernorm.weight"], self.eps)
            q = q @ w[p + "q_b_proj.weight"].T
        else:
            q = x @ w[p + "q_proj.weight"].T
        q = q.view(steps, heads, nope + rope)
        kv_a = x @ w[p + "kv_a_proj_with_mqa.weight"].T
        compressed = as_cached(rms_norm(kv_a[:, :latent], w[p + "kv_a_layernorm.weight"], self.eps))
        rope_key = as_cached(kv_a[:, latent:])  # NoPE: cached and dotted unrotated
        if "latent" in cache:
            compressed = torch.cat([cache["latent"], compressed])
            rope_key = torch.cat([cache["rope"], rope_key])
        cache["latent"], cache["rope"] = compressed, rope_key
        total = compressed.shape[0]
        kv = (compressed @ w[p + "kv_b_proj.weight"].T).view(total, heads, nope + v_dim)
        keys = torch.cat([kv[:, :, :nope], rope_key[:, None, :].expand(total, heads, rope)], dim=-1)
        values = kv[:, :, nope:]
        scores = torch.einsum("thd,shd->hts", q, keys) / (nope + rope) ** 0.5
        positions = torch.arange(total - steps, total)
        hidden = torch.arange(total)[None, :] > positions[:, None]
        scores = scores.masked_fill(hidden[None], float("-inf"))
        out = torch.einsum("hts,shd->thd", torch.softmax(scores, dim=-1), values).reshape(steps, heads * v_dim)
        if c["mla_use_output_gate"] is True:
            out = out * torch.sigmoid(x @ w[p + "g_proj.weight"].T)
        return out @ w[p + "o_proj.weight"].T

    def route(self, i, b, positions=None):
        """σ on the full hidden state; s + bias chooses the top-k (ties to the lower id),
        unless self.forced_routing names the experts;
        the weights are the unbiased s, renormalised (k > 1) and scaled (k3.md §2.4)."""
        c, m = self.config, f"{PREFIX}model.layers.{i}.block_sparse_moe."
        scores = torch.sigmoid(b @ self.w[m + "gate.weight"].T)
        choice = scores + self.w[m + "gate.e_score_correction_bias"]
        k = c["num_experts_per_token"]
        if self.forced_routing is None:
            ids = torch.sort(choice, dim=-1, descending=True, stable=True).indices[:, :k]
        else:
            ids = self.forced_routing.chosen(i, positions)
        weights = torch.gather(scores, 1, ids)
        if c["moe_renormalize"] is True and k > 1:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return ids, weights * c["routed_scaling_factor"]

    def _moe(self, i, b, trace, positions):
        c, m = self.config, f"{PREFIX}model.layers.{i}.block_sparse_moe."
        ids, weights = self.route(i, b, positions)
        if trace is not None:
            trace.append((i, ids.clone(), weights.clone()))
        latent = b @ self.w[m + "routed_expert_down_proj.weight"].T if c["routed_expert_hidden_size"] else b
        outputs = torch.zeros(b.shape[0], ids.shape[1], latent.shape[1], dtype=DTYPE)
        for e in torch.unique(ids).tolist():
            rows, slots = (ids == e).nonzero(as_tuple=True)
            if self.expert_apply is not None:
                outputs[rows, slots] = self.expert_apply(i, e, latent[rows]).to(DTYPE)
                continue
            gate, up, down = expert_names(c, i, e)
            outputs[rows, slots] = self._ffn(latent[rows], self.w[gate], self.w[up], self.w[down])
        routed = torch.zeros_like(latent)
        for slot in range(ids.shape[1]):
            routed = routed + weights[:, slot:slot + 1] * outputs[:, slot]
        if c["routed_expert_hidden_size"]:
            if c["latent_moe_use_norm"] is True:
                routed = rms_norm(routed, self.w[m + "routed_expert_norm.weight"], self.eps)
            routed = routed @ self.w[m + "routed_expert_up_proj.weight"].T
        s = m + "shared_experts."
        if s + "gate_proj.weight" in self.w:
            routed = routed + self._ffn(b, self.w[s + "gate_proj.weight"], self.w[s + "up_proj.weight"],
                                        self.w[s + "down_proj.weight"])
        return routed

    def _mix(self, blocks, live, site):
        if not self.block:
            return live
        return attn_res(blocks + [live], self.w[site + "_norm.weight"], self.w[site + "_proj.weight"], self.eps)

    def forward(self, token_ids, cache, trace=None, media_rows=None):
        """Feeds `token_ids` after what `cache` holds; returns logits [T, vocab] (f64).
        `trace`, when a list, receives (layer, expert ids, weights) per MoE layer.
        `media_rows` [pads, hidden]: the input embeddings of the media pad tokens in
        order (§4.3: the embedding table is not used for them)."""
        ids = torch.as_tensor(token_ids, dtype=torch.int64)
        if ids.numel() == 0 or ids.min() < 0 or ids.max() >= self.vocab:
            raise SluiceError(f"token ids must be non-empty and in [0, {self.vocab})")
        partial = self.w[PREFIX + "model.embed_tokens.weight"][ids]
        positions = torch.arange(cache.length, cache.length + ids.numel())
        if media_rows is not None:
            pads = ids == self.media_pad
            if int(pads.sum()) != media_rows.shape[0]:
                raise SluiceError(f"{int(pads.sum())} media pad tokens for {media_rows.shape[0]} image rows")
            partial = partial.clone()
            partial[pads] = torch.as_tensor(media_rows).to(DTYPE)
        blocks = []
        for i in range(self.layers):
            p = f"{PREFIX}model.layers.{i}."
            a = partial if not blocks else self._mix(blocks, partial, p + "self_attention_res")
            if self.block and i % self.block == 0:  # layer 0 stores the embedding
                blocks.append(partial)
                partial = torch.zeros_like(partial)
            x = rms_norm(a, self.w[p + "input_layernorm.weight"], self.eps)
            mixer = self._kda if is_kda_layer(self.config, i) else self._mla
            partial = partial + mixer(i, x, cache.layers[i])
            f = self._mix(blocks, partial, p + "mlp_res")
            b = rms_norm(f, self.w[p + "post_attention_layernorm.weight"], self.eps)
            if is_moe_layer(self.config, i):
                partial = partial + self._moe(i, b, trace, positions)
            else:
                partial = partial + self._ffn(b, self.w[p + "mlp.gate_proj.weight"], self.w[p + "mlp.up_proj.weight"],
                                              self.w[p + "mlp.down_proj.weight"])
        y = partial if self.skip_final_mixture else self._mix(blocks, partial, PREFIX + "model.output_attn_res")
        cache.length += ids.numel()
        return rms_norm(y, self.w[PREFIX + "model.norm.weight"], self.eps) @ self.w[PREFIX + "lm_head.weight"].T
