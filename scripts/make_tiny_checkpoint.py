#!/usr/bin/python3
# scripts/make_tiny_checkpoint.py: writes a random-weight checkpoint in the exact
# Hugging Face layout (config, safetensors, tokenizer) for tests and benchmarks,
# optionally fp8 with block scales and DeepSeek's MTP layer; Kimi-Linear (§7.5)
# with its f32 A_log/dt_bias; Kimi K3-tiny (k3.md §6, vision tower included) with
# its padded A_log; with --routing realistic, weights whose own routing has
# real routing's statistics (sluicepy/routing_shape.py). Weights are a pure
# function of (config, seed); nothing here reads a real model.
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicepy import SluiceError, bpe, config_variants, families, fp8, k3, mxfp4, routing_shape, safetensors  # noqa: E402

_DTYPES = {"bf16": ("BF16", "bfloat16"), "f16": ("F16", "float16"), "f32": ("F32", "float32")}


class RandomTensor:
    """One weight, drawn only when written: N(mean, std²), or ln U(low, high) when
    `log_uniform` is (low, high), from its own stream (seed, index), so a tensor
    does not depend on which others exist."""

    def __init__(self, shape, mean, std, seed, index, log_uniform=None, draw=None):
        self.shape, self.mean, self.std, self.seed, self.index = tuple(shape), mean, std, seed, index
        self.log_uniform, self.draw = log_uniform, draw

    def __array__(self, dtype=None):
        rng = np.random.default_rng([self.seed, self.index])
        if self.draw is not None:  # a tensor with its own rule (K3's padded A_log)
            values = self.draw(rng)
        elif self.log_uniform is not None:
            values = np.log(rng.uniform(*self.log_uniform, size=self.shape)).astype(np.float32)
        else:
            values = rng.standard_normal(self.shape, dtype=np.float32)
            values *= np.float32(self.std)
            values += np.float32(self.mean)
        return values if dtype is None else values.astype(dtype)


class Fp8Values:
    """What an F8_E4M3 weight stores: W / its block scale (encoded when written)."""

    def __init__(self, weight):
        self.weight, self.shape = weight, weight.shape

    def __array__(self, dtype=None):
        w = np.asarray(self.weight)
        values = w / fp8.expand_scales(fp8.block_scales(w), w.shape)
        return values if dtype is None else values.astype(dtype)


class Fp8Scales:
    """The F32 `<name>_scale_inv` of an fp8 weight: amax/448 of each 128x128 block."""

    def __init__(self, weight):
        self.weight, self.shape = weight, tuple(fp8.scale_shape(weight.shape))

    def __array__(self, dtype=None):
        scales = fp8.block_scales(np.asarray(self.weight))
        return scales if dtype is None else scales.astype(dtype)


class Mxfp4Encoding:
    """An MXFP4 weight's two U8 tensors (0: packed nibbles, 1: E8M0 scales), encoded once, when the
    first is written, and let go when the second has been."""

    def __init__(self, weight):
        self.weight, self.encoded, self.unread = weight, None, {0, 1}

    def part(self, index):
        if self.encoded is None:
            self.encoded = mxfp4.encode(np.asarray(self.weight))
        values = self.encoded[index]
        self.unread.discard(index)
        if not self.unread:
            self.encoded = None
        return values


class Mxfp4Part:
    """One tensor of an Mxfp4Encoding, encoded when written."""

    def __init__(self, encoding, part):
        rows, cols = encoding.weight.shape
        self.encoding, self.part = encoding, part
        self.shape = (rows, cols // 2) if part == 0 else (rows, cols // mxfp4.GROUP)

    def __array__(self, dtype=None):
        values = self.encoding.part(self.part)
        return values if dtype is None else values.astype(dtype)


def parse_sets(pairs):
    """{key: value}; a dotted key (text_config.hidden_act) sets a nested one."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SluiceError(f"--set {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            raise SluiceError(f"--set {pair!r}: value is not JSON (quote strings: KEY='\"text\"')") from None
    return out


def apply_sets(config, sets):
    for key, value in sets.items():
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            if not isinstance(node.get(parent), dict):
                raise SluiceError(f"--set {key}: {parent} is not an object of the config")
            node = node[parent]
        node[leaf] = value


def check_config(config):
    resolved = families.resolve(config)  # refuses what the reference could not run
    if families.family_of(config) in families.GQA_FAMILIES and families.head_dim(resolved) % 2 != 0:
        raise SluiceError(f"config: head_dim {families.head_dim(resolved)} must be even for RoPE")


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


def make_k3_checkpoint(out_dir, seed, dtype, shards, overrides, use_mxfp4=False):
    """K3-tiny (k3.md §6): the LM under language_model., the vision tower and projector;
    `use_mxfp4` stores the routed experts as weight_packed + weight_scale (§3)."""
    config = k3.tiny_config()
    apply_sets(config, overrides or {})
    config["text_config"]["torch_dtype"] = _DTYPES[dtype][1]
    k3.resolve(config)
    os.makedirs(out_dir, exist_ok=True)
    tensors, dtypes = {}, {}
    for index, (name, shape) in enumerate(k3.tensor_shapes(config, vision=True).items()):
        mean, std = k3.init_std_and_mean(config, name)
        draw = (lambda rng: k3.a_log_values(config, name, rng)) if name.endswith(".A_log") else None
        weight = RandomTensor(shape, mean, std, seed, index, draw=draw)
        if use_mxfp4 and ".experts." in name:
            encoding = Mxfp4Encoding(weight)
            for part, suffix in enumerate((mxfp4.PACKED, mxfp4.SCALE)):
                tensors[name + suffix], dtypes[name + suffix] = Mxfp4Part(encoding, part), "U8"
            continue
        tensors[name] = weight
        dtypes[name] = "F32" if families.is_f32_tensor(name) else _DTYPES[dtype][0]
    safetensors.save_checkpoint(out_dir, tensors, dtypes, shards)
    write_json(os.path.join(out_dir, "config.json"), config)
    text = config["text_config"]
    write_json(os.path.join(out_dir, "tokenizer.json"), bpe.build_tokenizer_json("kimi_k3", text["vocab_size"]))
    tokenizer_config = bpe.build_tokenizer_config("kimi_k3", text)
    tokenizer_config.pop("chat_template", None)  # K3's prompts are code (XTML), not a template
    write_json(os.path.join(out_dir, "tokenizer_config.json"), tokenizer_config)
    return config


_ROUTERS = ("mlp.gate.weight", "block_sparse_moe.gate.weight")
_RESIDUAL_WRITERS = ("o_proj.weight", "down_proj.weight", ".w2.weight")


def shaped_weights(config, shapes, seed):
    """{name: array or scale} for --routing realistic: the embedding, LM head
    and routers of a fitted routing shape, norms 1, selection biases 0, and
    the factor on every projection that writes the residual stream."""
    resolved = families.resolve(config)
    if resolved.get("tie_word_embeddings"):
        raise SluiceError("--routing realistic: tie_word_embeddings is true, and the LM head must differ")
    routers = sorted((n for n in shapes if n.endswith(_ROUTERS)), key=lambda n: int(n.split(".")[2]))
    if not routers:
        raise SluiceError("--routing realistic: the model has no routed experts")
    experts, hidden = shapes[routers[0]]
    top_k = resolved.get("num_experts_per_tok") or resolved.get("num_experts_per_token")
    shape = routing_shape.Shape(hidden, config["vocab_size"], len(routers), experts, seed)
    routing_shape.fit(shape, len(routers), experts, top_k, routing_shape.select_for(resolved))
    out = {"model.embed_tokens.weight": shape.embedding(), "lm_head.weight": shape.lm_head()}
    out.update({name: shape.router(m) for m, name in enumerate(routers)})
    for name, dims in shapes.items():
        if name.endswith("norm.weight"):
            out[name] = np.ones(dims, dtype=np.float32)
        elif name.endswith("e_score_correction_bias"):
            out[name] = np.zeros(dims, dtype=np.float32)
        elif name.endswith(_RESIDUAL_WRITERS):
            out[name] = routing_shape.RESIDUAL_SCALE
    return out


def make_checkpoint(family, out_dir, seed=0, dtype="bf16", shards=1, overrides=None, use_fp8=False,
                    use_mxfp4=False, routing="random", variant=None):
    """Writes the checkpoint and returns its config. `use_fp8` stores the §0.9
    tensors as F8_E4M3 with F32 `_scale_inv` block scales (DeepSeek/K2 only);
    `use_mxfp4` K3's routed experts as MXFP4; `variant` edits the tiny config
    as sluicepy/config_variants.py names it, before `overrides`."""
    if family == k3.ARCH and variant is not None:
        raise SluiceError(f"--variant: {k3.ARCH} has none (test_k3_agreement.py varies its keys)")
    if family == k3.ARCH:
        if routing != "random":
            raise SluiceError("--routing realistic: not for kimi_k3 (its attention residuals read every block)")
        if use_fp8:
            raise SluiceError("--fp8: Kimi K3 ships bf16 and MXFP4, not fp8")
        return make_k3_checkpoint(out_dir, seed, dtype, shards, overrides, use_mxfp4)
    if use_mxfp4:
        raise SluiceError(f"--mxfp4: only {k3.ARCH} ships MXFP4 experts")
    config = families.tiny_config(family)
    if variant is not None:
        config = config_variants.apply(config, family, variant)
    apply_sets(config, overrides or {})
    config["torch_dtype"] = _DTYPES[dtype][1]
    if use_fp8:
        if family not in families.MLA_FAMILIES:
            raise SluiceError(f"--fp8: only {', '.join(families.MLA_FAMILIES)} ship fp8 checkpoints")
        config["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                         "weight_block_size": [fp8.BLOCK, fp8.BLOCK]}
    check_config(config)
    os.makedirs(out_dir, exist_ok=True)
    tensors, dtypes = {}, {}
    # MTP tensors come last so the main model's weights do not depend on them.
    shapes = {**families.tensor_shapes(config), **families.mtp_tensor_shapes(config)}
    shaped = shaped_weights(config, shapes, seed) if routing == "realistic" else {}
    for index, (name, shape) in enumerate(shapes.items()):
        mean, std = families.init_std_and_mean(config, name)
        weight = RandomTensor(shape, mean, std * shaped.get(name, 1.0), seed, index, families.init_log_uniform(name))
        if isinstance(shaped.get(name), np.ndarray):
            weight = shaped[name]
        if use_fp8 and families.is_fp8_tensor(name):
            tensors[name], dtypes[name] = Fp8Values(weight), "F8_E4M3"
            scale = name + safetensors.SCALE_SUFFIX
            tensors[scale], dtypes[scale] = Fp8Scales(weight), "F32"
        else:
            tensors[name] = weight
            dtypes[name] = "F32" if families.is_f32_tensor(name) else _DTYPES[dtype][0]
    safetensors.save_checkpoint(out_dir, tensors, dtypes, shards)
    write_json(os.path.join(out_dir, "config.json"), config)
    write_json(os.path.join(out_dir, "tokenizer.json"), bpe.build_tokenizer_json(family, config["vocab_size"]))
    write_json(os.path.join(out_dir, "tokenizer_config.json"), bpe.build_tokenizer_config(family, config))
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Write a tiny random checkpoint in the Hugging Face layout "
                    "(architectures.md §7: linear N(0,0.02²), router N(0,(2/√hidden)²), "
                    "e_score_correction_bias N(0,0.05²) f32, norms 1+N(0,0.1²); KDA: A_log ln U(1,16) f32, "
                    "dt_bias N(0,1) f32, conv N(0,0.3²)). "
                    "DeepSeek's MTP layer: --set num_nextn_predict_layers=1.")
    parser.add_argument("family", choices=families.FAMILIES + (k3.ARCH,))
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="bf16")
    parser.add_argument("--shards", type=int, default=1,
                        help="K>1 writes model-0000i-of-0000K.safetensors plus model.safetensors.index.json")
    parser.add_argument("--fp8", action="store_true",
                        help="deepseek_v3/kimi_k2: F8_E4M3 projections and experts with 128x128 F32 "
                             "weight_scale_inv blocks and a quantization_config (§0.9)")
    parser.add_argument("--mxfp4", action="store_true",
                        help="kimi_k3: routed experts as U8 weight_packed (E2M1, low nibble first) and "
                             "weight_scale (E8M0 per 32 values), as K3 ships them (k3.md §3)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key with a JSON value (repeatable), e.g. --set num_experts=64; "
                             "a dotted key sets a nested one (kimi_k3: --set text_config.activation_situ_beta=1)")
    parser.add_argument("--variant", metavar="NAME",
                        help="one math-changing config key set or dropped, per family: "
                             + "; ".join(f"{f}: {', '.join(config_variants.names(f))}" for f in families.FAMILIES))
    parser.add_argument("--routing", choices=("random", "realistic"), default="random",
                        help="realistic: embedding, LM head and routers shaped so that decode sampled at "
                             "temperature 1 routes with real routing's statistics (sluicepy/routing_shape.py)")
    args = parser.parse_args(argv)
    try:
        make_checkpoint(args.family, args.out_dir, args.seed, args.dtype, args.shards, parse_sets(args.set), args.fp8,
                        args.mxfp4, args.routing, args.variant)
    except SluiceError as e:
        print(f"make_tiny_checkpoint: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
