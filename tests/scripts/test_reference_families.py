# tests/scripts/test_reference_families.py: the reference on tiny DeepSeek-V3,
# Kimi K2 and Mixtral checkpoints: cached decode equals recomputation, the MTP
# layer is ignored, fp8 checkpoints dequantize, Mixtral's window boundary, and a
# container holding the original trunk (HF names, f32) reads like the checkpoint.
import contextlib
import io
import json
import os
import unittest

import numpy as np
import torch

import helpers  # noqa: I100  (first: makes scripts/ importable)
import container_writer
from sluicepy import container, families, mla, models
import make_tiny_checkpoint
import reference

PROMPT = [5, 17, 200, 3, 88, 41, 9, 300, 12, 77, 150, 6, 250, 33, 101, 64]


def run_main(main, *argv):
    """A script's main() in this process (the CLI path without a fresh interpreter):
    (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


class FamiliesReferenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = helpers.scratch()
        root = cls.tmp.name
        cls.dirs = {
            "deepseek_v3": helpers.make_checkpoint(os.path.join(root, "ds"), "deepseek_v3", "--dtype", "f32"),
            "kimi_k2": helpers.make_checkpoint(os.path.join(root, "k2"), "kimi_k2", "--seed", "4"),
            "mixtral": helpers.make_checkpoint(os.path.join(root, "mx"), "mixtral", "--seed", "5", "--shards", "2"),
        }

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def load(self, family, **options):
        return models.MoeModel(*reference.load_weights(self.dirs[family]), **options)

    def test_kv_cache_decode_equals_full_recompute(self):
        for family, form in (("deepseek_v3", mla.EXPANDED), ("deepseek_v3", mla.ABSORBED),
                             ("kimi_k2", mla.ABSORBED), ("mixtral", mla.EXPANDED)):
            with self.subTest(family=family, form=form):
                model = self.load(family, mla_form=form)
                cached, tokens = reference.generate(model, PROMPT, 8)
                recomputed, tokens2 = reference.generate(model, PROMPT, 8, use_cache=False)
                self.assertEqual(tokens, tokens2)
                self.assertEqual(cached.shape, (9, 512))
                torch.testing.assert_close(cached, recomputed, rtol=0, atol=1e-5)
                cache = model.new_cache()
                model.forward(PROMPT[:3], cache)
                model.forward(PROMPT[3:10], cache)
                torch.testing.assert_close(model.forward(PROMPT[10:], cache)[-1], cached[0], rtol=0, atol=1e-5)

    def test_mtp_layer_is_ignored_and_fp8_dequantizes(self):
        with helpers.scratch() as d:
            mtp = helpers.make_checkpoint(os.path.join(d, "mtp"), "deepseek_v3", "--dtype", "f32",
                                          "--set", "num_nextn_predict_layers=1")
            quantized = helpers.make_checkpoint(os.path.join(d, "fp8"), "deepseek_v3", "--fp8")
            base = reference.generate(self.load("deepseek_v3"), PROMPT, 0)[0]
            with_mtp = reference.generate(models.MoeModel(*reference.load_weights(mtp)), PROMPT, 0)[0]
            self.assertTrue(torch.equal(base, with_mtp))
            fp8 = reference.generate(models.MoeModel(*reference.load_weights(quantized)), PROMPT, 0)[0]
            diff = float((fp8 - base).abs().max())
            # e4m3 keeps ~3 significant bits: close to the f32 source, yet not equal to it.
            self.assertTrue(0 < diff < 0.25, diff)

    def test_mixtral_window_hides_keys_at_distance_window_or_more(self):
        config, weights = reference.load_weights(self.dirs["mixtral"])
        def row(window):
            return reference.generate(models.MoeModel(dict(config, sliding_window=window), weights), PROMPT, 0)[0]
        full = row(None)
        self.assertTrue(torch.equal(row(len(PROMPT)), full))  # every t - s < 16
        self.assertGreater(float((row(len(PROMPT) - 1) - full).abs().max()), 1e-6)

    def test_container_of_the_original_trunk_reads_like_the_checkpoint(self):
        for family, directory in self.dirs.items():
            with self.subTest(family=family), helpers.scratch() as d:
                config, weights = reference.load_weights(directory)
                path = container_writer.write_container(os.path.join(d, "m.sluice"), config, weights)
                c = container.Container(path)
                state = c.state_dict()
                self.assertEqual(set(state), set(families.tensor_shapes(config)))
                trunk_only = [n for n in c.trunk if ".experts." in n and ".shared_experts." not in n]
                self.assertEqual(trunk_only, [])
                for name in c.trunk:
                    np.testing.assert_array_equal(state[name], weights[name], err_msg=name)
                # The checkpoint's weights with the experts the records decode to: the same model.
                mixed = dict(weights, **{n: v for n, v in state.items() if n not in c.trunk})
                ours = reference.generate(models.MoeModel(c.config, state), PROMPT, 2)[0]
                theirs = reference.generate(models.MoeModel(config, mixed), PROMPT, 2)[0]
                self.assertTrue(torch.equal(ours, theirs))
                errors = reference.relative_errors({n: state[n] for n in state if n not in c.trunk}, weights)
                self.assertTrue(all(0 < g["max"] < 1 for g in errors.values()), errors)

    def test_cli_runs_a_container_both_mla_forms_and_compares(self):
        with helpers.scratch() as d:
            config, weights = reference.load_weights(self.dirs["kimi_k2"])
            path = container_writer.write_container(os.path.join(d, "k2.sluice"), config, weights)
            rows = {}
            for form in mla.FORMS:
                out = os.path.join(d, form + ".f32")
                # f32 experts: the int8 table codes would amplify the forms' rounding differences.
                code, _, _ = run_main(reference.main, path, "--prompt-ids", ",".join(map(str, PROMPT)), "-n", "3",
                                      "--mla", form, "--group-exclusion", "neg-inf", "--dump-logits", out,
                                      "--f32-experts")
                self.assertEqual(code, 0)
                rows[form] = np.fromfile(out, dtype="<f4").reshape(4, 512)
            self.assertLess(float(np.abs(rows[mla.EXPANDED] - rows[mla.ABSORBED]).max()), 1e-5)
            code, stdout, _ = run_main(reference.main, path, "--prompt-ids", "1,2,3", "-n", "2",
                                       "--compare", self.dirs["kimi_k2"])
            cost = json.loads(stdout)
            self.assertEqual(cost["rows"], 3)
            self.assertEqual(cost["relative_weight_error"]["trunk:kv_b_proj"]["max"], 0.0)
            self.assertGreater(cost["relative_weight_error"]["gate_proj"]["max"], 0.0)

    def test_routing_trace_lists_each_tokens_experts_within_the_kept_groups(self):
        with helpers.scratch() as d:
            out = os.path.join(d, "trace.jsonl")
            code, _, _ = run_main(reference.main, self.dirs["deepseek_v3"], "--prompt-ids",
                                       ",".join(map(str, PROMPT)), "-n", "4", "--trace-out", out)
            self.assertEqual(code, 0)
            with open(out) as f:
                rows = [json.loads(line) for line in f]
        self.assertEqual([r["tok"] for r in rows], list(range(len(PROMPT) + 4)))
        for row in rows:
            self.assertEqual(len(row["layers"]), 3)  # MoE layers 1, 2, 3
            for ids in row["layers"]:
                self.assertEqual(len(set(ids)), 4)
                self.assertLessEqual(len({e // 4 for e in ids}), 2)  # 4 groups of 4, topk_group 2

    def test_cli_refuses_a_bad_config_naming_the_key(self):
        with helpers.scratch() as d:
            bad = helpers.make_checkpoint(os.path.join(d, "ds"), "deepseek_v3")
            path = os.path.join(bad, "config.json")
            with open(path) as f:
                config = json.load(f)
            config["scoring_func"] = "softmax"
            with open(path, "w") as f:
                json.dump(config, f)
            code, _, stderr = run_main(reference.main, bad, "--prompt-ids", "1,2")
            self.assertEqual(code, 1)
            self.assertIn("scoring_func 'softmax' is not supported", stderr)
            code, _, stderr = run_main(make_tiny_checkpoint.main, "deepseek_v3", os.path.join(d, "g"),
                                       "--set", "n_group=3")
            self.assertEqual(code, 1)
            self.assertIn("n_routed_experts 16 must split into n_group 3", stderr)


if __name__ == "__main__":
    unittest.main()
