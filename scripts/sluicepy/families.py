# scripts/sluicepy/families.py: what each supported family's checkpoint holds:
# the tiny configs of architectures.md §7, the Hugging Face tensor names and
# shapes that follow from a config, and which layers are MoE. No weights here.
import copy

from . import SluiceError

FAMILIES = ("olmoe", "qwen3_moe")

_TINY = {
    "olmoe": {
        "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe",
        "vocab_size": 512, "hidden_size": 128, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "hidden_act": "silu", "max_position_embeddings": 256, "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
        "clip_qkv": None, "num_experts": 8, "num_experts_per_tok": 4,
        "norm_topk_prob": False, "tie_word_embeddings": False,
        "bos_token_id": None, "eos_token_id": 2, "pad_token_id": 1,
        "torch_dtype": "bfloat16"},
    "qwen3_moe": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": 512, "hidden_size": 128, "intermediate_size": 256,
        "moe_intermediate_size": 48, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": False,
        "use_sliding_window": False, "sliding_window": None,
        "decoder_sparse_step": 1, "mlp_only_layers": [],
        "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": True,
        "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": 2,
        "torch_dtype": "bfloat16"},
}


def tiny_config(family):
    if family not in _TINY:
        raise SluiceError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    return copy.deepcopy(_TINY[family])


def family_of(config):
    family = config.get("model_type")
    if family not in FAMILIES:
        raise SluiceError(f"config.json: model_type {family!r} is not supported "
                          f"(supported: {', '.join(FAMILIES)})")
    return family


def head_dim(config):
    # HF's OLMoE always splits hidden evenly; Qwen3 states head_dim because it may differ.
    if family_of(config) == "qwen3_moe" and config.get("head_dim"):
        return int(config["head_dim"])
    return config["hidden_size"] // config["num_attention_heads"]


def expert_width(config):
    if family_of(config) == "qwen3_moe":
        return config["moe_intermediate_size"]
    return config["intermediate_size"]  # OLMoE's intermediate_size is the expert width


def is_moe_layer(config, layer):
    if family_of(config) == "olmoe":
        return True
    step = config.get("decoder_sparse_step", 1) or 1
    return (layer not in (config.get("mlp_only_layers") or [])
            and config["num_experts"] > 0 and (layer + 1) % step == 0)


def tensor_shapes(config):
    """HF tensor names and shapes in checkpoint order (dict name -> shape)."""
    family = family_of(config)
    hidden = config["hidden_size"]
    d = head_dim(config)
    q_out = config["num_attention_heads"] * d
    kv_out = config["num_key_value_heads"] * d
    # OLMoE normalises the whole q/k vectors, Qwen3 each head with one shared weight.
    q_norm, k_norm = (q_out, kv_out) if family == "olmoe" else (d, d)
    width = expert_width(config)
    shapes = {"model.embed_tokens.weight": [config["vocab_size"], hidden]}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = [hidden]
        shapes[p + "self_attn.q_proj.weight"] = [q_out, hidden]
        shapes[p + "self_attn.k_proj.weight"] = [kv_out, hidden]
        shapes[p + "self_attn.v_proj.weight"] = [kv_out, hidden]
        shapes[p + "self_attn.o_proj.weight"] = [hidden, q_out]
        shapes[p + "self_attn.q_norm.weight"] = [q_norm]
        shapes[p + "self_attn.k_norm.weight"] = [k_norm]
        shapes[p + "post_attention_layernorm.weight"] = [hidden]
        if is_moe_layer(config, i):
            shapes[p + "mlp.gate.weight"] = [config["num_experts"], hidden]
            for e in range(config["num_experts"]):
                q = f"{p}mlp.experts.{e}."
                shapes[q + "gate_proj.weight"] = [width, hidden]
                shapes[q + "up_proj.weight"] = [width, hidden]
                shapes[q + "down_proj.weight"] = [hidden, width]
        else:
            dense = config["intermediate_size"]
            shapes[p + "mlp.gate_proj.weight"] = [dense, hidden]
            shapes[p + "mlp.up_proj.weight"] = [dense, hidden]
            shapes[p + "mlp.down_proj.weight"] = [hidden, dense]
    shapes["model.norm.weight"] = [hidden]
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = [config["vocab_size"], hidden]
    return shapes


def init_std_and_mean(config, name):
    """(mean, std) of the random weight `name` (architectures.md §7 rules)."""
    if name.endswith("norm.weight"):
        return 1.0, 0.1
    if name.endswith("mlp.gate.weight"):  # router: logits spread about ±2
        return 0.0, 2.0 / config["hidden_size"] ** 0.5
    return 0.0, 0.02
