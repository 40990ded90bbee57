# scripts/sluicepy/gguf_twin.py: a GGUF of a sluice container for llama.cpp,
# written with llama.cpp's own gguf-py (from a source tree the caller
# fetched; never vendored). A container of `sluice synth --routing realistic`
# gets its trunk copied (embedding Q8_0, attention Q4_0, the LM head Q8_0,
# Q6_K or Q4_0 as the container stores it in q8g128, q6g128 or q4g128, routers
# and norms f32), so llama.cpp routes
# as sluice does; the routed experts are random Q3_K as small as the
# container's (their outputs barely reach the residual stream, by design). Any
# other olmoe container gets random weights of its dimensions: Q4_K matrices,
# and an LM head of Q6_K (what llama-quantize gives Q3_K_M's output.weight)
# for a q8g128 head, Q4_K for a q4g128 one. Benchmark tooling only: it never
# changes the container.
import json
import os
import sys
import types

import numpy as np

from . import SluiceError
from .container import Container

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


def write_gguf(llama_src, container_path, path):
    gguf = import_gguf(llama_src)
    c = Container(container_path)
    config = c.config
    if config.get("model_type") != "olmoe":
        raise SluiceError(f"model_type {config.get('model_type')!r}: only olmoe is written as GGUF")
    realistic = is_realistic(c)
    hidden, width, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    heads, kv_heads, vocab = config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]
    experts, top_k = config["num_experts"], config["num_experts_per_tok"]
    head_dim = hidden // heads
    rng = np.random.default_rng(1)
    q3k, q4k, q6k = gguf.GGMLQuantizationType.Q3_K, gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K
    q8, q4 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0
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
        w.add_eos_token_id(config.get("eos_token_id") or vocab - 1)
    else:
        w.add_tokenizer_model("none")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q3_K_M)

    head_format = c.trunk.get("lm_head.weight", c.trunk["model.embed_tokens.weight"])["format"]
    head_q4 = head_format == "q4g128"

    def trunk(hf_name, gguf_name, rows, cols, qtype):
        if not realistic:
            if qtype is None:
                w.add_tensor(gguf_name, np.ones(cols, dtype=np.float32))
            elif gguf_name == "output.weight" and not head_q4:
                # |int8 scale × 6-bit code| reaches 127 × 32, so d is smaller than Q4_K's.
                w.add_tensor(gguf_name, random_blocks(gguf, rng, rows, cols, q6k, 1e-3 / 4), raw_dtype=q6k)
            else:
                w.add_tensor(gguf_name, random_blocks(gguf, rng, rows, cols, q4k, 1e-3), raw_dtype=q4k)
            return
        values = np.ascontiguousarray(c.trunk_tensor(hf_name), dtype=np.float32)
        if qtype is None:
            w.add_tensor(gguf_name, values)
        elif qtype == q6k:
            blocks = quantize_q6_k(values)
            back = gguf.quants.dequantize(blocks, q6k).reshape(values.shape)
            if not np.max(np.abs(back - values)) <= np.max(np.abs(values)) / 31:
                raise SluiceError(f"{hf_name}: the Q6_K copy does not read back within a step")
            w.add_tensor(gguf_name, blocks, raw_dtype=q6k)
        else:
            w.add_tensor(gguf_name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)

    trunk("model.embed_tokens.weight", "token_embd.weight", vocab, hidden, q8)
    trunk("model.norm.weight", "output_norm.weight", 1, hidden, None)
    trunk("lm_head.weight", "output.weight", vocab, hidden, {"q4g128": q4, "q6g128": q6k}.get(head_format, q8))
    for i in range(layers):
        p, hf = f"blk.{i}.", f"{_PREFIX}{i}."
        trunk(hf + "input_layernorm.weight", p + "attn_norm.weight", 1, hidden, None)
        trunk(hf + "self_attn.q_proj.weight", p + "attn_q.weight", hidden, hidden, q4)
        trunk(hf + "self_attn.k_proj.weight", p + "attn_k.weight", kv_heads * head_dim, hidden, q4)
        trunk(hf + "self_attn.v_proj.weight", p + "attn_v.weight", kv_heads * head_dim, hidden, q4)
        trunk(hf + "self_attn.o_proj.weight", p + "attn_output.weight", hidden, hidden, q4)
        trunk(hf + "self_attn.q_norm.weight", p + "attn_q_norm.weight", 1, hidden, None)
        trunk(hf + "self_attn.k_norm.weight", p + "attn_k_norm.weight", 1, kv_heads * head_dim, None)
        trunk(hf + "post_attention_layernorm.weight", p + "ffn_norm.weight", 1, hidden, None)
        if realistic:
            w.add_tensor(p + "ffn_gate_inp.weight", np.ascontiguousarray(c.trunk_tensor(hf + "mlp.gate.weight")))
        else:
            w.add_tensor(p + "ffn_gate_inp.weight", rng.standard_normal((experts, hidden), dtype=np.float32))
        gate_d = _EXPERT_D if realistic else 1e-3
        down_d = _EXPERT_D * _RESIDUAL_SCALE if realistic else 1e-3
        for kind, rows, cols, d in (("gate", width, hidden, gate_d), ("up", width, hidden, gate_d),
                                    ("down", hidden, width, down_d)):
            data = np.stack([random_blocks(gguf, rng, rows, cols, q3k, d) for _ in range(experts)])
            w.add_tensor(p + f"ffn_{kind}_exps.weight", data, raw_dtype=q3k)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return realistic
