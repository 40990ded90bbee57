# scripts/sluicepy/gguf_twin.py: a GGUF of a sluice container for llama.cpp,
# written with llama.cpp's own gguf-py (from a source tree the caller
# fetched; never vendored). Two architectures:
# - olmoe: a container of `sluice synth --routing realistic` gets its trunk
#   copied (embedding Q8_0, attention Q4_0, the LM head Q8_0, Q6_K or Q4_0 as
#   the container stores it in q8g128, q6g128 or q4g128, routers and norms
#   f32), so llama.cpp routes as sluice does; the routed experts are random
#   Q3_K as small as the container's (their outputs barely reach the residual
#   stream, by design). Any other olmoe container gets random weights of its
#   dimensions: Q4_K matrices, and an LM head of Q6_K (what llama-quantize
#   gives Q3_K_M's output.weight) for a q8g128 head, Q4_K for a q4g128 one.
# - deepseek2 (a deepseek_v3 container): the trunk copied as above (q4g128
#   matrices Q4_0, q8g128 Q8_0, the same weights bit for bit; kv_b split
#   into the per-head k_b and v_b that llama.cpp's absorbed MLA reads), the
#   router and its scoring bias f32, the routed experts random Q3_K.
# Benchmark tooling only: it never changes the container.
import json
import os
import sys
import types

import numpy as np

from . import SluiceError
from .container import GROUP, Container

_PREFIX = "model.layers."
# The f16 block scale `d` of random Q3_K experts: weights of about 0.02 for
# gate and up (|scale × code| averages about 32), the down projection times
# the realistic shape's residual scale (routing_shape.h's kResidualScale).
_EXPERT_D = 0.02 / 32
_RESIDUAL_SCALE = 1e-3


def import_gguf(llama_src):
    sys.path.insert(0, os.path.join(llama_src, "gguf-py"))
    try:
        import sentencepiece  # noqa: F401
    except ImportError:  # gguf-py imports it for vocabularies it never reads here
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = None
        sys.modules["sentencepiece"] = stub
    import gguf
    return gguf


def is_realistic(container):
    return container.manifest.get("source", {}).get("synthetic", {}).get("routing") == "realistic"


def random_blocks(gguf, rng, rows, cols, qtype, d):
    """rows × cols weights of k-quant `qtype` as raw bytes: random codes and
    every f16 block scale `d`, so no NaN reaches compute."""
    block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    if cols % block:
        raise SluiceError(f"a row of {cols} weights is not a whole number of {block}-weight blocks")
    blocks = rng.integers(0, 256, size=(rows, cols // block, block_bytes), dtype=np.uint8)
    scale = np.frombuffer(np.float16(d).tobytes(), dtype=np.uint8)
    if qtype == gguf.GGMLQuantizationType.Q4_K:  # d, dmin, scales[12], qs[128]
        blocks[:, :, 0:2] = scale
        blocks[:, :, 2:4] = 0
    elif qtype == gguf.GGMLQuantizationType.Q6_K:  # ql[128], qh[64], int8 scales[16], d
        blocks[:, :, -2:] = scale
    else:  # Q3_K: hmask[32], qs[64], scales[12], d
        blocks[:, :, -2:] = scale
    return blocks.reshape(rows, -1)


def quantize_q6_k(values):
    """rows × cols f32 (cols a multiple of 256) as Q6_K blocks, the layout of
    gguf-py's Q6_K.dequantize_blocks inverted: per 256 weights ql[128] (low
    four bits), qh[64] (top two), an int8 scale per 16 and an f16 d. gguf-py
    has no Q6_K quantizer; this is the plain one (scale = amax/32, no search)."""
    rows, cols = values.shape
    x = values.reshape(-1, 16, 16).astype(np.float32)  # blocks of 256 as 16 groups of 16
    group_scale = np.abs(x).max(axis=2) / 32
    d = (group_scale.reshape(-1, 16).max(axis=1) / 127).astype(np.float16)
    d32 = d.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32[:, None] > 0, np.rint(group_scale.reshape(-1, 16) / d32[:, None]), 0)
    sc = np.clip(sc, -128, 127).astype(np.int8)
    step = (d32[:, None] * sc.astype(np.float32)).reshape(-1, 16, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step > 0, np.rint(x / step), 0)
    u = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 128)  # two halves of 128
    low, high = u & 0x0F, u >> 4
    ql = (low[:, :, :64] | (low[:, :, 64:] << 4)).reshape(-1, 128)
    high = high.reshape(-1, 2, 4, 32)
    qh = (high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)).reshape(-1, 64)
    blocks = np.concatenate([ql, qh, sc.view(np.uint8), d.reshape(-1, 1).view(np.uint8)], axis=1)
    return blocks.reshape(rows, -1)


def _byte_level_tokens(container):
    """The container's tokenizer.json vocabulary in id order (a synth
    container's byte-level BPE: ids 0-255 are the bytes), for llama.cpp's
    gpt2 tokenizer, which then reads text as sluice does."""
    with open(os.path.join(container.path, "tokenizer.json"), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        if not 0 <= i < len(tokens) or tokens[i] is not None:
            raise SluiceError(f"{container.path}/tokenizer.json: token id {i} is out of range or repeated")
        tokens[i] = text
    return tokens


def _add_vocabulary(gguf, w, c):
    """The container's byte-level vocabulary as llama.cpp's gpt2 tokenizer."""
    tokens = _byte_level_tokens(c)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * len(tokens))
    # llama.cpp refuses a gpt2 vocabulary without merges (and gguf-py
    # drops an empty list): one merge of two NUL bytes, which text never holds.
    w.add_token_merges([f"{tokens[0]} {tokens[0]}"])
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_eos_token_id(c.config.get("eos_token_id") or c.config["vocab_size"] - 1)


def _add_values(gguf, w, name, values, qtype):
    """f32 `values` (rows along the last axis) as `qtype`, None for f32."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if qtype is None:
        w.add_tensor(name, values)
    elif qtype == gguf.GGMLQuantizationType.Q6_K:
        flat = values.reshape(-1, values.shape[-1])
        blocks = quantize_q6_k(flat)
        back = gguf.quants.dequantize(blocks, qtype).reshape(flat.shape)
        if not np.max(np.abs(back - flat)) <= np.max(np.abs(flat)) / 31:
            raise SluiceError(f"{name}: the Q6_K copy does not read back within a step")
        w.add_tensor(name, blocks.reshape(*values.shape[:-1], -1), raw_dtype=qtype)
    else:
        w.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)


def _twin_type(gguf, c, hf_name):
    """The GGUF type closest to how the container stores `hf_name`."""
    fmt = c.trunk[hf_name]["format"] if hf_name in c.trunk else None
    t = gguf.GGMLQuantizationType
    types = {"f32": None, "q4g128": t.Q4_0, "q6g128": t.Q6_K, "q8g128": t.Q8_0}
    if fmt not in types:
        raise SluiceError(f"{c.path}: trunk tensor {hf_name} is {fmt!r}, which has no GGUF twin")
    return types[fmt]


def _stored_blocks(c, hf_name):
    """A q4g128 or q8g128 trunk matrix as Q4_0 or Q8_0 blocks holding the same
    weights bit for bit (each 128-column group's f16 scale is the d of its four
    32-weight blocks, the codes copied), or None for another format or a row
    that is not whole groups."""
    t, data, scale_data = c.trunk_stored(hf_name)
    if t["format"] not in ("q4g128", "q8g128") or len(t["shape"]) != 2 or t["shape"][1] % GROUP:
        return None
    rows, cols = t["shape"]
    scales = np.frombuffer(scale_data, dtype=np.uint8).reshape(rows, cols // GROUP, 1, 2)
    d = np.broadcast_to(scales, (rows, cols // GROUP, GROUP // 32, 2)).reshape(rows, cols // 32, 2)
    raw = np.frombuffer(data, dtype=np.uint8).reshape(rows, cols if t["format"] == "q8g128" else cols // 2)
    if t["format"] == "q8g128":
        qs = raw.reshape(rows, cols // 32, 32)
    else:  # q4g128: byte b holds columns 2b (low nibble) and 2b + 1; Q4_0 pairs j and j + 16
        codes = np.empty((rows, cols), dtype=np.uint8)
        codes[:, 0::2], codes[:, 1::2] = raw & 0x0F, raw >> 4
        codes = codes.reshape(rows, cols // 32, 32)
        qs = codes[:, :, :16] | (codes[:, :, 16:] << 4)
    return np.concatenate([d, qs], axis=2).reshape(rows, -1)


def _copy_trunk(gguf, w, c, hf_name, gguf_name):
    qtype = _twin_type(gguf, c, hf_name)
    blocks = _stored_blocks(c, hf_name) if qtype is not None else None
    if blocks is not None:
        w.add_tensor(gguf_name, blocks, raw_dtype=qtype)
    else:
        _add_values(gguf, w, gguf_name, c.trunk_tensor(hf_name), qtype)


def _random_experts(gguf, w, rng, prefix, experts, width, hidden, gate_d, down_d):
    q3k = gguf.GGMLQuantizationType.Q3_K
    for kind, rows, cols, d in (("gate", width, hidden, gate_d), ("up", width, hidden, gate_d),
                                ("down", hidden, width, down_d)):
        data = np.stack([random_blocks(gguf, rng, rows, cols, q3k, d) for _ in range(experts)])
        w.add_tensor(prefix + f"ffn_{kind}_exps.weight", data, raw_dtype=q3k)


def write_gguf(llama_src, container_path, path):
    gguf = import_gguf(llama_src)
    c = Container(container_path)
    writers = {"olmoe": _write_olmoe, "deepseek_v3": _write_deepseek2}
    model_type = c.config.get("model_type")
    if model_type not in writers:
        raise SluiceError(f"{container_path}: model_type {model_type!r}: only {' and '.join(writers)} "
                          "are written as GGUF")
    w = writers[model_type](gguf, c, path)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _write_olmoe(gguf, c, path):
    config = c.config
    realistic = is_realistic(c)
    hidden, width, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    heads, kv_heads, vocab = config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]
    experts, top_k = config["num_experts"], config["num_experts_per_tok"]
    head_dim = hidden // heads
    rng = np.random.default_rng(1)
    q4k, q6k = gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K
    w = gguf.GGUFWriter(path, "olmoe")
    w.add_context_length(config.get("max_position_embeddings", 4096))
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(width)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-5))
    w.add_rope_freq_base(config.get("rope_theta", 10000.0))
    w.add_expert_count(experts)
    w.add_expert_used_count(top_k)
    w.add_vocab_size(vocab)
    if realistic:
        _add_vocabulary(gguf, w, c)
    else:
        w.add_tokenizer_model("none")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q3_K_M)

    head_format = c.trunk.get("lm_head.weight", c.trunk["model.embed_tokens.weight"])["format"]
    head_q4 = head_format == "q4g128"

    def trunk(hf_name, gguf_name, rows, cols, quantized=True):
        if realistic:
            _copy_trunk(gguf, w, c, hf_name, gguf_name)
        elif not quantized:
            w.add_tensor(gguf_name, np.ones(cols, dtype=np.float32))
        elif gguf_name == "output.weight" and not head_q4:
            # |int8 scale × 6-bit code| reaches 127 × 32, so d is smaller than Q4_K's.
            w.add_tensor(gguf_name, random_blocks(gguf, rng, rows, cols, q6k, 1e-3 / 4), raw_dtype=q6k)
        else:
            w.add_tensor(gguf_name, random_blocks(gguf, rng, rows, cols, q4k, 1e-3), raw_dtype=q4k)

    trunk("model.embed_tokens.weight", "token_embd.weight", vocab, hidden)
    trunk("model.norm.weight", "output_norm.weight", 1, hidden, quantized=False)
    trunk("lm_head.weight", "output.weight", vocab, hidden)
    for i in range(layers):
        p, hf = f"blk.{i}.", f"{_PREFIX}{i}."
        trunk(hf + "input_layernorm.weight", p + "attn_norm.weight", 1, hidden, quantized=False)
        trunk(hf + "self_attn.q_proj.weight", p + "attn_q.weight", hidden, hidden)
        trunk(hf + "self_attn.k_proj.weight", p + "attn_k.weight", kv_heads * head_dim, hidden)
        trunk(hf + "self_attn.v_proj.weight", p + "attn_v.weight", kv_heads * head_dim, hidden)
        trunk(hf + "self_attn.o_proj.weight", p + "attn_output.weight", hidden, hidden)
        trunk(hf + "self_attn.q_norm.weight", p + "attn_q_norm.weight", 1, hidden, quantized=False)
        trunk(hf + "self_attn.k_norm.weight", p + "attn_k_norm.weight", 1, kv_heads * head_dim, quantized=False)
        trunk(hf + "post_attention_layernorm.weight", p + "ffn_norm.weight", 1, hidden, quantized=False)
        if realistic:
            w.add_tensor(p + "ffn_gate_inp.weight", np.ascontiguousarray(c.trunk_tensor(hf + "mlp.gate.weight")))
        else:
            w.add_tensor(p + "ffn_gate_inp.weight", rng.standard_normal((experts, hidden), dtype=np.float32))
        gate_d = _EXPERT_D if realistic else 1e-3
        down_d = _EXPERT_D * _RESIDUAL_SCALE if realistic else 1e-3
        _random_experts(gguf, w, rng, p, experts, width, hidden, gate_d, down_d)
    return w


def split_kv_b(kv_b, heads, nope, v_dim, where):
    """kv_b_proj ([heads × (nope + v_dim), kv_lora]: each head's key rows, then
    its value rows) as llama.cpp's absorbed MLA reads it, ggml contracting a
    matrix over its last axis: k_b [heads, kv_lora, nope] (the key rows
    transposed, so it maps a head's query to the latent) and v_b
    [heads, v_dim, kv_lora] (the latent to the head's values)."""
    if kv_b.ndim != 2 or kv_b.shape[0] != heads * (nope + v_dim):
        raise SluiceError(f"{where} is {list(kv_b.shape)}, not [{heads * (nope + v_dim)}, kv_lora_rank] "
                          f"for {heads} heads of {nope} + {v_dim} rows")
    per_head = kv_b.reshape(heads, nope + v_dim, kv_b.shape[1])
    return np.ascontiguousarray(per_head[:, :nope].transpose(0, 2, 1)), np.ascontiguousarray(per_head[:, nope:])


def _write_deepseek2(gguf, c, path):
    """llama.cpp's deepseek2 as its convert_hf_to_gguf.py writes DeepSeek-V3:
    MLA as one kv head of kv_lora_rank + rope dims, kv_b split per head into
    k_b (transposed: kv_lora_rank rows of qk_nope) and v_b."""
    config = c.config
    hidden, layers, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
    kv_lora, nope, rope = config["kv_lora_rank"], config["qk_nope_head_dim"], config["qk_rope_head_dim"]
    v_dim, dense = config["v_head_dim"], config.get("first_k_dense_replace", 0)
    experts, width = config["n_routed_experts"], config["moe_intermediate_size"]
    w = gguf.GGUFWriter(path, "deepseek2")
    w.add_context_length(config.get("max_position_embeddings", 4096))
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-6))
    w.add_rope_freq_base(config.get("rope_theta", 10000.0))
    w.add_rope_dimension_count(rope)
    w.add_leading_dense_block_count(dense)
    w.add_vocab_size(config["vocab_size"])
    if config.get("q_lora_rank"):
        w.add_q_lora_rank(config["q_lora_rank"])
    w.add_kv_lora_rank(kv_lora)
    w.add_key_length(kv_lora + rope)
    w.add_value_length(kv_lora)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(v_dim)
    w.add_expert_feed_forward_length(width)
    w.add_expert_count(experts)
    w.add_expert_used_count(config["num_experts_per_tok"])
    w.add_expert_shared_count(config.get("n_shared_experts", 0))
    w.add_expert_weights_scale(config.get("routed_scaling_factor", 1.0))
    w.add_expert_weights_norm(bool(config.get("norm_topk_prob", False)))
    sigmoid = config.get("scoring_func", "softmax") == "sigmoid"
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if sigmoid else gguf.ExpertGatingFuncType.SOFTMAX)
    if config.get("n_group"):
        w.add_expert_group_count(config["n_group"])
        w.add_expert_group_used_count(config["topk_group"])
    yarn = config.get("rope_scaling") or {}
    if yarn.get("type", yarn.get("rope_type")) == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(yarn["factor"])
        w.add_rope_scaling_orig_ctx_len(yarn["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(yarn.get("beta_fast", 32))
        w.add_rope_scaling_yarn_beta_slow(yarn.get("beta_slow", 1))
        # llama.cpp divides this key by 0.1 on load (its convert script's legacy factor).
        w.add_rope_scaling_yarn_log_mul(0.1 * yarn.get("mscale_all_dim", 0.0))
    _add_vocabulary(gguf, w, c)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)

    rng = np.random.default_rng(1)
    _copy_trunk(gguf, w, c, "model.embed_tokens.weight", "token_embd.weight")
    _copy_trunk(gguf, w, c, "model.norm.weight", "output_norm.weight")
    _copy_trunk(gguf, w, c, "lm_head.weight", "output.weight")
    names = {"input_layernorm": "attn_norm", "self_attn.q_a_proj": "attn_q_a",
             "self_attn.q_a_layernorm": "attn_q_a_norm", "self_attn.q_b_proj": "attn_q_b",
             "self_attn.q_proj": "attn_q", "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa",
             "self_attn.kv_a_layernorm": "attn_kv_a_norm", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "mlp.gate": "ffn_gate_inp",
             "mlp.shared_experts.gate_proj": "ffn_gate_shexp", "mlp.shared_experts.up_proj": "ffn_up_shexp",
             "mlp.shared_experts.down_proj": "ffn_down_shexp"}
    for i in range(layers):
        p, hf = f"blk.{i}.", f"{_PREFIX}{i}."
        for hf_part, gguf_part in names.items():
            if hf + hf_part + ".weight" in c.trunk:
                _copy_trunk(gguf, w, c, hf + hf_part + ".weight", p + gguf_part + ".weight")
        kv_b_name = hf + "self_attn.kv_b_proj.weight"
        k_b, v_b = split_kv_b(c.trunk_tensor(kv_b_name), heads, nope, v_dim, f"{c.path}: {kv_b_name}")
        kv_b_type = _twin_type(gguf, c, kv_b_name)
        _add_values(gguf, w, p + "attn_k_b.weight", k_b, kv_b_type)
        _add_values(gguf, w, p + "attn_v_b.weight", v_b, kv_b_type)
        if i >= dense:
            _copy_trunk(gguf, w, c, hf + "mlp.gate.e_score_correction_bias", p + "exp_probs_b.bias")
            _random_experts(gguf, w, rng, p, experts, width, hidden, _EXPERT_D, _EXPERT_D * _RESIDUAL_SCALE)
    return w
