# scripts/sluicepy/families.py: what each supported family's checkpoint holds:
# the Hugging Face config-class defaults (one table), the keys refused by name,
# the tiny configs (tiny_configs.py), tensor names and shapes, layer types. No weights, no math.
import argparse
import copy
import json
import math
import sys

from . import SluiceError
from .tiny_configs import TINY

FAMILIES = ("olmoe", "qwen3_moe", "deepseek_v3", "kimi_k2", "mixtral", "kimi_linear")
MLA_FAMILIES = ("deepseek_v3", "kimi_k2")  # DeepSeek's MLA, routing and key names
GQA_FAMILIES = ("olmoe", "qwen3_moe", "mixtral")

# What Hugging Face's config class holds when a key is missing from config.json.
# olmoe, qwen3_moe, mixtral: transformers' OlmoeConfig / Qwen3MoeConfig / MixtralConfig.
# deepseek_v3: transformers' DeepseekV3Config plus the keys only the released remote
# code (configuration_deepseek.py) has (moe_layer_freq, topk_method, scoring_func,
# num_nextn_predict_layers); kimi_k2 ships that same remote class.
_DEEPSEEK_DEFAULTS = {
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "norm_topk_prob": True, "topk_method": "noaux_tc",
    "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "rope_theta": 10000.0, "rope_scaling": None, "rope_interleave": True,
    "attention_bias": False, "num_nextn_predict_layers": 1, "bos_token_id": 0, "eos_token_id": 1,
}
CLASS_DEFAULTS = {
    "olmoe": {
        "vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048, "num_hidden_layers": 16,
        "num_attention_heads": 16, "num_key_value_heads": None, "hidden_act": "silu",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "clip_qkv": None,
        "num_experts_per_tok": 8, "num_experts": 64, "norm_topk_prob": False,
        "bos_token_id": None, "eos_token_id": 50279, "pad_token_id": 1,
    },
    "qwen3_moe": {
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": None, "hidden_act": "silu",
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
        "use_sliding_window": False, "sliding_window": 4096, "decoder_sparse_step": 1,
        "moe_intermediate_size": 768, "num_experts_per_tok": 8, "num_experts": 128,
        "norm_topk_prob": False, "mlp_only_layers": None, "bos_token_id": None, "eos_token_id": None,
    },
    "deepseek_v3": _DEEPSEEK_DEFAULTS,
    "kimi_k2": _DEEPSEEK_DEFAULTS,
    "mixtral": {
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": None, "hidden_act": "silu",
        "max_position_embeddings": 4096 * 32, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "rope_theta": 1e6, "rope_scaling": None, "sliding_window": None, "num_experts_per_tok": 2,
        "num_local_experts": 8, "bos_token_id": 1, "eos_token_id": 2,
    },
    # The released remote code's KimiLinearConfig (configuration_kimi.py of Kimi-Linear-48B-A3B).
    "kimi_linear": {
        "vocab_size": 163840, "hidden_size": 4096, "head_dim": None, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": None, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "rope_theta": 10000.0,
        "rope_scaling": None, "tie_word_embeddings": False, "moe_intermediate_size": None,
        "moe_renormalize": True, "moe_router_activation_func": "sigmoid", "num_experts": None,
        "num_experts_per_token": None, "num_shared_experts": 0, "routed_scaling_factor": 1.0,
        "first_k_dense_replace": 0, "moe_layer_freq": 1, "use_grouped_topk": True, "num_expert_group": 1,
        "topk_group": 1, "q_lora_rank": None, "kv_lora_rank": None, "qk_nope_head_dim": None,
        "qk_rope_head_dim": None, "v_head_dim": None, "mla_use_nope": False, "num_nextn_predict_layers": 0,
        "linear_attn_config": None, "model_max_length": None,
    },
}
# sluice's own keys (not Hugging Face's) and their defaults. sluice_moe_weights picks the
# weights of Kimi-Linear's routed experts (architectures.md §4.5, §10.2): "biased" = the
# released modeling_kimi.py, whose in-place add on a view makes the gathered weights s + bias;
# "unbiased" = vLLM and WASTE, the plain sigmoid s. The engine reads the same key.
MOE_WEIGHTS_KEY = "sluice_moe_weights"
MOE_WEIGHTS = ("biased", "unbiased")
SLUICE_DEFAULTS = {"kimi_linear": {MOE_WEIGHTS_KEY: "biased"}}
# Keys of a later Kimi release that reuses model_type kimi_linear (§4.1): refused by name
# whenever present with a value other than null/false.
KIMI_VARIANT_KEYS = ("routed_expert_hidden_size", "latent_moe_use_norm", "attn_res_block_size",
                     "mla_use_output_gate", "text_config")
KIMI_VARIANT_KDA_KEYS = ("use_full_rank_gate", "gate_lower_bound")
# The classes' attribute_map: an alias key in config.json sets the canonical one.
ALIASES = {"olmoe": {"num_local_experts": "num_experts"}, "qwen3_moe": {"num_local_experts": "num_experts"},
           "deepseek_v3": {"num_local_experts": "n_routed_experts"},
           "kimi_k2": {"num_local_experts": "n_routed_experts"}, "mixtral": {"num_experts": "num_local_experts"},
           "kimi_linear": {}}
# Keys whose null the classes (or their modeling code) replace; any other null is refused.
_NULL_MEANS = {
    "num_key_value_heads": lambda c: c["num_attention_heads"],
    "head_dim": lambda c: c["hidden_size"] // c["num_attention_heads"],
    "mlp_only_layers": lambda c: [],
}
_MAY_BE_NULL_BY_FAMILY = {"kimi_linear": {"model_max_length", "linear_attn_config"}}
_MAY_BE_NULL = {"rope_scaling", "clip_qkv", "sliding_window", "q_lora_rank", "bos_token_id", "eos_token_id",
                "pad_token_id"}
_ROPE_KEYS = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
              "attention_factor", "truncate")


def tiny_config(family):
    if family not in TINY:
        raise SluiceError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    return copy.deepcopy(TINY[family])


def family_of(config):
    family = config.get("model_type")
    if family not in FAMILIES:
        raise SluiceError(f"config.json: model_type {family!r} is not supported "
                          f"(supported: {', '.join(FAMILIES)})")
    return family


def _rope(config):
    """(theta, scaling dict or None) from rope_theta/rope_scaling or a rope_parameters dict."""
    params = config.get("rope_parameters")
    if params is not None:
        if not isinstance(params, dict):
            raise SluiceError("config.json: rope_parameters must be an object")
        theta = params.get("rope_theta", config["rope_theta"])
        scaling = dict(params)
    else:
        theta, scaling = config["rope_theta"], config["rope_scaling"]
        scaling = dict(scaling) if isinstance(scaling, dict) else scaling
    if scaling is not None and not isinstance(scaling, dict):
        raise SluiceError("config.json: rope_scaling must be an object or null")
    kind = None if scaling is None else (scaling.get("rope_type") or scaling.get("type") or "default")
    partial = (scaling or {}).get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0):
        raise SluiceError(f"config.json: partial_rotary_factor {partial} is not supported (only 1.0)")
    if kind in (None, "default"):
        return float(theta), None
    if kind != "yarn":
        raise SluiceError(f"config.json: rope_scaling type {kind!r} is not supported (only yarn)")
    if not isinstance(scaling.get("factor"), (int, float)) or scaling["factor"] < 1:
        raise SluiceError("config.json: rope_scaling.factor must be a number >= 1")
    out = {k: scaling[k] for k in _ROPE_KEYS if scaling.get(k) is not None}
    if "truncate" in scaling and scaling["truncate"] is None:
        out["truncate"] = False  # HF's `if truncate:` on a present null
    for key in ("attention_factor", "mscale", "mscale_all_dim", "beta_fast", "beta_slow"):
        value = out.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                or (key == "attention_factor" and value == 0):
            raise SluiceError(f"config.json: rope_scaling.{key} {value!r} is not supported "
                              f"(a {'positive' if key == 'attention_factor' else 'non-negative'} number)")
    if not isinstance(out.get("truncate", True), bool):
        raise SluiceError(f"config.json: rope_scaling.truncate {out['truncate']!r} must be true or false")
    out.setdefault("original_max_position_embeddings", config["max_position_embeddings"])
    return float(theta), out


def _positive_int(c, key):
    value = c[key]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise SluiceError(f"config.json: {key} must be a positive integer, it is {value!r}")
    return value


def resolve(config):
    """The config as the family's HF class reads it: missing keys take the class
    default, aliases map to their canonical key, and every key that would change
    the math and is not implemented is refused by name. Adds rope_theta/rope_scaling
    normalised from rope_parameters (if given)."""
    family = family_of(config)
    c = dict(config)
    for alias, canonical in ALIASES[family].items():
        if alias in c:
            if canonical in c and c[canonical] != c[alias]:
                raise SluiceError(f"config.json: {alias} {c[alias]} and {canonical} {c[canonical]} disagree")
            c[canonical] = c.pop(alias)
    if family == "kimi_linear":
        _refuse_kimi_variants(c)
    for key, default in {**CLASS_DEFAULTS[family], **SLUICE_DEFAULTS.get(family, {})}.items():
        if key not in c:
            c[key] = copy.deepcopy(default)
    for key in list(CLASS_DEFAULTS[family]):
        if c[key] is None and key in _NULL_MEANS:
            c[key] = _NULL_MEANS[key](c)
        elif c[key] is None and key not in _MAY_BE_NULL | _MAY_BE_NULL_BY_FAMILY.get(family, set()):
            raise SluiceError(f"config.json: {key} is null (Hugging Face keeps None and cannot run)")
    if family == "qwen3_moe" and not c["use_sliding_window"]:
        c["sliding_window"] = None  # the class ignores the window unless use_sliding_window
    if c["hidden_act"] != "silu":
        raise SluiceError(f"config.json: hidden_act {c['hidden_act']!r} is not supported (only silu)")
    if c.get("attention_bias"):
        raise SluiceError("config.json: attention_bias true is not supported (no bias tensors)")
    if family == "qwen3_moe" and c["use_sliding_window"]:
        raise SluiceError("config.json: use_sliding_window true is not supported for qwen3_moe")
    c["rope_theta"], c["rope_scaling"] = _rope(c)
    c.pop("rope_parameters", None)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
                top_k_key(c)):
        _positive_int(c, key)
    if c["num_attention_heads"] % c["num_key_value_heads"]:
        raise SluiceError(f"config.json: num_attention_heads {c['num_attention_heads']} is not a multiple of "
                          f"num_key_value_heads {c['num_key_value_heads']}")
    if family in MLA_FAMILIES:
        _check_mla(c)
    if family == "kimi_linear":
        _check_kimi_linear(c)
    if top_k(c) > num_experts(c):
        raise SluiceError(f"config.json: {top_k_key(c)} {top_k(c)} exceeds the {num_experts(c)} experts")
    return c


def _refuse_kimi_variants(c):
    """The keys of later Kimi releases (§4.1) that change the math and are not implemented."""
    for key in KIMI_VARIANT_KEYS:
        if c.get(key) not in (None, False):
            raise SluiceError(f"config.json: {key} {c[key]!r} belongs to a later Kimi release and is not "
                              f"supported by kimi_linear")
    linear = c.get("linear_attn_config")
    for key in KIMI_VARIANT_KDA_KEYS:
        if isinstance(linear, dict) and linear.get(key) not in (None, False):
            raise SluiceError(f"config.json: linear_attn_config.{key} {linear[key]!r} belongs to a later Kimi "
                              f"release and is not supported by kimi_linear")
    if c.get("hidden_act") == "situ":
        raise SluiceError("config.json: hidden_act 'situ' belongs to a later Kimi release and is not supported "
                          "by kimi_linear")
    if c.get("q_lora_rank") is not None:
        raise SluiceError(f"config.json: q_lora_rank {c['q_lora_rank']!r} is not supported by kimi_linear "
                          f"(its MLA query is a single q_proj; q_lora_rank must be null)")


def _check_kimi_linear(c):
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "num_experts",
                "moe_intermediate_size", "moe_layer_freq", "num_expert_group", "topk_group"):
        _positive_int(c, key)
    if c["mla_use_nope"] is not True:
        raise SluiceError(f"config.json: mla_use_nope {c['mla_use_nope']!r} is not supported "
                          f"(kimi_linear MLA layers run without RoPE; the released code asserts it)")
    if c["moe_router_activation_func"] != "sigmoid":
        raise SluiceError(f"config.json: moe_router_activation_func {c['moe_router_activation_func']!r} is not "
                          f"supported (only sigmoid)")
    if c[MOE_WEIGHTS_KEY] not in MOE_WEIGHTS:
        raise SluiceError(f"config.json: {MOE_WEIGHTS_KEY} {c[MOE_WEIGHTS_KEY]!r} is not one of "
                          f"{', '.join(MOE_WEIGHTS)}")
    experts, groups = c["num_experts"], c["num_expert_group"]
    if experts % groups or experts // groups < 2:
        raise SluiceError(f"config.json: num_experts {experts} must split into num_expert_group {groups} "
                          f"groups of at least 2")
    if c["topk_group"] > groups:
        raise SluiceError(f"config.json: topk_group {c['topk_group']} exceeds num_expert_group {groups}")
    if top_k(c) > c["topk_group"] * (experts // groups):
        raise SluiceError(f"config.json: num_experts_per_token {top_k(c)} exceeds the "
                          f"{c['topk_group'] * (experts // groups)} experts of the topk_group kept groups")
    for key in ("num_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers"):
        if not isinstance(c[key], int) or isinstance(c[key], bool) or c[key] < 0:
            raise SluiceError(f"config.json: {key} must be a non-negative integer, it is {c[key]!r}")
    if c["num_nextn_predict_layers"]:
        raise SluiceError(f"config.json: num_nextn_predict_layers {c['num_nextn_predict_layers']} is not "
                          f"supported by kimi_linear (no multi-token-prediction layers)")
    linear = c["linear_attn_config"]
    if linear is None:  # the released code then builds MLA layers only
        linear = {"kda_layers": [], "full_attn_layers": list(range(1, c["num_hidden_layers"] + 1))}
        c["linear_attn_config"] = linear
    if not isinstance(linear, dict):
        raise SluiceError("config.json: linear_attn_config must be an object or null")
    layers = c["num_hidden_layers"]
    for key in ("kda_layers", "full_attn_layers"):
        value = linear.get(key)
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                  and 1 <= i <= layers for i in value):
            raise SluiceError(f"config.json: linear_attn_config.{key} must be a list of 1-based layer numbers "
                              f"in [1, {layers}], it is {value!r}")
    kda, full = set(linear["kda_layers"]), set(linear["full_attn_layers"])
    for n in range(1, layers + 1):
        if (n in kda) == (n in full):
            raise SluiceError(f"config.json: linear_attn_config: layer {n} (1-based) must be in exactly one of "
                              f"kda_layers and full_attn_layers")
    if kda:
        for key in ("num_heads", "head_dim", "short_conv_kernel_size"):
            value = linear.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise SluiceError(f"config.json: linear_attn_config.{key} must be a positive integer, "
                                  f"it is {value!r}")


def _check_mla(c):
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
                "n_group", "topk_group", "moe_layer_freq"):
        _positive_int(c, key)
    if c["q_lora_rank"] is not None:
        _positive_int(c, "q_lora_rank")
    if c["qk_rope_head_dim"] % 2:
        raise SluiceError(f"config.json: qk_rope_head_dim {c['qk_rope_head_dim']} must be even for RoPE")
    for key in ("rope_interleave", "norm_topk_prob", "tie_word_embeddings"):
        if not isinstance(c[key], bool):
            raise SluiceError(f"config.json: {key} must be true or false, it is {c[key]!r}")
    if c["scoring_func"] != "sigmoid":
        raise SluiceError(f"config.json: scoring_func {c['scoring_func']!r} is not supported (only sigmoid)")
    if c["topk_method"] != "noaux_tc":
        raise SluiceError(f"config.json: topk_method {c['topk_method']!r} is not supported (only noaux_tc)")
    experts, groups = c["n_routed_experts"], c["n_group"]
    if experts % groups or experts // groups < 2:
        raise SluiceError(f"config.json: n_routed_experts {experts} must split into n_group {groups} "
                          f"groups of at least 2")
    if c["topk_group"] > groups:
        raise SluiceError(f"config.json: topk_group {c['topk_group']} exceeds n_group {groups}")
    if c["num_experts_per_tok"] > c["topk_group"] * (experts // groups):
        raise SluiceError(f"config.json: num_experts_per_tok {c['num_experts_per_tok']} exceeds the "
                          f"{c['topk_group'] * (experts // groups)} experts of the topk_group kept groups")
    for key in ("n_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers"):
        if not isinstance(c[key], int) or isinstance(c[key], bool) or c[key] < 0:
            raise SluiceError(f"config.json: {key} must be a non-negative integer, it is {c[key]!r}")


def head_dim(c):
    """GQA head width (OLMoE always splits hidden evenly; Qwen3 and Mixtral may state it)."""
    family = family_of(c)
    if family not in GQA_FAMILIES:
        raise SluiceError(f"{family} has MLA heads, no single head_dim")
    if family != "olmoe" and c.get("head_dim"):
        return int(c["head_dim"])
    return c["hidden_size"] // c["num_attention_heads"]


def num_experts_key(c):
    return {"deepseek_v3": "n_routed_experts", "kimi_k2": "n_routed_experts",
            "mixtral": "num_local_experts"}.get(family_of(c), "num_experts")


def top_k_key(c):
    return "num_experts_per_token" if family_of(c) == "kimi_linear" else "num_experts_per_tok"


def top_k(c):
    return c[top_k_key(c)]


def is_kda_layer(c, layer):
    """Kimi-Linear: layer (0-based) is KDA iff layer + 1 is in the 1-based kda_layers."""
    return family_of(c) == "kimi_linear" and (layer + 1) in c["linear_attn_config"]["kda_layers"]


def is_f32_tensor(name):
    """Tensors every checkpoint stores in f32 whatever its torch_dtype: the router score
    bias and KDA's A_log and dt_bias (§0.1, §4.2)."""
    return name.endswith(("e_score_correction_bias", ".A_log", ".dt_bias"))


def num_experts(c):
    return c[num_experts_key(c)]


def expert_width(c):
    if family_of(c) in ("qwen3_moe", "kimi_linear") + MLA_FAMILIES:
        return c["moe_intermediate_size"]
    return c["intermediate_size"]  # OLMoE's and Mixtral's intermediate_size is the expert width


def is_moe_layer(c, layer):
    family = family_of(c)
    if family in ("olmoe", "mixtral"):
        return True
    if family in MLA_FAMILIES + ("kimi_linear",):
        return layer >= c["first_k_dense_replace"] and layer % c["moe_layer_freq"] == 0
    step = c.get("decoder_sparse_step", 1) or 1
    return (layer not in (c.get("mlp_only_layers") or [])
            and c["num_experts"] > 0 and (layer + 1) % step == 0)


def moe_prefix(c, layer):
    return f"model.layers.{layer}." + ("block_sparse_moe." if _w123(c) else "mlp.")


def _w123(c):
    """Mixtral and Kimi-Linear name routed experts w1/w3/w2 under block_sparse_moe."""
    return family_of(c) in ("mixtral", "kimi_linear")


def shared_expert_width(c):
    """Width of the shared expert (0: none)."""
    family = family_of(c)
    if family in MLA_FAMILIES:
        return c["moe_intermediate_size"] * c["n_shared_experts"]
    if family == "kimi_linear":
        return c["moe_intermediate_size"] * c["num_shared_experts"]
    return 0


def expert_names(c, layer, expert):
    """HF names of one routed expert's (gate, up, down) matrices."""
    p = f"{moe_prefix(c, layer)}experts.{expert}."
    if _w123(c):
        return p + "w1.weight", p + "w3.weight", p + "w2.weight"
    return p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"


def _mla_layer(c, p, shapes):
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    if c["q_lora_rank"] is None:
        shapes[p + "self_attn.q_proj.weight"] = [heads * qk, hidden]
    else:
        shapes[p + "self_attn.q_a_proj.weight"] = [c["q_lora_rank"], hidden]
        shapes[p + "self_attn.q_a_layernorm.weight"] = [c["q_lora_rank"]]
        shapes[p + "self_attn.q_b_proj.weight"] = [heads * qk, c["q_lora_rank"]]
    shapes[p + "self_attn.kv_a_proj_with_mqa.weight"] = [c["kv_lora_rank"] + c["qk_rope_head_dim"], hidden]
    shapes[p + "self_attn.kv_a_layernorm.weight"] = [c["kv_lora_rank"]]
    shapes[p + "self_attn.kv_b_proj.weight"] = [heads * (c["qk_nope_head_dim"] + c["v_head_dim"]),
                                               c["kv_lora_rank"]]
    shapes[p + "self_attn.o_proj.weight"] = [hidden, heads * c["v_head_dim"]]


def _kda_layer(c, p, shapes):
    """§4.2: KDA projections, short convolutions [P, 1, K], the decay and output gates."""
    linear, hidden = c["linear_attn_config"], c["hidden_size"]
    heads, d, kernel = linear["num_heads"], linear["head_dim"], linear["short_conv_kernel_size"]
    width = heads * d
    a = p + "self_attn."
    for x in "qkv":
        shapes[a + f"{x}_proj.weight"] = [width, hidden]
    for x in "qkv":
        shapes[a + f"{x}_conv1d.weight"] = [width, 1, kernel]
    shapes[a + "A_log"] = [1, 1, heads, 1]
    shapes[a + "f_a_proj.weight"] = [d, hidden]
    shapes[a + "f_b_proj.weight"] = [width, d]
    shapes[a + "dt_bias"] = [width]
    shapes[a + "b_proj.weight"] = [heads, hidden]
    shapes[a + "g_a_proj.weight"] = [d, hidden]
    shapes[a + "g_b_proj.weight"] = [width, d]
    shapes[a + "o_norm.weight"] = [d]
    shapes[a + "o_proj.weight"] = [hidden, width]


def _gqa_layer(c, p, shapes):
    hidden, family, d = c["hidden_size"], family_of(c), head_dim(c)
    q_out, kv_out = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    shapes[p + "self_attn.q_proj.weight"] = [q_out, hidden]
    shapes[p + "self_attn.k_proj.weight"] = [kv_out, hidden]
    shapes[p + "self_attn.v_proj.weight"] = [kv_out, hidden]
    shapes[p + "self_attn.o_proj.weight"] = [hidden, q_out]
    if family == "olmoe":  # whole-vector q/k norms
        shapes[p + "self_attn.q_norm.weight"] = [q_out]
        shapes[p + "self_attn.k_norm.weight"] = [kv_out]
    elif family == "qwen3_moe":  # one per-head weight shared by all heads
        shapes[p + "self_attn.q_norm.weight"] = [d]
        shapes[p + "self_attn.k_norm.weight"] = [d]


def _decoder_layer(c, i, shapes):
    hidden, p = c["hidden_size"], f"model.layers.{i}."
    shapes[p + "input_layernorm.weight"] = [hidden]
    if is_kda_layer(c, i):
        _kda_layer(c, p, shapes)
    else:
        (_gqa_layer if family_of(c) in GQA_FAMILIES else _mla_layer)(c, p, shapes)
    shapes[p + "post_attention_layernorm.weight"] = [hidden]
    if is_moe_layer(c, i):
        m, width = moe_prefix(c, i), expert_width(c)
        shapes[m + "gate.weight"] = [num_experts(c), hidden]
        if family_of(c) not in GQA_FAMILIES:
            shapes[m + "gate.e_score_correction_bias"] = [num_experts(c)]
        for e in range(num_experts(c)):
            gate, up, down = expert_names(c, i, e)
            shapes[gate], shapes[up], shapes[down] = [width, hidden], [width, hidden], [hidden, width]
        if shared_expert_width(c):
            shared = shared_expert_width(c)
            shapes[m + "shared_experts.gate_proj.weight"] = [shared, hidden]
            shapes[m + "shared_experts.up_proj.weight"] = [shared, hidden]
            shapes[m + "shared_experts.down_proj.weight"] = [hidden, shared]
    else:
        dense = c["intermediate_size"]
        shapes[p + "mlp.gate_proj.weight"] = [dense, hidden]
        shapes[p + "mlp.up_proj.weight"] = [dense, hidden]
        shapes[p + "mlp.down_proj.weight"] = [hidden, dense]


def tensor_shapes(config):
    """HF tensor names and shapes of the main model, in checkpoint order (dict name -> shape)."""
    c = resolve(config)
    hidden = c["hidden_size"]
    shapes = {"model.embed_tokens.weight": [c["vocab_size"], hidden]}
    for i in range(c["num_hidden_layers"]):
        _decoder_layer(c, i, shapes)
    shapes["model.norm.weight"] = [hidden]
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [c["vocab_size"], hidden]
    return shapes


def mtp_tensor_shapes(config):
    """The multi-token-prediction layers DeepSeek-V3 ships after the main layers
    (model.layers.{N}.*: enorm, hnorm, eh_proj, a decoder layer, shared_head);
    the main model never reads them."""
    c = resolve(config)
    if family_of(c) not in MLA_FAMILIES:
        return {}
    hidden, vocab, shapes = c["hidden_size"], c["vocab_size"], {}
    for i in range(c["num_hidden_layers"], c["num_hidden_layers"] + c["num_nextn_predict_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "embed_tokens.weight"] = [vocab, hidden]
        shapes[p + "enorm.weight"] = [hidden]
        shapes[p + "hnorm.weight"] = [hidden]
        shapes[p + "eh_proj.weight"] = [hidden, 2 * hidden]
        _decoder_layer(c, i, shapes)
        shapes[p + "shared_head.norm.weight"] = [hidden]
        shapes[p + "shared_head.head.weight"] = [vocab, hidden]
    return shapes


_FP8_SUFFIXES = ("q_proj.weight", "q_a_proj.weight", "q_b_proj.weight", "kv_a_proj_with_mqa.weight",
                 "kv_b_proj.weight", "o_proj.weight", "gate_proj.weight", "up_proj.weight", "down_proj.weight",
                 "eh_proj.weight")


def is_fp8_tensor(name):
    """Which tensors DeepSeek-V3's fp8 release stores as F8_E4M3 (§0.9, §3.2): the
    attention projections, dense/shared/routed expert matrices; never embeddings,
    lm_head, norms, the router or its bias."""
    return name.endswith(_FP8_SUFFIXES)


def init_std_and_mean(config, name):
    """(mean, std) of the random weight `name` (architectures.md §7 rules)."""
    if name.endswith("norm.weight"):
        return 1.0, 0.1
    if name.endswith("gate.e_score_correction_bias"):
        return 0.0, 0.05
    if name.endswith(".dt_bias"):
        return 0.0, 1.0
    if name.endswith("_conv1d.weight"):
        return 0.0, 0.3
    if name.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight")):  # router: logits spread about ±2
        return 0.0, 2.0 / math.sqrt(config["hidden_size"])
    return 0.0, 0.02


def init_log_uniform(name):
    """(low, high) when `name` is drawn as ln U(low, high) instead of a normal: KDA's A_log
    (§7, as the released code initialises it), else None."""
    return (1.0, 16.0) if name.endswith(".A_log") else None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m sluicepy.families",
                                     description="The Hugging Face class defaults, and a config as they read it "
                                                 "(for checking another parser key by key).")
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("defaults", help='print {"defaults": {family: {key: value}}, "aliases": {...}} as JSON')
    p = sub.add_parser("resolve", help="print CONFIG as resolved (defaults filled, aliases mapped) as JSON")
    p.add_argument("config", help="a config.json")
    args = parser.parse_args(argv)
    try:
        if args.mode == "defaults":
            print(json.dumps({"defaults": CLASS_DEFAULTS, "aliases": ALIASES}, indent=1))
            return 0
        try:
            with open(args.config, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SluiceError(f"{args.config}: {e}") from None
        if not isinstance(config, dict):
            raise SluiceError(f"{args.config}: not a JSON object")
        print(json.dumps(resolve(config), indent=1))
    except SluiceError as e:
        print(f"sluicepy.families: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
