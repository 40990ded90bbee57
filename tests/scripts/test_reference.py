# tests/scripts/test_reference.py: the PyTorch reference's decode with a KV
# cache equals recomputing the whole sequence, its output is deterministic and
# laid out as documented, and routing, tying and dense layers behave as specified;
# forced tokens and forced routing replay a run exactly and change only what they force.
import json
import os
import unittest

import numpy as np
import torch

import helpers
from sluicepy import families, models, rope, routing
import reference

PROMPT = [5, 100, 200, 300, 7, 42, 43, 44, 45, 46, 47, 48]


def load(directory):
    config, weights = reference.load_weights(directory)
    return models.MoeModel(config, weights)


class ReferenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = helpers.scratch()
        cls.olmoe = helpers.make_checkpoint(os.path.join(cls.tmp.name, "olmoe"), "olmoe", "--seed", "1")
        cls.qwen = helpers.make_checkpoint(os.path.join(cls.tmp.name, "qwen"), "qwen3_moe", "--seed", "2",
                                           "--set", "mlp_only_layers=[1]", "--shards", "2")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_kv_cache_decode_equals_full_recompute(self):
        for directory in (self.olmoe, self.qwen):
            with self.subTest(model=os.path.basename(directory)):
                model = load(directory)
                cached, tokens = reference.generate(model, PROMPT, 8)
                recomputed, tokens2 = reference.generate(model, PROMPT, 8, use_cache=False)
                self.assertEqual(tokens, tokens2)
                self.assertEqual(cached.shape, (9, 512))
                torch.testing.assert_close(cached, recomputed, rtol=0, atol=1e-5)
                # Prefill in pieces must see the same positions as prefill at once.
                cache = model.new_cache()
                model.forward(PROMPT[:5], cache)
                split = model.forward(PROMPT[5:], cache)[-1]
                torch.testing.assert_close(split, cached[0], rtol=0, atol=1e-5)

    def test_cli_is_deterministic_and_writes_one_plus_n_rows(self):
        dumps = []
        for run in range(2):
            out = os.path.join(self.tmp.name, f"logits{run}.f32")
            result = helpers.run_script("reference.py", self.olmoe, "--prompt-ids", ",".join(map(str, PROMPT)),
                                        "-n", "5", "--dump-logits", out, "--json")
            with open(out, "rb") as f:
                dumps.append(f.read())
            tokens = json.loads(result.stdout)["tokens"]
        self.assertEqual(dumps[0], dumps[1])
        rows = np.frombuffer(dumps[0], dtype="<f4").reshape(-1, 512)
        self.assertEqual(rows.shape[0], 6)
        self.assertEqual(len(tokens), 5)
        # Greedy: token i is the argmax of row i-1 (rows are after the prompt, then after each token).
        self.assertEqual(tokens, [int(np.argmax(rows[i])) for i in range(5)])

    def test_routing_ties_take_lower_expert_and_weights_follow_norm_topk_prob(self):
        logits = torch.tensor([[0.0, 1.0, 1.0, 0.5, 1.0]])
        ids, weights = routing.route_softmax(logits, 2, renormalise=False)
        self.assertEqual(ids.tolist(), [[1, 2]])
        probs = torch.softmax(logits, dim=-1)
        torch.testing.assert_close(weights, probs[:, [1, 2]])
        ids, weights = routing.route_softmax(logits, 3, renormalise=True)
        self.assertEqual(ids.tolist(), [[1, 2, 4]])
        self.assertAlmostEqual(float(weights.sum()), 1.0, places=6)

    def test_forced_tokens_and_routing_replay_a_run_and_force_only_the_choice(self):
        ids = ",".join(map(str, PROMPT))
        out = {name: os.path.join(self.tmp.name, name) for name in ("free", "trace", "replayed", "other", "moved")}
        free = json.loads(helpers.run_script("reference.py", self.qwen, "--prompt-ids", ids, "-n", "4", "--json",
                                             "--dump-logits", out["free"], "--trace-out", out["trace"]).stdout)
        helpers.run_script("reference.py", self.qwen, "--prompt-ids", ids, "--forced-tokens",
                           ",".join(map(str, free["tokens"])), "--forced-routing", out["trace"],
                           "--dump-logits", out["replayed"])
        with open(out["free"], "rb") as a, open(out["replayed"], "rb") as b:
            self.assertEqual(a.read(), b.read())
        # Other tokens are fed as given; a trace whose last token takes other experts changes only that row.
        other = [t + 1 for t in free["tokens"]]
        result = helpers.run_script("reference.py", self.qwen, "--prompt-ids", ids, "--forced-tokens",
                                    ",".join(map(str, other)), "--json", "--dump-logits", out["other"])
        self.assertEqual(json.loads(result.stdout)["tokens"], other)
        with open(out["trace"]) as f:
            rows = [json.loads(line) for line in f]
        config, weights = reference.load_weights(self.qwen)
        experts = config["num_experts"]
        rows[-1]["layers"][0] = [(e + 1) % experts for e in rows[-1]["layers"][0]]
        with open(out["trace"], "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        helpers.run_script("reference.py", self.qwen, "--prompt-ids", ids, "--forced-tokens",
                           ",".join(map(str, free["tokens"])), "--forced-routing", out["trace"],
                           "--dump-logits", out["moved"])
        free_rows, moved = (np.fromfile(out[n], dtype="<f4").reshape(-1, 512) for n in ("free", "moved"))
        np.testing.assert_array_equal(free_rows[:-1], moved[:-1])
        self.assertGreater(float(np.abs(free_rows[-1] - moved[-1]).max()), 1e-4)
        # The weights of forced experts are the router's own probabilities for them.
        model = load(self.qwen)
        b = torch.randn(2, config["hidden_size"])
        logits = b @ model.w["model.layers.0.mlp.gate.weight"].T
        chosen = torch.tensor([[3, 0], [1, 6]])
        ids_, w = routing.route_softmax(logits, 2, True, chosen)
        self.assertEqual(ids_.tolist(), chosen.tolist())
        p = torch.softmax(logits, -1).gather(1, chosen)
        torch.testing.assert_close(w, p / p.sum(-1, keepdim=True))
        # A trace that lacks a position is an error naming it, not a silent free choice.
        with open(out["trace"], "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows[:-1])
        result = helpers.run_script("reference.py", self.qwen, "--prompt-ids", ids, "--forced-tokens",
                                    ",".join(map(str, free["tokens"])), "--forced-routing", out["trace"], check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"at position {len(PROMPT) + 3}", result.stderr)

    def test_rope_rotates_pairs_i_and_i_plus_half(self):
        x = torch.zeros(1, 1, 8)
        x[0, 0, 1] = 1.0  # pairs with element 5
        inv_freq, multiplier = rope.frequencies(8, 10000.0)
        out = rope.rotate_half_split(x, *rope.cos_sin(torch.tensor([3]), inv_freq, multiplier))
        angle = 3 * 10000.0 ** (-2 * 1 / 8)
        self.assertAlmostEqual(float(out[0, 0, 1]), np.cos(angle), places=6)
        self.assertAlmostEqual(float(out[0, 0, 5]), np.sin(angle), places=6)
        self.assertAlmostEqual(float(out.abs().sum() - out[0, 0, 1].abs() - out[0, 0, 5].abs()), 0.0, places=6)

    def test_olmoe_norms_whole_vector_and_qwen_per_head(self):
        # Scaling one head's q_proj rows changes the other heads only under OLMoE's whole-vector norm.
        for directory, family in ((self.olmoe, "olmoe"), (self.qwen, "qwen3_moe")):
            config, weights = reference.load_weights(directory)
            d = families.head_dim(config)
            base = models.MoeModel(config, weights)
            weights = dict(weights)
            q = weights["model.layers.0.self_attn.q_proj.weight"].copy()
            q[:d] *= 5
            weights["model.layers.0.self_attn.q_proj.weight"] = q
            scaled = models.MoeModel(config, weights)
            a = torch.randn(3, config["hidden_size"])
            # Per-head norm is scale invariant for head 0; the whole-vector norm is not for head 1.
            def q_heads(m):
                p = "model.layers.0.self_attn."
                out = a @ m.w[p + "q_proj.weight"].T
                if family == "olmoe":
                    return models.rms_norm(out, m.w[p + "q_norm.weight"], m.eps).view(3, -1, d)
                return models.rms_norm(out.view(3, -1, d), m.w[p + "q_norm.weight"], m.eps)
            changed = (q_heads(base) - q_heads(scaled)).abs().amax(dim=(0, 2))
            if family == "olmoe":
                self.assertGreater(float(changed[1]), 1e-3)
            else:
                self.assertLess(float(changed.max()), 1e-4)

    def test_tied_embeddings_use_the_embedding_as_lm_head(self):
        tied = helpers.make_checkpoint(os.path.join(self.tmp.name, "tied"), "olmoe", "--set", "tie_word_embeddings=true")
        config, weights = reference.load_weights(tied)
        logits, _ = reference.generate(models.MoeModel(config, weights), PROMPT, 2)
        untied = dict(config, tie_word_embeddings=False)
        weights = dict(weights, **{"lm_head.weight": weights["model.embed_tokens.weight"]})
        logits2, _ = reference.generate(models.MoeModel(untied, weights), PROMPT, 2)
        torch.testing.assert_close(logits, logits2, rtol=0, atol=0)

    def test_dense_layer_is_used_in_qwen_variant(self):
        config, weights = reference.load_weights(self.qwen)
        self.assertFalse(families.is_moe_layer(config, 1))
        base, _ = reference.generate(models.MoeModel(config, weights), PROMPT, 0)
        weights = dict(weights)
        weights["model.layers.1.mlp.down_proj.weight"] = weights["model.layers.1.mlp.down_proj.weight"] * 0
        zeroed, _ = reference.generate(models.MoeModel(config, weights), PROMPT, 0)
        self.assertGreater(float((base - zeroed).abs().max()), 1e-4)


if __name__ == "__main__":
    unittest.main()
