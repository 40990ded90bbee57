# tests/scripts/test_kimi_linear.py: the Kimi-Linear oracle (architectures.md §4,
# §7.5): the tiny checkpoint's names, shapes, dtypes and weight rules (written out
# here from the document), KDA's chunked form against the token-by-token recurrence,
# NoPE MLA's two forms, the biased/unbiased expert-weight switch, the class defaults
# and the refused variant keys.
import contextlib
import io
import json
import os
import unittest

import numpy as np
import torch

import helpers  # noqa: I100  (first: makes scripts/ importable)
import container_writer
from sluicepy import SluiceError, container, families, kda, mla, models, routing, safetensors
import reference

PROMPT = [5, 17, 200, 3, 88, 41, 9, 300, 12, 77, 150, 6, 250, 33, 101, 64]

# §7.5, KDA layers (0, 1, 3): P = 4·32 = 128.
KDA_LAYER = {"q_proj.weight": [128, 128], "k_proj.weight": [128, 128], "v_proj.weight": [128, 128],
             "q_conv1d.weight": [128, 1, 4], "k_conv1d.weight": [128, 1, 4], "v_conv1d.weight": [128, 1, 4],
             "f_a_proj.weight": [32, 128], "f_b_proj.weight": [128, 32], "A_log": [1, 1, 4, 1],
             "dt_bias": [128], "b_proj.weight": [4, 128], "g_a_proj.weight": [32, 128],
             "g_b_proj.weight": [128, 32], "o_norm.weight": [32], "o_proj.weight": [128, 128]}
# §7.5, the MLA layer (2): q_proj [4·24, 128], kv_a [32+8, 128], kv_b [4·32, 32], o [128, 4·16].
MLA_LAYER = {"q_proj.weight": [96, 128], "kv_a_proj_with_mqa.weight": [40, 128],
             "kv_a_layernorm.weight": [32], "kv_b_proj.weight": [128, 32], "o_proj.weight": [128, 64]}
DENSE = {"mlp.gate_proj.weight": [256, 128], "mlp.up_proj.weight": [256, 128], "mlp.down_proj.weight": [128, 256]}
MOE = {"block_sparse_moe.gate.weight": [8, 128], "block_sparse_moe.gate.e_score_correction_bias": [8],
       "block_sparse_moe.shared_experts.gate_proj.weight": [64, 128],
       "block_sparse_moe.shared_experts.up_proj.weight": [64, 128],
       "block_sparse_moe.shared_experts.down_proj.weight": [128, 64]}
EXPERT = {"w1.weight": [64, 128], "w3.weight": [64, 128], "w2.weight": [128, 64]}
F32 = ("A_log", "dt_bias", "e_score_correction_bias")

# KimiLinearConfig's defaults (configuration_kimi.py of the release), for keys the tiny config sets.
CLASS_DEFAULTS = {"vocab_size": 163840, "hidden_size": 4096, "intermediate_size": 11008,
                  "rms_norm_eps": 1e-6, "routed_scaling_factor": 1.0, "first_k_dense_replace": 0,
                  "moe_layer_freq": 1, "num_shared_experts": 0, "moe_renormalize": True, "num_expert_group": 1,
                  "topk_group": 1, "use_grouped_topk": True, "moe_router_activation_func": "sigmoid",
                  "num_nextn_predict_layers": 0, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
                  "rope_theta": 10000.0, "tie_word_embeddings": False, "model_max_length": None}


def expected_tensors():
    names = {"model.embed_tokens.weight": [512, 128], "model.norm.weight": [128], "lm_head.weight": [512, 128]}
    for i in range(4):
        p = f"model.layers.{i}."
        names[p + "input_layernorm.weight"] = names[p + "post_attention_layernorm.weight"] = [128]
        names.update({p + "self_attn." + n: s for n, s in (MLA_LAYER if i == 2 else KDA_LAYER).items()})
        if i == 0:
            names.update({p + n: s for n, s in DENSE.items()})
            continue
        names.update({p + n: s for n, s in MOE.items()})
        for e in range(8):
            names.update({f"{p}block_sparse_moe.experts.{e}.{n}": s for n, s in EXPERT.items()})
    return names


def tiny(**changes):
    config = families.tiny_config("kimi_linear")
    config.update(changes)
    return config


class CheckpointTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = helpers.scratch()
        cls.dir = helpers.make_checkpoint(os.path.join(cls.tmp.name, "kl"), "kimi_linear", "--seed", "3")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_names_shapes_and_dtypes_of_section_7_5(self):
        header = safetensors.read_header(os.path.join(self.dir, "model.safetensors"))[0]
        self.assertEqual({n: h["shape"] for n, h in header.items()}, expected_tensors())
        for name, h in header.items():
            self.assertEqual(h["dtype"], "F32" if name.endswith(F32) else "BF16", name)
        with open(os.path.join(self.dir, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["linear_attn_config"], {"kda_layers": [1, 2, 4], "full_attn_layers": [3],
                                                        "num_heads": 4, "head_dim": 32, "short_conv_kernel_size": 4})
        self.assertEqual((config["architectures"], config["q_lora_rank"], config["mla_use_nope"],
                          config["num_experts_per_token"], config["routed_scaling_factor"]),
                         (["KimiLinearForCausalLM"], None, True, 2, 2.446))
        with open(os.path.join(self.dir, "tokenizer_config.json")) as f:
            tok = json.load(f)
        self.assertEqual((tok["bos_token"], tok["eos_token"], tok["pad_token"]), ("[BOS]", "<|im_end|>", "[PAD]"))
        self.assertIn("<|im_middle|>", tok["chat_template"])

    def test_weights_follow_the_kda_rules(self):
        w = safetensors.load_checkpoint(self.dir)
        a_log = np.concatenate([w[f"model.layers.{i}.self_attn.A_log"].ravel() for i in (0, 1, 3)])
        self.assertTrue(np.all((a_log >= 0) & (a_log <= np.log(16))), a_log)  # ln U(1, 16)
        self.assertGreater(a_log.std(), 0.3)
        dt = w["model.layers.0.self_attn.dt_bias"]
        self.assertTrue(0.7 < dt.std() < 1.3 and abs(dt.mean()) < 0.3, (dt.mean(), dt.std()))
        conv = w["model.layers.1.self_attn.k_conv1d.weight"]
        self.assertTrue(0.25 < conv.std() < 0.35, conv.std())
        bias = w["model.layers.2.block_sparse_moe.gate.e_score_correction_bias"]
        self.assertTrue(np.all(bias != 0) and bias.std() < 0.15, bias)
        self.assertTrue(0.05 < w["model.layers.2.self_attn.kv_a_layernorm.weight"].std() < 0.2)

    def test_cached_decode_equals_recompute_and_chunked_kda_equals_recurrent(self):
        config, weights = reference.load_weights(self.dir)
        model = models.MoeModel(config, weights)
        cached, tokens = reference.generate(model, PROMPT, 6)
        recomputed, tokens2 = reference.generate(model, PROMPT, 6, use_cache=False)
        self.assertEqual(tokens, tokens2)
        torch.testing.assert_close(cached, recomputed, rtol=0, atol=1e-5)
        for chunk in (1, 3, 64):
            with self.subTest(chunk=chunk):
                rows = reference.generate(models.MoeModel(config, weights, kda_chunk=chunk), PROMPT, 6)[0]
                torch.testing.assert_close(rows, cached, rtol=0, atol=1e-5)

    def test_moe_weight_switch_defaults_to_biased_and_changes_the_logits(self):
        config, weights = reference.load_weights(self.dir)
        self.assertEqual(families.resolve(config)[families.MOE_WEIGHTS_KEY], "biased")
        default = reference.generate(models.MoeModel(config, weights), PROMPT, 2)[0]
        biased = reference.generate(models.MoeModel(dict(config, sluice_moe_weights="biased"), weights), PROMPT, 2)[0]
        unbiased = reference.generate(models.MoeModel(dict(config, sluice_moe_weights="unbiased"), weights),
                                      PROMPT, 2)[0]
        override = reference.generate(models.MoeModel(config, weights, moe_weights="unbiased"), PROMPT, 2)[0]
        self.assertTrue(torch.equal(default, biased))
        self.assertTrue(torch.equal(unbiased, override))
        self.assertGreater(float((biased - unbiased).abs().max()), 1e-3)
        with self.assertRaisesRegex(SluiceError, "sluice_moe_weights 'raw' is not one of biased, unbiased"):
            families.resolve(tiny(sluice_moe_weights="raw"))

    def test_the_switch_set_in_config_json_equals_the_cli_override(self):
        # What the lead's tests do: --set the key at generation, or --moe-weights at run time.
        with helpers.scratch() as d:
            keyed = helpers.make_checkpoint(os.path.join(d, "kl"), "kimi_linear", "--seed", "3",
                                            "--set", 'sluice_moe_weights="unbiased"')
            with open(os.path.join(keyed, "config.json")) as f:
                self.assertEqual(json.load(f)["sluice_moe_weights"], "unbiased")
            rows = {}
            for label, model, extra in (("keyed", keyed, []), ("override", self.dir, ["--moe-weights", "unbiased"]),
                                        ("default", self.dir, [])):
                out = os.path.join(d, label + ".f32")
                helpers.run_script("reference.py", model, "--prompt-ids", ",".join(map(str, PROMPT)), "-n", "2",
                                   "--temp", "0", "--dump-logits", out, *extra)
                rows[label] = np.fromfile(out, dtype="<f4")
        np.testing.assert_array_equal(rows["keyed"], rows["override"])
        self.assertGreater(float(np.abs(rows["keyed"] - rows["default"]).max()), 1e-3)

    def test_nope_mla_absorbed_equals_expanded(self):
        config, weights = reference.load_weights(self.dir)
        weights = {n: torch.as_tensor(v).double() for n, v in weights.items()}
        rows = {}
        for form in mla.FORMS:
            model = models.MoeModel(config, weights, mla_form=form, dtype=torch.float64)
            self.assertAlmostEqual(model.mla.scale, 24 ** -0.5)  # (qk_nope 16 + rope 8)^-1/2, no YaRN factor
            rows[form] = reference.generate(model, PROMPT, 4)[0]
        torch.testing.assert_close(rows[mla.ABSORBED], rows[mla.EXPANDED], rtol=0, atol=1e-10)

    def test_nope_mla_scores_do_not_depend_on_position(self):
        # Unrotated rope dims: one token's MLA output is the same at any position.
        config, weights = reference.load_weights(self.dir)
        model = models.MoeModel(config, weights)
        x = torch.randn(1, 128, generator=torch.Generator().manual_seed(1))
        outputs = [model.mla.expanded(2, x, torch.tensor([p]), {}) for p in (0, 37)]
        self.assertTrue(torch.equal(outputs[0], outputs[1]))

    def test_container_keeps_hf_shapes_and_reads_like_the_checkpoint(self):
        config, weights = reference.load_weights(self.dir)
        with helpers.scratch() as d:
            path = container_writer.write_container(os.path.join(d, "kl.sluice"), config, weights)
            c = container.Container(path)
            self.assertEqual(c.trunk["model.layers.0.self_attn.q_conv1d.weight"]["shape"], [128, 1, 4])
            self.assertEqual(c.trunk["model.layers.3.self_attn.A_log"]["shape"], [1, 1, 4, 1])
            state = c.state_dict()
            self.assertEqual(state["model.layers.3.self_attn.A_log"].shape, (1, 1, 4, 1))
            mixed = dict(weights, **{n: v for n, v in state.items() if n not in c.trunk})
            self.assertTrue(torch.equal(reference.generate(models.MoeModel(c.config, state), PROMPT, 2)[0],
                                        reference.generate(models.MoeModel(config, mixed), PROMPT, 2)[0]))
            out = os.path.join(d, "rows.f32")
            with contextlib.redirect_stdout(io.StringIO()):
                code = reference.main([path, "--prompt-ids", ",".join(map(str, PROMPT)), "-n", "3", "--temp", "0",
                                       "--dump-logits", out, "--moe-weights", "unbiased", "--kda-chunk", "4"])
            self.assertEqual(code, 0)
            self.assertEqual(np.fromfile(out, dtype="<f4").size, 4 * 512)
            with contextlib.redirect_stderr(io.StringIO()) as err:
                code = reference.main([path, "--prompt-ids", "1,2", "--kda-chunk", "0"])
            self.assertEqual(code, 1)
            self.assertIn("--kda-chunk 0: the chunk size must be >= 1", err.getvalue())


def random_kda_inputs(steps, heads=3, d=8, decay_scale=16.0, seed=0):
    """Inputs in the recurrence's domain with the real gate formula; decay_scale plays exp(A_log)."""
    gen = torch.Generator().manual_seed(seed)
    q = kda.l2_normalise(torch.randn(steps, heads, d, generator=gen, dtype=torch.float64)) * d ** -0.5
    k = kda.l2_normalise(torch.randn(steps, heads, d, generator=gen, dtype=torch.float64))
    v = torch.randn(steps, heads, d, generator=gen, dtype=torch.float64)
    z = torch.randn(steps, heads, d, generator=gen, dtype=torch.float64)
    g = -decay_scale * torch.nn.functional.softplus(z)
    beta = torch.sigmoid(torch.randn(steps, heads, generator=gen, dtype=torch.float64))
    state = torch.randn(heads, d, d, generator=gen, dtype=torch.float64)
    return q, k, v, g, beta, state


class KdaFormsTest(unittest.TestCase):
    def test_chunked_equals_recurrent_with_a_carried_state(self):
        q, k, v, g, beta, state = random_kda_inputs(70, decay_scale=1.0)
        want, want_state = kda.recurrent(q, k, v, g, beta, state)
        self.assertGreater(float(want_state.abs().max()), 0.1)
        for chunk in (1, 4, 16, 64):
            with self.subTest(chunk=chunk):
                got, got_state = kda.chunked(q, k, v, g, beta, state, chunk)
                torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
                torch.testing.assert_close(got_state, want_state, rtol=0, atol=1e-10)

    def test_strong_decay_stays_finite(self):
        # exp(A_log) = 16 and softplus ~ 3: Γ reaches about -3000 within a chunk of 64, where
        # exp(Γ_r)·exp(−Γ_s) would overflow; differences of cumulative sums do not.
        q, k, v, g, beta, state = random_kda_inputs(70, decay_scale=16.0, seed=2)
        g = g - 16 * 3
        want, _ = kda.recurrent(q, k, v, g, beta, state)
        got, _ = kda.chunked(q, k, v, g, beta, state, 64)
        self.assertLess(float(torch.cumsum(g[:64], 0).min()), -2000)
        self.assertTrue(torch.isfinite(got).all())
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)

    def test_the_mixer_in_two_calls_carries_conv_and_recurrent_state(self):
        # The tiny model's layer-0 KDA weights in f64 over 70 tokens: one recurrent call is the
        # oracle; the chunked form runs 29 + 41 tokens, so the second call starts from a non-zero
        # state and three carried conv inputs.
        with helpers.scratch() as d:
            config, weights = reference.load_weights(helpers.make_checkpoint(os.path.join(d, "kl"), "kimi_linear"))
        c = families.resolve(config)
        w = {n: torch.as_tensor(v).double() for n, v in weights.items()}
        x = torch.randn(70, 128, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
        oracle_cache = {}
        want = kda.Kda(c, w)(0, x, None, oracle_cache)
        for chunk in (1, 4, 16, 64):
            with self.subTest(chunk=chunk):
                mixer, cache = kda.Kda(c, w, chunk), {}
                first = mixer(0, x[:29], None, cache)
                self.assertGreater(float(cache["state"].abs().max()), 0.01)
                k_inputs = x[26:29] @ w["model.layers.0.self_attn.k_proj.weight"].T
                torch.testing.assert_close(cache["conv"]["k"], k_inputs, rtol=0, atol=1e-12)
                got = torch.cat([first, mixer(0, x[29:], None, cache)])
                torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
                torch.testing.assert_close(cache["state"], oracle_cache["state"], rtol=0, atol=1e-10)

    def test_decay_first_then_read_with_the_updated_state(self):
        # One head, d = 1, from state s0: s = e^g s0; s += k β (v − k s); o = q s.
        q, k, v, g, beta, s0 = 0.5, 1.0, 2.0, -0.7, 0.25, 3.0
        s = np.exp(g) * s0
        s += k * beta * (v - k * s)
        out, state = kda.recurrent(*(torch.tensor(x, dtype=torch.float64).reshape(shape) for x, shape in
                                     ((q, (1, 1, 1)), (k, (1, 1, 1)), (v, (1, 1, 1)), (g, (1, 1, 1)),
                                      (beta, (1, 1)), (s0, (1, 1, 1)))))
        self.assertAlmostEqual(float(state), s, places=14)
        self.assertAlmostEqual(float(out), q * s, places=14)

    def test_l2_norm_puts_the_epsilon_inside_the_square_root(self):
        x = torch.tensor([[3e-4, 4e-4]], dtype=torch.float64)  # ‖x‖² = 2.5e-7, comparable to 1e-6
        self.assertAlmostEqual(float(kda.l2_normalise(x)[0, 0]), 3e-4 / np.sqrt(2.5e-7 + 1e-6), places=15)

    def test_short_conv_taps_the_current_token_last(self):
        weight = torch.tensor([[[1.0, 10.0, 100.0, 1000.0]]])
        out, carried = kda.short_conv(torch.tensor([[1.0], [2.0]]), weight, torch.tensor([[5.0], [6.0], [7.0]]))
        self.assertEqual(out.ravel().tolist(), [5 + 60 + 700 + 1000, 6 + 70 + 100 + 2000])
        self.assertEqual(carried.ravel().tolist(), [7.0, 1.0, 2.0])


class RoutingTest(unittest.TestCase):
    def test_biased_weights_are_the_renormalised_biased_scores(self):
        logits = torch.tensor([[0.3, -1.0, 2.0, 0.1]])
        bias = torch.tensor([0.5, 0.0, -0.2, 0.05])
        s = torch.sigmoid(logits)[0]
        for biased, source in ((True, s + bias), (False, s)):
            ids, weights = routing.route_sigmoid_grouped(logits, bias, 2, 1, 1, True, 2.446,
                                                         biased_weights=biased)
            self.assertEqual(ids.tolist(), [[0, 2]])  # selection by s + bias (1.07, 0.68) in either case
            want = source[[0, 2]] / (source[0] + source[2] + 1e-20) * 2.446
            torch.testing.assert_close(weights[0], want, rtol=0, atol=1e-7)

    def test_single_expert_is_not_renormalised(self):
        config = tiny(num_experts_per_token=1)
        c = families.resolve(config)
        shapes = families.tensor_shapes(c)
        gen = torch.Generator().manual_seed(0)
        weights = {n: torch.randn(*s, generator=gen) * 0.1 for n, s in shapes.items()}
        model = models.MoeModel(config, weights, moe_weights="unbiased")
        b = torch.randn(3, 128, generator=gen)
        ids, w = model._route(1, b)
        s = torch.sigmoid(b @ weights["model.layers.1.block_sparse_moe.gate.weight"].T)
        torch.testing.assert_close(w[:, 0], s.gather(1, ids)[:, 0] * 2.446)


class ConfigTest(unittest.TestCase):
    def test_missing_keys_take_the_kimi_linear_class_defaults(self):
        for key, want in CLASS_DEFAULTS.items():
            with self.subTest(key=key):
                config = tiny()
                config.pop(key, None)
                self.assertEqual(families.resolve(config)[key], want)
        # num_hidden_layers defaults to 32, which the 4-layer linear_attn_config cannot cover.
        config = tiny()
        del config["num_hidden_layers"]
        with self.assertRaisesRegex(SluiceError, "layer 5 \\(1-based\\) must be in exactly one"):
            families.resolve(config)
        table = families.CLASS_DEFAULTS["kimi_linear"]
        self.assertEqual((table["num_experts"], table["kv_lora_rank"], table["mla_use_nope"]), (None, None, False))

    def test_layer_map_is_one_based(self):
        c = families.resolve(tiny())
        self.assertEqual([families.is_kda_layer(c, i) for i in range(4)], [True, True, False, True])
        self.assertEqual([families.is_moe_layer(c, i) for i in range(4)], [False, True, True, True])
        real = {"kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
                "full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "num_heads": 32, "head_dim": 128,
                "short_conv_kernel_size": 4}
        c = families.resolve(tiny(num_hidden_layers=27, linear_attn_config=real))
        self.assertEqual([i for i in range(27) if not families.is_kda_layer(c, i)], [3, 7, 11, 15, 19, 23, 26])

    def test_variant_keys_of_later_releases_are_refused_by_name(self):
        linear = tiny()["linear_attn_config"]
        cases = [({"routed_expert_hidden_size": 512}, "routed_expert_hidden_size 512"),
                 ({"latent_moe_use_norm": True}, "latent_moe_use_norm True"),
                 ({"attn_res_block_size": 4}, "attn_res_block_size 4"),
                 ({"mla_use_output_gate": True}, "mla_use_output_gate True"),
                 ({"text_config": {"hidden_size": 128}}, "text_config"),
                 ({"hidden_act": "situ"}, "hidden_act 'situ'"),
                 ({"q_lora_rank": 64}, "q_lora_rank 64"),
                 ({"linear_attn_config": dict(linear, use_full_rank_gate=True)},
                  "linear_attn_config.use_full_rank_gate True"),
                 ({"linear_attn_config": dict(linear, gate_lower_bound=-5.0)},
                  "linear_attn_config.gate_lower_bound -5.0")]
        for change, message in cases:
            with self.subTest(change=list(change)):
                with self.assertRaisesRegex(SluiceError, message.replace(".", "\\.").replace("(", "\\(")):
                    families.resolve(tiny(**change))
        # Their defaults (null / false) are not variants.
        families.resolve(tiny(mla_use_output_gate=False, attn_res_block_size=None, latent_moe_use_norm=False,
                              linear_attn_config=dict(linear, use_full_rank_gate=False, gate_lower_bound=None)))

    def test_other_unsupported_settings_are_refused_by_name(self):
        for change, message in (({"mla_use_nope": False}, "mla_use_nope False"),
                                ({"moe_router_activation_func": "softmax"}, "moe_router_activation_func 'softmax'"),
                                ({"num_experts_per_token": 9}, "num_experts_per_token 9 exceeds the 8 experts"),
                                ({"num_expert_group": 3}, "num_experts 8 must split into num_expert_group 3"),
                                ({"num_experts": None}, "num_experts is null"),
                                ({"linear_attn_config": {"kda_layers": [1, 2, 4], "full_attn_layers": [3, 4],
                                                         "num_heads": 4, "head_dim": 32,
                                                         "short_conv_kernel_size": 4}},
                                 "layer 4 \\(1-based\\) must be in exactly one")):
            with self.subTest(change=list(change)):
                with self.assertRaisesRegex(SluiceError, message):
                    families.resolve(tiny(**change))


if __name__ == "__main__":
    unittest.main()
