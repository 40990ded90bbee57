# tests/scripts/test_families.py: sluicepy.families reads a config the way the
# family's Hugging Face config class does: each missing key takes the class
# default (written out below from the transformers / released remote-code
# classes), nulls and aliases behave as there, and keys that would change the
# math and are not implemented are refused by name.
import copy
import json
import os
import unittest

import helpers  # noqa: F401  (makes scripts/ importable)
from sluicepy import SluiceError, families, fp8

_DEEPSEEK = {
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "norm_topk_prob": True, "topk_method": "noaux_tc",
    "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "rope_theta": 10000.0, "rope_interleave": True, "attention_bias": False,
    "num_nextn_predict_layers": 1, "bos_token_id": 0, "eos_token_id": 1,
}
# Value after resolve() when the key is absent from the family's tiny config.
EXPECTED = {
    "olmoe": {"vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048, "num_hidden_layers": 16,
              "num_attention_heads": 16, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "clip_qkv": None, "num_experts_per_tok": 8,
              "num_experts": 64, "norm_topk_prob": False, "tie_word_embeddings": False,
              "eos_token_id": 50279, "pad_token_id": 1, "bos_token_id": None},
    "qwen3_moe": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
                  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 32,
                  "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                  "use_sliding_window": False, "sliding_window": None, "decoder_sparse_step": 1,
                  "moe_intermediate_size": 768, "num_experts_per_tok": 8, "num_experts": 128,
                  "norm_topk_prob": False, "mlp_only_layers": [], "tie_word_embeddings": False},
    "deepseek_v3": _DEEPSEEK,
    "kimi_k2": _DEEPSEEK,
    "mixtral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "head_dim": 32, "max_position_embeddings": 131072,
                "rms_norm_eps": 1e-5, "rope_theta": 1e6, "sliding_window": None, "num_experts_per_tok": 2,
                "num_local_experts": 8, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False},
}


# K2's tiny single group cannot take DeepSeek's 8 groups / 4 kept: give it a base that can.
BASE = {"kimi_k2": {"n_routed_experts": 32, "n_group": 8, "topk_group": 4}}


def tiny(family, **changes):
    config = families.tiny_config(family)
    config.update(changes)
    return config


class DefaultsTest(unittest.TestCase):
    def test_each_missing_key_takes_the_class_default(self):
        for family, expected in EXPECTED.items():
            for key, want in expected.items():
                with self.subTest(family=family, key=key):
                    config = tiny(family, **BASE.get(family, {}))
                    config.pop(key, None)
                    self.assertEqual(families.resolve(config)[key], want)

    def test_missing_kv_heads_differs_by_family(self):
        # OLMoE's class default is None (= the head count); Qwen3's is 4, Mixtral's 8, DeepSeek's 128.
        for family, heads, want in (("olmoe", 8, 8), ("qwen3_moe", 8, 4), ("mixtral", 32, 8), ("deepseek_v3", 4, 128)):
            with self.subTest(family=family):
                config = tiny(family, num_attention_heads=heads if family != "deepseek_v3" else 128)
                config.pop("num_key_value_heads")
                self.assertEqual(families.resolve(config)["num_key_value_heads"], want)

    def test_nulls_that_the_classes_replace_and_the_others(self):
        for family in families.FAMILIES:
            with self.subTest(family=family):
                self.assertEqual(families.resolve(tiny(family, num_key_value_heads=None))["num_key_value_heads"], 4)
                with self.assertRaisesRegex(SluiceError, "rms_norm_eps is null"):
                    families.resolve(tiny(family, rms_norm_eps=None))
        self.assertEqual(families.resolve(tiny("qwen3_moe", head_dim=None))["head_dim"], 32)
        self.assertEqual(families.resolve(tiny("mixtral", head_dim=None))["head_dim"], 32)
        self.assertEqual(families.resolve(tiny("qwen3_moe", mlp_only_layers=None))["mlp_only_layers"], [])
        self.assertIsNone(families.resolve(tiny("deepseek_v3", q_lora_rank=None))["q_lora_rank"])
        # Qwen3 ignores its window unless use_sliding_window.
        self.assertIsNone(families.resolve(tiny("qwen3_moe", sliding_window=64))["sliding_window"])

    def test_aliases_set_the_canonical_key(self):
        config = tiny("mixtral", num_experts=6)
        del config["num_local_experts"]
        self.assertEqual(families.resolve(config)["num_local_experts"], 6)
        config = tiny("deepseek_v3", num_local_experts=16)
        del config["n_routed_experts"]
        self.assertEqual(families.num_experts(families.resolve(config)), 16)
        with self.assertRaisesRegex(SluiceError, "num_experts 6 and num_local_experts 4 disagree"):
            families.resolve(tiny("mixtral", num_experts=6))

    def test_rope_parameters_dict_equals_rope_theta_and_rope_scaling(self):
        old = families.resolve(tiny("deepseek_v3"))
        config = tiny("deepseek_v3", rope_parameters=dict(tiny("deepseek_v3")["rope_scaling"], rope_type="yarn",
                                                          rope_theta=10000.0))
        del config["rope_theta"], config["rope_scaling"]
        new = families.resolve(config)
        self.assertEqual((new["rope_theta"], new["rope_scaling"]), (old["rope_theta"], old["rope_scaling"]))
        self.assertEqual(old["rope_scaling"]["factor"], 40.0)
        plain = families.resolve(tiny("mixtral", rope_parameters={"rope_type": "default", "rope_theta": 5e5}))
        self.assertEqual((plain["rope_theta"], plain["rope_scaling"]), (5e5, None))
        no_original = copy.deepcopy(tiny("kimi_k2"))
        del no_original["rope_scaling"]["original_max_position_embeddings"]
        self.assertEqual(families.resolve(no_original)["rope_scaling"]["original_max_position_embeddings"], 2048)


class RefusalTest(unittest.TestCase):
    def refused(self, message, family, **changes):
        with self.assertRaisesRegex(SluiceError, message):
            families.resolve(tiny(family, **changes))

    def test_unimplemented_keys_are_refused_by_name(self):
        for family in families.FAMILIES:
            with self.subTest(family=family):
                self.refused("attention_bias true", family, attention_bias=True)
                self.refused("hidden_act 'gelu'", family, hidden_act="gelu")
                self.refused("partial_rotary_factor 0.5", family, partial_rotary_factor=0.5)
                self.refused("rope_scaling type 'linear'", family, rope_scaling={"type": "linear", "factor": 2.0})
        self.refused("use_sliding_window true", "qwen3_moe", use_sliding_window=True)
        self.refused("model_type 'llama'", "mixtral", model_type="llama")

    def test_inconsistent_deepseek_configs_are_refused_naming_the_key(self):
        self.refused("scoring_func 'softmax'", "deepseek_v3", scoring_func="softmax")
        self.refused("topk_method 'greedy'", "kimi_k2", topk_method="greedy")
        self.refused("n_routed_experts 16 must split into n_group 3", "deepseek_v3", n_group=3)
        self.refused("n_routed_experts 16 must split into n_group 16 groups of at least 2", "deepseek_v3", n_group=16)
        self.refused("topk_group 5 exceeds n_group 4", "deepseek_v3", topk_group=5)
        self.refused("num_experts_per_tok 5 exceeds the 4 experts of the topk_group", "deepseek_v3", topk_group=1,
                     num_experts_per_tok=5)
        self.refused("kv_lora_rank must be a positive integer", "deepseek_v3", kv_lora_rank=0)
        self.refused("qk_rope_head_dim 15 must be even", "deepseek_v3", qk_rope_head_dim=15)
        self.refused("num_experts_per_tok 13 exceeds the 12 experts", "kimi_k2", num_experts_per_tok=13)
        self.refused("num_attention_heads 4 is not a multiple of num_key_value_heads 3", "mixtral",
                     num_key_value_heads=3)


class LayoutTest(unittest.TestCase):
    def test_layer_types(self):
        c = families.resolve(tiny("deepseek_v3", num_hidden_layers=6, first_k_dense_replace=2, moe_layer_freq=2))
        self.assertEqual([families.is_moe_layer(c, i) for i in range(6)], [False, False, True, False, True, False])
        c = families.resolve(tiny("mixtral"))
        self.assertEqual(families.expert_names(c, 1, 3), ("model.layers.1.block_sparse_moe.experts.3.w1.weight",
                                                          "model.layers.1.block_sparse_moe.experts.3.w3.weight",
                                                          "model.layers.1.block_sparse_moe.experts.3.w2.weight"))

    def test_real_sizes_give_the_shapes_and_scales_of_section_3_2(self):
        # DeepSeek-V3's dims are the class defaults; K2 changes experts, heads, dense layers, groups.
        k2 = {"n_routed_experts": 384, "num_attention_heads": 64, "num_key_value_heads": 64,
              "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}
        for name, changes, heads, experts, dense in (("DeepSeek-V3", {}, 128, 256, 3), ("Kimi K2", k2, 64, 384, 1)):
            with self.subTest(model=name):
                config = dict({"model_type": "deepseek_v3" if not changes else "kimi_k2"}, **changes)
                shapes = families.tensor_shapes(config)
                p = f"model.layers.{dense}."
                want = {"self_attn.q_a_proj.weight": ([1536, 7168], [12, 56]),
                        "self_attn.q_b_proj.weight": ([heads * 192, 1536], [heads * 192 // 128, 12]),
                        "self_attn.kv_a_proj_with_mqa.weight": ([576, 7168], [5, 56]),
                        "self_attn.kv_b_proj.weight": ([heads * 256, 512], [heads * 2, 4]),
                        "self_attn.o_proj.weight": ([7168, heads * 128], [56, heads]),
                        "mlp.gate.weight": ([experts, 7168], None),
                        "mlp.experts.0.gate_proj.weight": ([2048, 7168], [16, 56]),
                        "mlp.experts.0.down_proj.weight": ([7168, 2048], [56, 16]),
                        "mlp.shared_experts.up_proj.weight": ([2048, 7168], [16, 56])}
                for n, (shape, scale) in want.items():
                    self.assertEqual(shapes[p + n], shape, n)
                    if scale is not None:
                        self.assertEqual(fp8.scale_shape(shape), scale, n)
                self.assertEqual(shapes["model.layers.0.mlp.gate_proj.weight"], [18432, 7168])
                self.assertEqual(fp8.scale_shape([18432, 7168]), [144, 56])
                self.assertEqual(shapes[p + "mlp.gate.e_score_correction_bias"], [experts])
                c = families.resolve(config)
                self.assertEqual(sum(families.is_moe_layer(c, i) for i in range(61)), 61 - dense)
                self.assertNotIn("model.layers.61.enorm.weight", shapes)
                self.assertIn("model.layers.61.enorm.weight", families.mtp_tensor_shapes(config))

    def test_mixtral_real_sizes_of_section_5(self):
        shapes = families.tensor_shapes({"model_type": "mixtral"})  # the class defaults are Mixtral-8x7B
        self.assertEqual(shapes["model.layers.31.self_attn.k_proj.weight"], [1024, 4096])
        self.assertEqual(shapes["model.layers.31.block_sparse_moe.gate.weight"], [8, 4096])
        self.assertEqual(shapes["model.layers.31.block_sparse_moe.experts.7.w2.weight"], [4096, 14336])
        self.assertEqual(shapes["lm_head.weight"], [32000, 4096])

    def test_fp8_tensor_rule(self):
        yes = ["model.layers.1.self_attn.q_a_proj.weight", "model.layers.1.self_attn.kv_b_proj.weight",
               "model.layers.0.mlp.down_proj.weight", "model.layers.2.mlp.shared_experts.up_proj.weight",
               "model.layers.2.mlp.experts.7.gate_proj.weight", "model.layers.1.self_attn.o_proj.weight"]
        no = ["model.embed_tokens.weight", "lm_head.weight", "model.layers.1.mlp.gate.weight",
              "model.layers.1.mlp.gate.e_score_correction_bias", "model.layers.1.self_attn.kv_a_layernorm.weight",
              "model.norm.weight"]
        self.assertEqual([families.is_fp8_tensor(n) for n in yes + no], [True] * len(yes) + [False] * len(no))


class CommandLineTest(unittest.TestCase):
    def test_resolve_and_defaults_print_json(self):
        with helpers.scratch() as d:
            path = os.path.join(d, "config.json")
            with open(path, "w") as f:
                json.dump({"model_type": "qwen3_moe", "num_key_value_heads": None}, f)
            out = json.loads(helpers.run_script(None, "-m", "sluicepy.families", "resolve", path).stdout)
            self.assertEqual((out["num_key_value_heads"], out["norm_topk_prob"], out["head_dim"]), (32, False, 64))
            with open(path, "w") as f:
                json.dump({"model_type": "deepseek_v3", "scoring_func": "softmax"}, f)
            result = helpers.run_script(None, "-m", "sluicepy.families", "resolve", path, check=False)
            self.assertEqual(result.returncode, 1)
            self.assertIn("scoring_func 'softmax'", result.stderr)
        table = json.loads(helpers.run_script(None, "-m", "sluicepy.families", "defaults").stdout)
        self.assertEqual(table["defaults"]["olmoe"]["rms_norm_eps"], 1e-5)
        self.assertEqual(table["aliases"]["mixtral"], {"num_experts": "num_local_experts"})


if __name__ == "__main__":
    unittest.main()
