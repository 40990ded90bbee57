#!/usr/bin/python3
# scripts/make_k3_layer_sources.py: writes a K3 checkpoint (make_tiny_checkpoint's
# kimi_k3 --mxfp4 trunk) whose one MoE layer has the real expert count and shape
# (896 experts, [3072, 3584] / [3584, 3072], MXFP4): converter benchmarks only.
# Encoding 896 x 3 matrices of N(0, 0.02²) through mxfp4.encode takes an hour here,
# so POOL experts are encoded and every other expert is a pool member with its
# own random sign flips: the same magnitudes statistics, different matrices.
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_checkpoint as tiny  # noqa: E402
from sluicepy import SluiceError  # noqa: E402

_SIGN_BITS = np.uint8(0x88)  # bit 3 of both nibbles


def install_pool(pool):
    encoded = {}  # (shape, pool member) -> (packed, scales)

    def pooled(self, dtype=None):
        weight = self.weight
        member = weight.index % pool
        key = (weight.shape, member)
        if key not in encoded:
            encoded[key] = tiny.mxfp4.encode(np.asarray(weight))
        part = encoded[key][self.part]
        if self.part == 0 and weight.index >= pool:
            flips = np.random.default_rng([weight.seed, weight.index, 7]).integers(0, 256, part.shape, dtype=np.uint8)
            part = part ^ (flips & _SIGN_BITS)
        return part if dtype is None else part.astype(dtype)

    tiny.Mxfp4Part.__array__ = pooled


def main(argv=None):
    parser = argparse.ArgumentParser(description="One real-shape Kimi K3 MoE layer of MXFP4 experts (benchmarks)")
    parser.add_argument("out_dir")
    parser.add_argument("--experts", type=int, default=896)
    parser.add_argument("--pool", type=int, default=8, help="experts encoded from random weights; the rest reuse them")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    overrides = {
        "text_config.num_hidden_layers": 2,
        "text_config.num_experts": args.experts,
        "text_config.num_experts_per_token": min(16, args.experts),
        "text_config.routed_expert_hidden_size": 3584,
        "text_config.moe_intermediate_size": 3072,
        "text_config.linear_attn_config": {"kda_layers": [1], "full_attn_layers": [2], "num_heads": 4,
                                           "head_dim": 32, "short_conv_kernel_size": 4,
                                           "use_full_rank_gate": True, "gate_lower_bound": -5.0},
    }
    install_pool(max(1, args.pool))
    try:
        tiny.make_checkpoint("kimi_k3", args.out_dir, args.seed, "bf16", args.shards, overrides, use_mxfp4=True)
    except SluiceError as e:
        print(f"make_k3_layer_sources: error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"out_dir": args.out_dir, "experts": args.experts, "pool": args.pool}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
