# tests/scripts/test_make_tiny_checkpoint.py: the tiny checkpoints hold exactly
# the tensors architectures.md §7.1/§7.2 lists (names and shapes written out here
# from the document), the configs verbatim, and weights that follow §7's rules.
import json
import os
import unittest

import numpy as np

import helpers
from sluicepy import safetensors

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

    def test_tied_embeddings_drop_lm_head(self):
        with helpers.scratch() as d:
            helpers.make_checkpoint(d, "olmoe", "--set", "tie_word_embeddings=true")
            self.assertNotIn("lm_head.weight", header_shapes(d))

    def test_bad_set_is_refused_with_the_flag_named(self):
        with helpers.scratch() as d:
            result = helpers.run_script("make_tiny_checkpoint.py", "olmoe", d, "--set", "hidden_size", check=False)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("--set 'hidden_size'", result.stderr)


if __name__ == "__main__":
    unittest.main()
