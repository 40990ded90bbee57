#!/usr/bin/python3
# scripts/make_tiny_checkpoint.py: writes a random-weight checkpoint in the exact
# Hugging Face layout (config, safetensors, tokenizer) for tests and benchmarks.
# Weights are a pure function of (config, seed); nothing here reads a real model.
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicepy import SluiceError, bpe, families, safetensors  # noqa: E402

_DTYPES = {"bf16": ("BF16", "bfloat16"), "f16": ("F16", "float16"), "f32": ("F32", "float32")}


class RandomTensor:
    """One weight, drawn only when written: N(mean, std²) from its own stream
    (seed, index), so a tensor does not depend on which others exist."""

    def __init__(self, shape, mean, std, seed, index):
        self.shape, self.mean, self.std, self.seed, self.index = tuple(shape), mean, std, seed, index

    def __array__(self, dtype=None):
        values = np.random.default_rng([self.seed, self.index]).standard_normal(self.shape, dtype=np.float32)
        values *= np.float32(self.std)
        values += np.float32(self.mean)
        return values if dtype is None else values.astype(dtype)


def parse_sets(pairs):
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


def check_config(config):
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    if heads % kv_heads != 0:
        raise SluiceError(f"config: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    if families.head_dim(config) % 2 != 0:
        raise SluiceError(f"config: head_dim {families.head_dim(config)} must be even for RoPE")
    if config["num_experts_per_tok"] > config["num_experts"]:
        raise SluiceError("config: num_experts_per_tok exceeds num_experts")


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


def make_checkpoint(family, out_dir, seed=0, dtype="bf16", shards=1, overrides=None):
    """Writes the checkpoint and returns its config."""
    config = families.tiny_config(family)
    config.update(overrides or {})
    config["torch_dtype"] = _DTYPES[dtype][1]
    check_config(config)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {}
    for index, (name, shape) in enumerate(families.tensor_shapes(config).items()):
        mean, std = families.init_std_and_mean(config, name)
        tensors[name] = RandomTensor(shape, mean, std, seed, index)
    safetensors.save_checkpoint(out_dir, tensors, _DTYPES[dtype][0], shards)
    write_json(os.path.join(out_dir, "config.json"), config)
    write_json(os.path.join(out_dir, "tokenizer.json"), bpe.build_tokenizer_json(family, config["vocab_size"]))
    write_json(os.path.join(out_dir, "tokenizer_config.json"), bpe.build_tokenizer_config(family, config))
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Write a tiny random checkpoint in the Hugging Face layout "
                    "(architectures.md §7: linear N(0,0.02²), router N(0,(2/√hidden)²), norms 1+N(0,0.1²)).")
    parser.add_argument("family", choices=families.FAMILIES)
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="bf16")
    parser.add_argument("--shards", type=int, default=1,
                        help="K>1 writes model-0000i-of-0000K.safetensors plus model.safetensors.index.json")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key with a JSON value (repeatable), e.g. --set num_experts=64")
    args = parser.parse_args(argv)
    try:
        make_checkpoint(args.family, args.out_dir, args.seed, args.dtype, args.shards, parse_sets(args.set))
    except SluiceError as e:
        print(f"make_tiny_checkpoint: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
