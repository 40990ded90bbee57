# tests/scripts/test_deepseek.py: the DeepSeek-V3 / Kimi K2 pieces of the
# reference against architectures.md: YaRN's kept/blended/divided split and
# softmax scale (§0.6 table, §7.3, §7.4), routing on hand-worked cases (§3.5,
# the 0/−∞ fork of §10.2), Mixtral's top-2 (§5), and absorbed MLA == expanded in f64.
import math
import os
import unittest

import numpy as np
import torch

import helpers
from sluicepy import SluiceError, families, mla, models, rope, routing
import reference

PROMPT = [5, 17, 200, 3, 88, 41, 9, 300, 12, 77, 150, 6, 250, 33, 101, 64]


def split(scaling, dim, base):
    """(kept, blended, divided) pair counts, read off the frequencies themselves."""
    inv_freq, _ = rope.frequencies(dim, base, scaling, torch.float64)
    plain, _ = rope.frequencies(dim, base, None, torch.float64)
    ratio = (inv_freq / plain).tolist()
    kept = sum(1 for r in ratio if abs(r - 1) < 1e-12)
    divided = sum(1 for r in ratio if abs(r - 1 / scaling["factor"]) < 1e-12)
    return kept, len(ratio) - kept - divided, divided


def yarn(factor, beta_fast, beta_slow, original):
    return {"factor": factor, "beta_fast": beta_fast, "beta_slow": beta_slow, "mscale": 1.0, "mscale_all_dim": 1.0,
            "original_max_position_embeddings": original}


class YarnTest(unittest.TestCase):
    def test_real_checkpoints_match_the_section_0_6_table(self):
        # checkpoint: (base, f, βf, βs) -> (low, high, kept/blended/divided, mscale², softmax scale)
        table = {"DeepSeek-V3": ((10000, 40, 32, 1), (10, 23, (11, 12, 9), 1.873854, 0.135234)),
                 "Kimi K2": ((50000, 32, 1, 1), (19, 20, (20, 0, 12), 1.813260, 0.130861)),
                 "Kimi K2 Thinking": ((50000, 64, 1, 1), (19, 20, (20, 0, 12), 2.004740, 0.144680))}
        for name, ((base, f, bf, bs), (low, high, counts, m2, scale)) in table.items():
            with self.subTest(checkpoint=name):
                scaling = yarn(f, bf, bs, 4096)
                self.assertEqual(rope.yarn_range(scaling, 64, base), (low, high))
                self.assertEqual(split(scaling, 64, base), counts)
                self.assertAlmostEqual(rope.softmax_mscale_squared(scaling), m2, places=6)
                self.assertAlmostEqual(192 ** -0.5 * rope.softmax_mscale_squared(scaling), scale, places=6)
                self.assertEqual(rope.frequencies(64, base, scaling)[1], 1.0)  # m = m_all: cos/sin unscaled

    def test_tiny_configs_exercise_the_regions_section_7_states(self):
        ds = families.resolve(families.tiny_config("deepseek_v3"))
        self.assertEqual(rope.yarn_range(ds["rope_scaling"], 16, ds["rope_theta"]), (0, 3))
        self.assertEqual(split(ds["rope_scaling"], 16, ds["rope_theta"]), (1, 2, 5))  # pair 0 / 1-2 / 3-7
        k2 = families.resolve(families.tiny_config("kimi_k2"))
        self.assertEqual(rope.yarn_range(k2["rope_scaling"], 16, k2["rope_theta"]), (1, 2))
        self.assertEqual(split(k2["rope_scaling"], 16, k2["rope_theta"]), (2, 0, 6))  # pairs 0-1 / none / 2-7
        # §7.3: softmax scale 48^-1/2 · (0.1·ln 40 + 1)².
        attention = mla.Mla(ds, {}, torch.float64)
        self.assertAlmostEqual(attention.scale, 48 ** -0.5 * (0.1 * math.log(40) + 1) ** 2, places=12)
        self.assertAlmostEqual(attention.scale, 0.270468, places=6)

    def test_missing_mscale_all_dim_scales_cos_sin_not_the_softmax(self):
        scaling = {"factor": 40.0, "original_max_position_embeddings": 64}
        self.assertAlmostEqual(rope.frequencies(16, 10000.0, scaling)[1], 0.1 * math.log(40) + 1, places=12)
        self.assertEqual(rope.softmax_mscale_squared(scaling), 1.0)

    def test_yarn_keys_read_as_transformers_reads_them(self):
        # Only mscale: get_mscale(factor), not get_mscale(factor, mscale); attention_factor is the amplitude.
        only_mscale = {"factor": 40.0, "original_max_position_embeddings": 64, "mscale": 0.707}
        self.assertAlmostEqual(rope.frequencies(16, 10000.0, only_mscale)[1], 0.1 * math.log(40) + 1, places=12)
        self.assertEqual(rope.frequencies(16, 10000.0, dict(only_mscale, attention_factor=0.8))[1], 0.8)
        # beta_fast / beta_slow of 0 take 32 / 1 (transformers' `or`); truncate false keeps the range's fractions.
        zero = {"factor": 40.0, "original_max_position_embeddings": 64, "beta_fast": 0, "beta_slow": 0}
        self.assertEqual(rope.yarn_range(zero, 16, 10000.0), (0, 3))
        low, high = rope.yarn_range(dict(zero, truncate=False), 16, 10000.0)
        self.assertEqual(low, 0)
        self.assertAlmostEqual(high, 16 * math.log(64 / (2 * math.pi)) / (2 * math.log(10000.0)), places=12)
        # A present null truncate is false; a zero attention_factor is refused by name.
        config = families.tiny_config("deepseek_v3")
        config["rope_scaling"]["truncate"] = None
        self.assertIs(families.resolve(config)["rope_scaling"]["truncate"], False)
        config["rope_scaling"]["attention_factor"] = 0
        with self.assertRaisesRegex(SluiceError, "attention_factor"):
            families.resolve(config)

    def test_adjacent_pairing_rotates_2i_with_2i_plus_1(self):
        x = torch.zeros(1, 1, 8, dtype=torch.float64)
        x[0, 0, 2] = 1.0  # pair 1 = elements 2 and 3
        inv_freq, multiplier = rope.frequencies(8, 10000.0, None, torch.float64)
        out = rope.rotate_adjacent(x, *rope.cos_sin(torch.tensor([5]), inv_freq, multiplier))[0, 0]
        angle = 5 * 10000.0 ** (-2 / 8)
        self.assertAlmostEqual(float(out[2]), math.cos(angle), places=12)
        self.assertAlmostEqual(float(out[3]), math.sin(angle), places=12)
        self.assertAlmostEqual(float(out.abs().sum() - out[2].abs() - out[3].abs()), 0.0, places=12)

    def test_hf_layout_permutes_evens_then_odds_and_keeps_dot_products(self):
        # HF (rope_interleave) reorders the 64 dims as all evens then all odds and rotates
        # half-split: the same vector, permuted, so q·k is the same in either layout (§0.5).
        gen = torch.Generator().manual_seed(1)
        q, k = torch.randn(5, 2, 16, generator=gen, dtype=torch.float64), torch.randn(5, 1, 16, generator=gen,
                                                                                      dtype=torch.float64)
        inv_freq, multiplier = rope.frequencies(16, 10000.0, yarn(40.0, 32, 1, 64), torch.float64)
        cos, sin = rope.cos_sin(torch.arange(5), inv_freq, multiplier)
        def hf_layout(x):
            return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)
        ours_q, ours_k = rope.rotate_adjacent(q, cos, sin), rope.rotate_adjacent(k, cos, sin)
        hf_q, hf_k = rope.rotate_half_split(hf_layout(q), cos, sin), rope.rotate_half_split(hf_layout(k), cos, sin)
        torch.testing.assert_close(hf_q, hf_layout(ours_q), rtol=0, atol=1e-14)
        torch.testing.assert_close(torch.einsum("thd,shd->hts", hf_q, hf_k.expand(5, 2, 16)),
                                   torch.einsum("thd,shd->hts", ours_q, ours_k.expand(5, 2, 16)), rtol=0, atol=1e-13)


def logit(p):
    return math.log(p / (1 - p))


class RoutingTest(unittest.TestCase):
    def test_groups_exclude_the_single_best_expert(self):
        # 8 experts in 4 groups of 2, keep 2 groups. Expert 0 scores highest (0.95) but its
        # group sums to 1.0, below groups 1 (1.2) and 2 (1.1): experts 2, 3 (tie: lower id first), 4.
        s = [0.95, 0.05, 0.6, 0.6, 0.55, 0.55, 0.1, 0.1]
        logits = torch.tensor([[logit(p) for p in s]], dtype=torch.float64)
        ids, weights = routing.route_sigmoid_grouped(logits, torch.zeros(8, dtype=torch.float64), 3, 4, 2, True, 2.5)
        self.assertEqual(ids.tolist(), [[2, 3, 4]])
        np.testing.assert_allclose(weights.numpy(), [[0.6 / 1.75 * 2.5, 0.6 / 1.75 * 2.5, 0.55 / 1.75 * 2.5]],
                                   rtol=1e-12)
        ids, _ = routing.route_sigmoid_grouped(logits, torch.zeros(8, dtype=torch.float64), 3, 1, 1, True, 2.5)
        self.assertEqual(ids.tolist(), [[0, 2, 3]])  # one group: a plain top-3

    def test_bias_chooses_but_the_weights_stay_unbiased(self):
        s = [0.5, 0.75, 0.6, 0.7]
        logits = torch.tensor([[logit(p) for p in s]], dtype=torch.float64)
        bias = torch.tensor([0.4, 0.0, 0.0, 0.0], dtype=torch.float64)  # lifts expert 0 to 0.9
        ids, weights = routing.route_sigmoid_grouped(logits, bias, 2, 1, 1, True, 1.0)
        self.assertEqual(ids.tolist(), [[0, 1]])
        np.testing.assert_allclose(weights.numpy(), [[0.5 / 1.25, 0.75 / 1.25]], rtol=1e-12)
        _, raw = routing.route_sigmoid_grouped(logits, bias, 2, 1, 1, False, 2.827)
        np.testing.assert_allclose(raw.numpy(), [[0.5 * 2.827, 0.75 * 2.827]], rtol=1e-12)

    def test_adversarial_bias_tells_the_zero_and_neg_inf_forks_apart(self):
        # s + b = [-0.2, -0.25 | -0.6, -0.65]: group 0 is kept, yet all its experts score below 0,
        # so HF's 0-filled excluded experts (2, 3) win the final top-2; −∞ keeps experts 0, 1.
        logits = torch.tensor([[0.0, math.log(3), 0.0, math.log(3)]], dtype=torch.float64)  # s = .5 .75 .5 .75
        bias = torch.tensor([-0.7, -1.0, -1.1, -1.4], dtype=torch.float64)
        zero = routing.route_sigmoid_grouped(logits, bias, 2, 2, 1, True, 2.5, routing.EXCLUDE_ZERO)
        neg_inf = routing.route_sigmoid_grouped(logits, bias, 2, 2, 1, True, 2.5, routing.EXCLUDE_NEG_INF)
        self.assertEqual((zero[0].tolist(), neg_inf[0].tolist()), ([[2, 3]], [[0, 1]]))
        np.testing.assert_allclose(zero[1].numpy(), [[1.0, 1.5]], rtol=1e-12)

    def test_mixtral_takes_a_softmax_over_the_two_selected(self):
        ids, weights = routing.route_softmax(torch.tensor([[1.0, 3.0, 2.0, 0.0]], dtype=torch.float64), 2, True)
        self.assertEqual(ids.tolist(), [[1, 2]])
        np.testing.assert_allclose(weights.numpy(), [[math.e / (math.e + 1), 1 / (math.e + 1)]], rtol=1e-12)


class MlaModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = helpers.scratch()
        cls.dirs = {f: helpers.make_checkpoint(os.path.join(cls.tmp.name, f), f, "--seed", "3", "--dtype", "f32")
                    for f in ("deepseek_v3", "kimi_k2")}
        # No query LoRA (q_proj directly) and the half-split rope layout (rope_interleave false).
        cls.variant = helpers.make_checkpoint(os.path.join(cls.tmp.name, "variant"), "deepseek_v3", "--dtype", "f32",
                                              "--set", "q_lora_rank=null", "--set", "rope_interleave=false")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_absorbed_equals_expanded_in_f64(self):
        for family, directory in [*self.dirs.items(), ("variant", self.variant)]:
            with self.subTest(family=family):
                config, weights = reference.load_weights(directory)
                runs = {}
                for form in mla.FORMS:
                    model = models.MoeModel(config, weights, mla_form=form, dtype=torch.float64)
                    logits, tokens = reference.generate(model, PROMPT, 8)
                    cache = model.new_cache()
                    model.forward(PROMPT[:7], cache)  # prefill in two chunks, then decode
                    runs[form] = (logits, tokens, model.forward(PROMPT[7:], cache)[-1], cache.layers[1])
                expanded, absorbed = runs[mla.EXPANDED], runs[mla.ABSORBED]
                self.assertEqual(expanded[1], absorbed[1])
                self.assertLess(float((expanded[0] - absorbed[0]).abs().max()), 1e-12)
                self.assertLess(float((expanded[2] - expanded[0][0]).abs().max()), 1e-12)
                self.assertLess(float((absorbed[2] - expanded[0][0]).abs().max()), 1e-12)
                # What each form caches per token: H·(n+r) keys + H·v values, or R latent + r rope.
                self.assertEqual(set(expanded[3]), {"keys", "values"})
                self.assertEqual((tuple(absorbed[3]["latent"].shape), tuple(absorbed[3]["k_rope"].shape)),
                                 ((16, 64), (16, 16)))
                self.assertEqual(tuple(expanded[3]["keys"].shape), (16, 4, 48))

    def test_the_fork_changes_nothing_with_released_biases_and_everything_adversarially(self):
        config, weights = reference.load_weights(self.dirs["deepseek_v3"])
        def run(w, exclusion):
            return reference.generate(models.MoeModel(config, w, exclusion=exclusion), PROMPT, 0)[0]
        self.assertTrue(torch.equal(run(weights, routing.EXCLUDE_ZERO), run(weights, routing.EXCLUDE_NEG_INF)))
        adversarial = dict(weights)
        for i in (1, 2, 3):
            adversarial[f"model.layers.{i}.mlp.gate.e_score_correction_bias"] = np.full(16, -1.0, np.float32)
        diff = (run(adversarial, routing.EXCLUDE_ZERO) - run(adversarial, routing.EXCLUDE_NEG_INF)).abs().max()
        self.assertGreater(float(diff), 1e-3)

    def test_shared_experts_and_dense_layer_are_used(self):
        config, weights = reference.load_weights(self.dirs["kimi_k2"])
        base = reference.generate(models.MoeModel(config, weights), PROMPT, 0)[0]
        for name in ("model.layers.2.mlp.shared_experts.down_proj.weight", "model.layers.0.mlp.down_proj.weight"):
            with self.subTest(zeroed=name):
                changed = dict(weights, **{name: weights[name] * 0})
                other = reference.generate(models.MoeModel(config, changed), PROMPT, 0)[0]
                self.assertGreater(float((base - other).abs().max()), 1e-4)


if __name__ == "__main__":
    unittest.main()
