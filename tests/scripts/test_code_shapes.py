# tests/scripts/test_code_shapes.py: scripts/code-shape-study measures what
# it says: every shape costs 3.00 bits per weight, a shape whose codebooks
# can hold the data reconstructs it exactly, and a checkpoint is read per
# (layer, matrix) as the converter trains it, with bad input named.
import json
import os
import unittest

import numpy as np

import helpers
from sluicepy import code_shapes

SHAPES = {s.name: s for s in code_shapes.SHAPES}
EXACT = 1e-10  # relative: the study computes in f32


def rows_of(vectors, rows, per_row, rng):
    """Rows of `per_row` vectors drawn from `vectors`, each row also holding
    one 1.0 so that the study's row normalisation leaves it unchanged."""
    picks = vectors[rng.integers(len(vectors), size=(rows, per_row))].reshape(rows, -1)
    picks[:, 0] = 1.0
    return picks


class ShapesTest(unittest.TestCase):
    def test_every_shape_costs_three_bits_per_weight(self):
        for shape in code_shapes.SHAPES:
            self.assertEqual(shape.bits_per_weight, 3.0, shape.name)

    def test_eight_levels_reconstruct_eight_valued_weights(self):
        rng = np.random.default_rng(1)
        levels = np.array([-1.0, -0.6, -0.3, -0.1, 0.1, 0.3, 0.6, 1.0])
        matrix = rows_of(levels[:, None], 40, 64, rng)
        errors, energy = code_shapes.squared_errors([matrix], [SHAPES["scalar 8 levels"]], 4096, 4, 0)
        self.assertLess(errors["scalar 8 levels"] / energy, EXACT)

    def test_the_containers_shape_reconstructs_64_distinct_vectors(self):
        rng = np.random.default_rng(2)
        # 32 vectors and the same with a leading 1.0, which rows_of's first vector of a row takes.
        vectors = rng.uniform(-0.9, 0.9, size=(32, 4))
        vectors = np.concatenate([vectors, np.concatenate([np.ones((32, 1)), vectors[:, 1:]], axis=1)])
        matrix = rows_of(vectors, 30, 32, rng)
        self.assertEqual(code_shapes.CONTAINER, "rvq 4d 2x64")
        shapes = [SHAPES[code_shapes.CONTAINER]]
        errors, energy = code_shapes.squared_errors([matrix], shapes, 4096, 4, 0)
        self.assertLess(errors["rvq 4d 2x64"] / energy, EXACT)
        # 4000 random vectors: two stages of 64 entries no longer reconstruct them exactly.
        more = rows_of(rng.uniform(-0.9, 0.9, size=(4000, 4)), 30, 32, rng)
        errors, energy = code_shapes.squared_errors([more], shapes, 4096, 4, 0)
        self.assertGreater(errors["rvq 4d 2x64"] / energy, 1e-4)

    def test_format_2s_shape_reconstructs_200_distinct_vectors(self):
        rng = np.random.default_rng(3)
        vectors = rng.uniform(-0.9, 0.9, size=(200, 8))
        matrix = rows_of(vectors, 30, 32, rng)
        errors, energy = code_shapes.squared_errors([matrix], [SHAPES["rvq 8d 3x256"]], 4096, 4, 0)
        self.assertLess(errors["rvq 8d 3x256"] / energy, EXACT)
        # Nine levels do not fit eight: the scalar shape must show an error.
        nine = rows_of(np.linspace(-1, 1, 9)[:, None], 40, 64, rng)
        errors, energy = code_shapes.squared_errors([nine], [SHAPES["scalar 8 levels"]], 4096, 4, 0)
        self.assertGreater(errors["scalar 8 levels"] / energy, 1e-3)


class CheckpointTest(unittest.TestCase):
    def test_groups_are_the_experts_of_each_layer_and_matrix(self):
        with helpers.scratch() as d:
            checkpoint = helpers.make_checkpoint(os.path.join(d, "ckpt"), "olmoe")
            with open(os.path.join(checkpoint, "config.json")) as f:
                config = json.load(f)
            out = helpers.run_script("code-shape-study", "--checkpoint", checkpoint, "--no-synthetic",
                                     "--sample", "2048", "--iterations", "2", "--json")
            results = json.loads(out.stdout)["results"]
            expected = {f"layer {layer} {matrix}" for layer in range(config["num_hidden_layers"])
                        for matrix in ("gate_proj", "up_proj", "down_proj")}
            self.assertEqual({r["source"] for r in results}, expected)
            per_group = config["num_experts"] * config["intermediate_size"] * config["hidden_size"]
            for r in results:
                self.assertEqual(r["weights"], per_group, r["source"])
                self.assertEqual(r["against_container"]["rvq 4d 2x64"], 1.0)
                self.assertEqual(set(r["against_container"]), set(SHAPES))
                for value in r["relative_squared_error"].values():
                    self.assertTrue(0 < value < 1, r)

            missing = helpers.run_script("code-shape-study", "--checkpoint", checkpoint, "--layers", "7",
                                         "--no-synthetic", check=False)
            self.assertNotEqual(missing.returncode, 0)
            self.assertIn("no routed expert weights", missing.stderr)
            self.assertIn("[7]", missing.stderr)

    def test_a_directory_without_safetensors_is_named(self):
        with helpers.scratch() as d:
            out = helpers.run_script("code-shape-study", "--checkpoint", d, "--no-synthetic", check=False)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn(d, out.stderr)
            self.assertIn("model.safetensors", out.stderr)


if __name__ == "__main__":
    unittest.main()
