# tests/scripts/test_make_tiny_checkpoint.py: the tiny checkpoints hold exactly
# the tensors architectures.md §7.1-§7.4 and §7.6 list (names and shapes written
# out here from the document), the configs verbatim, weights that follow §7's
# rules, and the DeepSeek fp8 (§0.9) and MTP variants.
import json
import os
import unittest

import numpy as np

import helpers
from sluicepy import fp8, safetensors

# architectures.md §7.1: q/k/v/o [128,128], q_norm/k_norm [128], gate [8,128],
# experts gate/up [64,128], down [128,64]; vocab 512, 2 layers, 8 experts.
OLMOE_LAYER = {"input_layernorm.weight": [128], "post_attention_layernorm.weight": [128],
               "self_attn.q_proj.weight": [128, 128], "self_attn.k_proj.weight": [128, 128],
               "self_attn.v_proj.weight": [128, 128], "self_attn.o_proj.weight": [128, 128],
               "self_attn.q_norm.weight": [128], "self_attn.k_norm.weight": [128],
               "mlp.gate.weight": [8, 128]}
OLMOE_EXPERT = {"gate_proj.weight": [64, 128], "up_proj.weight": [64, 128], "down_proj.weight": [128, 64]}
# architectures.md §7.2: q_proj [256,128], k/v [128,128], o [128,256], q/k_norm [64],
# gate [8,128], experts [48,128] / [128,48]; 3 layers; dense variant [256,128]/[128,256].
QWEN_LAYER = {"input_layernorm.weight": [128], "post_attention_layernorm.weight": [128],
              "self_attn.q_proj.weight": [256, 128], "self_attn.k_proj.weight": [128, 128],
              "self_attn.v_proj.weight": [128, 128], "self_attn.o_proj.weight": [128, 256],
              "self_attn.q_norm.weight": [64], "self_attn.k_norm.weight": [64],
              "mlp.gate.weight": [8, 128]}
QWEN_EXPERT = {"gate_proj.weight": [48, 128], "up_proj.weight": [48, 128], "down_proj.weight": [128, 48]}
QWEN_DENSE = {"mlp.gate_proj.weight": [256, 128], "mlp.up_proj.weight": [256, 128],
              "mlp.down_proj.weight": [128, 256]}


# §7.3 (layer i >= 1; layer 0 dense [512,256]/[256,512]); §7.4 is the same with 12 experts.
MLA_ATTENTION = {"input_layernorm.weight": [256], "post_attention_layernorm.weight": [256],
                 "self_attn.q_a_proj.weight": [96, 256], "self_attn.q_a_layernorm.weight": [96],
                 "self_attn.q_b_proj.weight": [192, 96], "self_attn.kv_a_proj_with_mqa.weight": [80, 256],
                 "self_attn.kv_a_layernorm.weight": [64], "self_attn.kv_b_proj.weight": [256, 64],
                 "self_attn.o_proj.weight": [256, 128]}
MLA_MOE = {"mlp.gate.weight": None, "mlp.gate.e_score_correction_bias": None,
           "mlp.shared_experts.gate_proj.weight": [64, 256], "mlp.shared_experts.up_proj.weight": [64, 256],
           "mlp.shared_experts.down_proj.weight": [256, 64]}
MLA_EXPERT = {"gate_proj.weight": [64, 256], "up_proj.weight": [64, 256], "down_proj.weight": [256, 64]}
MLA_DENSE = {"mlp.gate_proj.weight": [512, 256], "mlp.up_proj.weight": [512, 256], "mlp.down_proj.weight": [256, 512]}
# §7.6: q [128,128], k/v [64,128], o [128,128], router [4,128], w1/w3 [96,128], w2 [128,96]; no q/k norm.
MIXTRAL_LAYER = {"input_layernorm.weight": [128], "post_attention_layernorm.weight": [128],
                 "self_attn.q_proj.weight": [128, 128], "self_attn.k_proj.weight": [64, 128],
                 "self_attn.v_proj.weight": [64, 128], "self_attn.o_proj.weight": [128, 128],
                 "block_sparse_moe.gate.weight": [4, 128]}
MIXTRAL_EXPERT = {"w1.weight": [96, 128], "w3.weight": [96, 128], "w2.weight": [128, 96]}


def expected_mla(experts, layers=range(4), prefix="model.layers"):
    names = {}
    for i in layers:
        p = f"{prefix}.{i}."
        names.update({p + n: s for n, s in MLA_ATTENTION.items()})
        if i == 0:
            names.update({p + n: s for n, s in MLA_DENSE.items()})
            continue
        names.update({p + n: s for n, s in MLA_MOE.items()})
        names[p + "mlp.gate.weight"], names[p + "mlp.gate.e_score_correction_bias"] = [experts, 256], [experts]
        for e in range(experts):
            names.update({f"{p}mlp.experts.{e}.{n}": s for n, s in MLA_EXPERT.items()})
    return names


def expected(layers, layer, expert, experts=8, dense_layers=()):
    names = {"model.embed_tokens.weight": [512, 128], "model.norm.weight": [128], "lm_head.weight": [512, 128]}
    for i in range(layers):
        for n, s in layer.items():
            if i in dense_layers and n == "mlp.gate.weight":
                continue
            names[f"model.layers.{i}.{n}"] = s
        if i in dense_layers:
            names.update({f"model.layers.{i}.{n}": s for n, s in QWEN_DENSE.items()})
            continue
        for e in range(experts):
            names.update({f"model.layers.{i}.mlp.experts.{e}.{n}": s for n, s in expert.items()})
    return names


def header_shapes(directory):
    shapes = {}
    for name, file in safetensors.checkpoint_files(directory).items():
        shapes[name] = safetensors.read_header(file)[0][name]["shape"]
    return shapes


class TinyCheckpointTest(unittest.TestCase):
    def test_olmoe_names_shapes_and_config(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "olmoe")
            self.assertEqual(header_shapes(d), expected(2, OLMOE_LAYER, OLMOE_EXPERT))
            with open(os.path.join(d, "config.json")) as f:
                config = json.load(f)
            self.assertEqual(config["architectures"], ["OlmoeForCausalLM"])
            self.assertEqual((config["intermediate_size"], config["num_experts_per_tok"], config["norm_topk_prob"]),
                             (64, 4, False))
            self.assertEqual((config["eos_token_id"], config["pad_token_id"], config["torch_dtype"]), (2, 1, "bfloat16"))
            header = safetensors.read_header(os.path.join(d, "model.safetensors"))[0]
            self.assertEqual({v["dtype"] for v in header.values()}, {"BF16"})

    def test_olmoe_kv_heads_variant_shapes_k_norm(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "olmoe", "--set", "num_key_value_heads=2")
            shapes = header_shapes(d)
            self.assertEqual(shapes["model.layers.1.self_attn.k_proj.weight"], [64, 128])
            self.assertEqual(shapes["model.layers.1.self_attn.k_norm.weight"], [64])
            self.assertEqual(shapes["model.layers.1.self_attn.q_norm.weight"], [128])

    def test_qwen3_sharded_names_shapes_and_dtype(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "qwen3_moe", "--shards", "3", "--dtype", "f16")
            self.assertEqual(header_shapes(d), expected(3, QWEN_LAYER, QWEN_EXPERT))
            self.assertEqual(len(set(safetensors.checkpoint_files(d).values())), 3)
            with open(os.path.join(d, "config.json")) as f:
                config = json.load(f)
            self.assertEqual(config["torch_dtype"], "float16")
            self.assertEqual((config["head_dim"], config["moe_intermediate_size"], config["mlp_only_layers"]),
                             (64, 48, []))

    def test_qwen3_dense_layer_variant(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "qwen3_moe", "--set", "mlp_only_layers=[1]")
            self.assertEqual(header_shapes(d), expected(3, QWEN_LAYER, QWEN_EXPERT, dense_layers=(1,)))

    def test_weights_follow_the_init_rules_and_the_seed(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(os.path.join(d, "a"), "qwen3_moe", "--dtype", "f32", "--seed", "3",
                                    "--set", "num_experts=32", "--set", "hidden_size=256")
            helpers.make_checkpoint(os.path.join(d, "b"), "qwen3_moe", "--dtype", "f32", "--seed", "3",
                                    "--set", "num_experts=32", "--set", "hidden_size=256")
            helpers.make_checkpoint(os.path.join(d, "c"), "qwen3_moe", "--dtype", "f32", "--seed", "4",
                                    "--set", "num_experts=32", "--set", "hidden_size=256")
            a, b, c = (safetensors.load_checkpoint(os.path.join(d, x)) for x in "abc")
            for name in a:
                np.testing.assert_array_equal(a[name], b[name])
            self.assertFalse(np.array_equal(a["lm_head.weight"], c["lm_head.weight"]))
            experts = np.concatenate([a[f"model.layers.0.mlp.experts.{e}.down_proj.weight"].ravel() for e in range(32)])
            self.assertAlmostEqual(float(experts.std()), 0.02, delta=0.001)
            self.assertAlmostEqual(float(experts.mean()), 0.0, delta=0.001)
            router = a["model.layers.2.mlp.gate.weight"]
            self.assertEqual(router.shape, (32, 256))
            self.assertAlmostEqual(float(router.std()), 2 / 256 ** 0.5, delta=0.01)
            norms = np.concatenate([a[f"model.layers.{i}.{n}"] for i in range(3)
                                    for n in ("input_layernorm.weight", "post_attention_layernorm.weight")])
            self.assertAlmostEqual(float(norms.mean()), 1.0, delta=0.02)
            self.assertAlmostEqual(float(norms.std()), 0.1, delta=0.02)

    def test_deepseek_and_kimi_names_shapes_dtypes_and_config(self):
        for family, experts in (("deepseek_v3", 16), ("kimi_k2", 12)):
            with self.subTest(family=family), helpers.scratch() as d:
                helpers.make_checkpoint(d, family)
                want = {"model.embed_tokens.weight": [512, 256], "model.norm.weight": [256],
                        "lm_head.weight": [512, 256], **expected_mla(experts)}
                self.assertEqual(header_shapes(d), want)
                header = safetensors.read_header(os.path.join(d, "model.safetensors"))[0]
                f32 = {n for n, v in header.items() if v["dtype"] == "F32"}
                self.assertEqual(f32, {f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in (1, 2, 3)})
                self.assertEqual({v["dtype"] for n, v in header.items() if n not in f32}, {"BF16"})
                with open(os.path.join(d, "config.json")) as f:
                    config = json.load(f)
                self.assertEqual(config["architectures"], ["DeepseekV3ForCausalLM"])
                self.assertEqual(config["model_type"], family)
                self.assertEqual((config["n_group"], config["topk_group"], config["routed_scaling_factor"]),
                                 (4, 2, 2.5) if family == "deepseek_v3" else (1, 1, 2.827))
                self.assertNotIn("quantization_config", config)

    def test_mixtral_names_and_shapes(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "mixtral")
            want = expected(2, MIXTRAL_LAYER, {}, experts=0)
            for i in range(2):
                for e in range(4):
                    want.update({f"model.layers.{i}.block_sparse_moe.experts.{e}.{n}": s
                                 for n, s in MIXTRAL_EXPERT.items()})
            self.assertEqual(header_shapes(d), want)

    def test_deepseek_fp8_variant_scales_and_values(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(os.path.join(d, "src"), "deepseek_v3", "--dtype", "f32", "--seed", "2")
            helpers.make_checkpoint(os.path.join(d, "fp8"), "deepseek_v3", "--fp8", "--seed", "2")
            header = safetensors.read_header(os.path.join(d, "fp8", "model.safetensors"))[0]
            # §7: hidden 256 gives 2 column blocks; kv_a's 80 rows and q_b's 96 columns are partial blocks.
            scales = {"self_attn.q_a_proj.weight": [1, 2], "self_attn.q_b_proj.weight": [2, 1],
                      "self_attn.kv_a_proj_with_mqa.weight": [1, 2], "self_attn.kv_b_proj.weight": [2, 1],
                      "self_attn.o_proj.weight": [2, 1], "mlp.shared_experts.gate_proj.weight": [1, 2],
                      "mlp.shared_experts.down_proj.weight": [2, 1], "mlp.experts.5.up_proj.weight": [1, 2],
                      "mlp.experts.5.down_proj.weight": [2, 1]}
            for name, shape in scales.items():
                n = "model.layers.2." + name
                self.assertEqual((header[n]["dtype"], header[n + "_scale_inv"]["dtype"]), ("F8_E4M3", "F32"), n)
                self.assertEqual(header[n + "_scale_inv"]["shape"], shape, n)
            self.assertEqual(header["model.layers.0.mlp.gate_proj.weight_scale_inv"]["shape"], [4, 2])
            self.assertEqual(header["model.layers.0.mlp.down_proj.weight_scale_inv"]["shape"], [2, 4])
            for n in ("model.embed_tokens.weight", "lm_head.weight", "model.layers.1.mlp.gate.weight",
                      "model.layers.1.self_attn.kv_a_layernorm.weight", "model.norm.weight"):
                self.assertEqual(header[n]["dtype"], "BF16", n)
                self.assertNotIn(n + "_scale_inv", header)
            self.assertEqual(header["model.layers.1.mlp.gate.e_score_correction_bias"]["dtype"], "F32")
            fp8_count = sum(1 for v in header.values() if v["dtype"] == "F8_E4M3")
            self.assertEqual(fp8_count, 3 + 5 * 4 + 3 * 3 + 3 * 3 * 16)  # dense, attention, shared, routed
            with open(os.path.join(d, "fp8", "config.json")) as f:
                self.assertEqual(json.load(f)["quantization_config"],
                                 {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": [128, 128]})
            # The scale is the block's amax / 448 of the same random weight; values round within e4m3.
            src = safetensors.load_file(os.path.join(d, "src", "model.safetensors"))
            raw = safetensors.load_file(os.path.join(d, "fp8", "model.safetensors"))
            n = "model.layers.2.self_attn.kv_a_proj_with_mqa.weight"
            w = src[n]
            want = [[np.float32(np.abs(w[:, :128]).max() / 448), np.float32(np.abs(w[:, 128:]).max() / 448)]]
            np.testing.assert_array_equal(raw[n + "_scale_inv"], np.array(want, np.float32))
            loaded = safetensors.load_checkpoint(os.path.join(d, "fp8"))
            self.assertNotIn(n + "_scale_inv", loaded)
            bound = np.abs(w) * 2 ** -4 + fp8.expand_scales(raw[n + "_scale_inv"], w.shape) * 2 ** -10
            self.assertTrue(np.all(np.abs(loaded[n] - w) <= bound))
            self.assertGreater(float(np.abs(loaded[n] - w).max()), 0)

    def test_deepseek_mtp_variant_adds_layer_4_and_leaves_the_rest(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(os.path.join(d, "plain"), "deepseek_v3", "--dtype", "f32")
            helpers.make_checkpoint(os.path.join(d, "mtp"), "deepseek_v3", "--dtype", "f32",
                                    "--set", "num_nextn_predict_layers=1", "--shards", "2")
            plain, mtp = header_shapes(os.path.join(d, "plain")), header_shapes(os.path.join(d, "mtp"))
            extra = {n: s for n, s in mtp.items() if n not in plain}
            want = {n: s for n, s in expected_mla(16, layers=[4]).items()}
            want.update({"model.layers.4.embed_tokens.weight": [512, 256], "model.layers.4.enorm.weight": [256],
                         "model.layers.4.hnorm.weight": [256], "model.layers.4.eh_proj.weight": [256, 512],
                         "model.layers.4.shared_head.norm.weight": [256],
                         "model.layers.4.shared_head.head.weight": [512, 256]})
            self.assertEqual(extra, want)
            a = safetensors.load_checkpoint(os.path.join(d, "plain"))
            b = safetensors.load_checkpoint(os.path.join(d, "mtp"))
            for name in a:
                np.testing.assert_array_equal(a[name], b[name])

    def test_fp8_is_refused_for_families_without_it(self):
        with helpers.scratch() as d:
            result = helpers.run_script("make_tiny_checkpoint.py", "mixtral", d, "--fp8", check=False)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("--fp8: only deepseek_v3, kimi_k2", result.stderr)

    def test_deepseek_router_and_bias_follow_the_init_rules(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "deepseek_v3", "--dtype", "f32", "--set", "n_routed_experts=256",
                                    "--set", "num_hidden_layers=2")
            w = safetensors.load_checkpoint(d)
            self.assertAlmostEqual(float(w["model.layers.1.mlp.gate.weight"].std()), 2 / 16, delta=0.005)
            bias = w["model.layers.1.mlp.gate.e_score_correction_bias"]
            self.assertAlmostEqual(float(bias.std()), 0.05, delta=0.01)
            norms = w["model.layers.1.self_attn.kv_a_layernorm.weight"]
            self.assertAlmostEqual(float(norms.mean()), 1.0, delta=0.05)

    def test_tied_embeddings_drop_lm_head(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "olmoe", "--set", "tie_word_embeddings=true")
            self.assertNotIn("lm_head.weight", header_shapes(d))

    def test_variants_set_or_drop_their_keys_and_nothing_else(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "deepseek_v3", "--variant", "yarn_mscale_only")
            config = json.load(open(os.path.join(d, "config.json")))
            self.assertEqual(config["rope_scaling"], {"type": "yarn", "factor": 40.0,
                                                      "original_max_position_embeddings": 64, "beta_fast": 32,
                                                      "beta_slow": 1, "mscale": 0.707})
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "qwen3_moe", "--variant", "rope_theta_absent")
            config = json.load(open(os.path.join(d, "config.json")))
            self.assertNotIn("rope_theta", config)
            self.assertEqual(config["norm_topk_prob"], True)
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "kimi_linear", "--variant", "tie_word_embeddings")
            self.assertNotIn("lm_head.weight", header_shapes(d))

    def test_a_variant_another_family_lacks_is_refused_by_name(self):
        for family, variant in (("mixtral", "norm_topk_prob_false"), ("olmoe", "rope_interleave_false"),
                                ("kimi_k3", "rms_norm_eps_absent")):
            with helpers.scratch() as d, self.subTest(family=family):
                result = helpers.run_script("make_tiny_checkpoint.py", family, d, "--variant", variant, check=False)
                self.assertEqual(result.returncode, 1)
                self.assertIn("--variant", result.stderr)

    def test_bad_set_is_refused_with_the_flag_named(self):
        with helpers.scratch() as d:
            result = helpers.run_script("make_tiny_checkpoint.py", "olmoe", d, "--set", "hidden_size", check=False)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("--set 'hidden_size'", result.stderr)


if __name__ == "__main__":
    unittest.main()
