# tests/scripts/test_realistic_routing.py: make_tiny_checkpoint.py --routing
# realistic on OLMoE-1B-7B's routing geometry (16 MoE layers x 64 experts,
# top-8, hidden 64), converted and decoded by the real `sluice run` at
# temperature 1: the routing it records (--trace-out) has the statistics of
# tests/router/data/routing-stats.json, measured here from the trace on their
# definitions: per-layer next-token repeat and reuse within w tokens within
# ±0.03, the popularity curve within ±0.03 of share at every rank, pairs
# covering 50/80/95% within ±5%. Exits 77 (skipped) without $SLUICE_BIN.
import json
import os
import subprocess
import sys
import unittest

import numpy as np

import helpers

SLUICE_BIN = os.environ.get("SLUICE_BIN", "")
ROOT = os.environ.get("SLUICE_SOURCE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
WINDOWS = 4  # the decode is this many recordings long


def recorded():
    with open(os.path.join(ROOT, "tests", "router", "data", "routing-stats.json"), encoding="utf-8") as f:
        return json.load(f)["models"]["OLMoE-1B-7B-0924"]


def used_matrix(trace, experts):
    """[tokens, layers, experts] booleans: which experts each token used at each layer."""
    tokens, layers = len(trace), len(trace[0])
    used = np.zeros((tokens, layers, experts), dtype=bool)
    for t, token in enumerate(trace):
        for layer, ids in enumerate(token):
            used[t, layer, ids] = True
    return used


def reuse_within(used, w):
    """Share of uses (from the second token on) whose expert the same layer used in the last w tokens."""
    hits = total = 0
    for t in range(1, len(used)):
        recent = used[max(0, t - w):t].any(axis=0)
        hits += (recent & used[t]).sum()
        total += used[t].sum()
    return hits / total


def pairs_covering(counts, share):
    flat = np.sort(counts.ravel())[::-1]
    return int(np.searchsorted(np.cumsum(flat), share * flat.sum()) + 1)


class RealisticRoutingTest(unittest.TestCase):
    def test_decode_routing_has_the_recorded_statistics(self):
        m = recorded()
        tokens, experts, k, layers = m["tokens"], m["experts"], m["top_k"], m["moe_layers"]
        tmp = helpers.scratch()
        src = helpers.make_checkpoint(os.path.join(tmp.name, "ckpt"), "olmoe", "--routing", "realistic",
                                      "--set", f"num_hidden_layers={layers}", "--set", f"num_experts={experts}",
                                      "--set", f"num_experts_per_tok={k}", "--set", "max_position_embeddings=4096",
                                      "--set", "hidden_size=64", "--set", "intermediate_size=32")
        model = os.path.join(tmp.name, "model.sluice")
        subprocess.run([SLUICE_BIN, "convert", src, model, "-q"], check=True, capture_output=True)
        trace_path = os.path.join(tmp.name, "trace.jsonl")
        decoded = WINDOWS * tokens
        run = subprocess.run([SLUICE_BIN, "run", model, "--prompt-ids", "7", "-n", str(decoded), "--temp", "1",
                              "--seed", "5", "--ignore-eos", "--ctx", str(decoded + 8), "--threads", "2",
                              "--trace-out", trace_path], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(trace_path) as f:
            trace = [json.loads(line)["layers"] for line in f][:decoded]
        used = used_matrix(trace, experts)

        repeat = (used[1:] & used[:-1]).sum(axis=2).mean(axis=0) / k
        for layer in range(layers):
            with self.subTest(layer=layer):
                self.assertAlmostEqual(repeat[layer], m["next_token_repeat_per_layer"][layer], delta=0.03)
        for w in (1, 2, 4, 8, 16):
            with self.subTest(w=w):
                self.assertAlmostEqual(reuse_within(used, w), m["reuse_within_last_w_tokens"][str(w)], delta=0.03)

        # Counts depend on the length: per window of the recorded length, averaged.
        windows = [used[i * tokens:(i + 1) * tokens].sum(axis=0) for i in range(WINDOWS)]
        target = np.array(m["per_layer_expert_counts_sorted_descending"], dtype=np.float64)
        want_share = np.cumsum(target, axis=1) / (tokens * k)
        got_share = np.mean([np.cumsum(np.sort(c, axis=1)[:, ::-1], axis=1) / (tokens * k) for c in windows], axis=0)
        for layer in range(layers):
            with self.subTest(popularity_layer=layer):
                self.assertLessEqual(np.abs(got_share[layer] - want_share[layer]).max(), 0.03)
        for share, want in zip((0.5, 0.8, 0.95), m["pairs_covering_50_80_95_percent_of_activations"]):
            with self.subTest(share=share):
                got = np.mean([pairs_covering(c, share) for c in windows])
                self.assertLessEqual(abs(got - want), 0.05 * want)


if __name__ == "__main__":
    if not SLUICE_BIN or not os.path.exists(SLUICE_BIN):
        sys.exit(77)
    unittest.main()
