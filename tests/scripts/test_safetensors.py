# tests/scripts/test_safetensors.py: sluicepy.safetensors round trips for every
# dtype, single and sharded, and its refusal of headers that lie about the data.
import json
import os
import struct
import unittest

import numpy as np
import torch

import helpers
from sluicepy import SluiceError, safetensors


def sample_tensors():
    rng = np.random.default_rng(7)
    return {"a.weight": rng.standard_normal((5, 7)).astype(np.float32) * 3,
            "b.bias": rng.standard_normal(9).astype(np.float32),
            "c.weight": rng.standard_normal((4, 3, 2)).astype(np.float32),
            "d.weight": np.array([[1.0, -2.5], [65504.0, 1e-8]], dtype=np.float32)}


def stored(array, dtype):
    """What a dtype can hold of `array`, computed by torch as the oracle."""
    t = torch.from_numpy(array)
    torch_dtype = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
    return t.to(torch_dtype).to(torch.float32).numpy()


class SafetensorsTest(unittest.TestCase):
    def test_bf16_rounding_matches_torch(self):
        rng = np.random.default_rng(1)
        x = np.concatenate([rng.standard_normal(10000).astype(np.float32) * 10,
                            np.array([0.0, -0.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, np.inf, -np.inf], np.float32)])
        ours = safetensors.bf16_bits_to_f32(safetensors.f32_to_bf16_bits(x))
        np.testing.assert_array_equal(ours, stored(x, "BF16"))
        self.assertTrue(np.isnan(safetensors.bf16_bits_to_f32(safetensors.f32_to_bf16_bits(np.float32([np.nan])))[0]))

    def test_round_trip_each_dtype_single_file(self):
        tensors = sample_tensors()
        for dtype in ("F32", "F16", "BF16"):
            with self.subTest(dtype=dtype), helpers.scratch() as d:
                path = os.path.join(d, "x.safetensors")
                safetensors.save_file(path, tensors, dtype, {"format": "pt"})
                header, metadata, start = safetensors.read_header(path)
                self.assertEqual(metadata, {"format": "pt"})
                self.assertEqual(start % 8, 0)
                self.assertEqual(list(header), list(tensors))
                loaded = safetensors.load_file(path)
                for name, array in tensors.items():
                    self.assertEqual(header[name]["dtype"], dtype)
                    self.assertEqual(loaded[name].shape, array.shape)
                    np.testing.assert_array_equal(loaded[name], stored(array, dtype))

    def test_round_trip_sharded_with_index(self):
        tensors = sample_tensors()
        for dtype in ("F32", "F16", "BF16"):
            with self.subTest(dtype=dtype), helpers.scratch() as d:
                safetensors.save_checkpoint(d, tensors, dtype, shards=3)
                with open(os.path.join(d, safetensors.INDEX_NAME)) as f:
                    index = json.load(f)
                files = sorted(set(index["weight_map"].values()))
                self.assertEqual(files, [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)])
                self.assertEqual(set(index["weight_map"]), set(tensors))
                item = 4 if dtype == "F32" else 2
                self.assertEqual(index["metadata"]["total_size"], item * sum(a.size for a in tensors.values()))
                self.assertFalse(os.path.exists(os.path.join(d, "model.safetensors")))
                loaded = safetensors.load_checkpoint(d)
                for name, array in tensors.items():
                    np.testing.assert_array_equal(loaded[name], stored(array, dtype))

    def test_mixed_dtypes_in_one_file(self):
        tensors = sample_tensors()
        kinds = {"a.weight": "BF16", "b.bias": "F32", "c.weight": "F16", "d.weight": "F32"}
        with helpers.scratch() as d:
            safetensors.save_checkpoint(d, tensors, kinds)
            loaded = safetensors.load_checkpoint(d)
            for name, array in tensors.items():
                np.testing.assert_array_equal(loaded[name], stored(array, kinds[name]))

    def test_rejects_offsets_outside_the_file(self):
        with helpers.scratch() as d:
            path = os.path.join(d, "x.safetensors")
            safetensors.save_file(path, {"w": np.ones((4, 4), np.float32)}, "F32")
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
                data = f.read()
            header["w"]["data_offsets"] = [0, 128]
            text = json.dumps(header).encode()
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", len(text)) + text + data)
            with self.assertRaisesRegex(SluiceError, "tensor w data_offsets"):
                safetensors.load_file(path)

    def test_rejects_truncated_header_and_missing_shard(self):
        with helpers.scratch() as d:
            path = os.path.join(d, "x.safetensors")
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", 1000) + b"{}")
            with self.assertRaisesRegex(SluiceError, "header length 1000"):
                safetensors.read_header(path)
            safetensors.save_checkpoint(d, sample_tensors(), "BF16", shards=2)
            os.remove(os.path.join(d, safetensors.shard_name(1, 2)))
            with self.assertRaisesRegex(SluiceError, "missing file model-00002-of-00002"):
                safetensors.load_checkpoint(d)


if __name__ == "__main__":
    unittest.main()
