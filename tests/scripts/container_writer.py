# tests/scripts/container_writer.py: writes a small sluice container (proto/FORMAT.md)
# from HF-named weights, so the Python tests can read one before `sluice convert`
# handles a family: every trunk tensor in f32 under its HF name, routed experts as
# crude one-stage RVQ records. A test fixture, never a converter to compare against.
import json
import os
import struct
import zlib

import numpy as np

from sluicepy import container, families

EXPERT_QUANT = {"method": "rvq", "stages": container.STAGES, "entries": container.ENTRIES,
                "vec_dim": container.VEC_DIM, "index_bits": 6, "bits_per_weight": 3.0,
                "row_block": container.ROW_BLOCK, "index_layout": container.INDEX_LAYOUT,
                "scale": "f16_row_absmax", "codebook_sharing": "layer.matrix.stage"}
DIM, ENTRIES, STAGES = container.VEC_DIM, container.ENTRIES, container.STAGES


def _align(x, a):
    return (x + a - 1) // a * a


def _normalise(w):
    scale = np.abs(w).max(axis=1).astype(np.float16)
    safe = np.where(scale == 0, 1, scale).astype(np.float32)
    return (w / safe[:, None]).astype(np.float32), scale


def _encode(u, book):
    """Stage-0 nearest code per vector; the later stages use code 0 of an all-zero book."""
    vectors = u.reshape(-1, DIM)
    dist = (vectors ** 2).sum(1)[:, None] - 2 * vectors @ book.T + (book ** 2).sum(1)[None, :]
    idx = np.zeros((vectors.shape[0], STAGES), np.uint8)
    idx[:, 0] = np.argmin(dist, axis=1)
    return idx.reshape(u.shape[0], u.shape[1] // DIM, STAGES)


def write_container(path, config, weights, seed=0):
    c = families.resolve(config)
    os.makedirs(path)
    shapes = families.tensor_shapes(config)
    routed = set()
    layers, codebooks = [], []
    rng = np.random.default_rng(seed)
    for i in range(c["num_hidden_layers"]):
        if not families.is_moe_layer(c, i):
            continue
        names = [families.expert_names(c, i, e) for e in range(families.num_experts(c))]
        routed.update(n for triple in names for n in triple)
        hidden, width = c["hidden_size"], families.expert_width(c)
        layout = container.record_layout(hidden, width)
        base = len(codebooks)
        normalised = {}
        for k in range(3):
            pieces = [_normalise(np.asarray(weights[t[k]], np.float32)) for t in names]
            normalised[k] = pieces
            vectors = np.concatenate([u.reshape(-1, DIM) for u, _ in pieces])
            codebooks += [vectors[rng.choice(len(vectors), ENTRIES, replace=False)]]
            codebooks += [np.zeros((ENTRIES, DIM), np.float32)] * (STAGES - 1)
        bank = bytearray()
        for e in range(len(names)):
            record = bytearray(layout["stride"])
            for k, kind in enumerate(container.KINDS):
                u, scale = normalised[k][e]
                rows = u.shape[0]
                data = container.pack_codes(_encode(u, codebooks[base + STAGES * k]))
                record[layout["offsets"][kind]:layout["offsets"][kind] + len(data)] = data
                at = layout["scales"][kind]
                record[at:at + 2 * rows] = scale.astype("<f2").tobytes()
            crc = zlib.crc32(bytes(record[64:layout["payload_end"]]))
            struct.pack_into("<IHHIIIIIIIII", record, 0, container.RECORD_MAGIC, container.FORMAT_VERSION, i, e,
                             base, layout["stride"],
                             layout["offsets"]["gate"], layout["offsets"]["up"], layout["offsets"]["down"],
                             layout["scales_off"], layout["payload_end"], crc)
            bank += record
        file = f"experts-L{i:03d}.bin"
        with open(os.path.join(path, file), "wb") as f:
            f.write(bank)
        layers.append({"layer": i, "file": file, "experts": len(names), "record_stride": layout["stride"],
                       "bytes": len(bank), "codebook_base": base, "hidden": hidden, "expert_width": width,
                       "records_crc32": 0})
    np.asarray(codebooks, "<f4").tofile(os.path.join(path, "codebooks.bin"))
    trunk, table = bytearray(), []
    for name, shape in shapes.items():
        if name in routed:
            continue
        trunk += bytes(_align(len(trunk), 64) - len(trunk))
        data = np.ascontiguousarray(weights[name], "<f4").tobytes()
        table.append({"name": name, "format": "f32", "shape": shape, "offset": len(trunk), "bytes": len(data),
                      "scale_offset": 0, "scale_bytes": 0})
        trunk += data
    with open(os.path.join(path, "trunk.bin"), "wb") as f:
        f.write(trunk)
    manifest = {"format": "sluice", "format_version": container.MANIFEST_FORMAT_VERSION, "arch": c["model_type"],
                "config": config,
                "expert_quant": EXPERT_QUANT, "trunk": {"file": "trunk.bin", "bytes": len(trunk), "tensors": table},
                "codebooks": {"file": "codebooks.bin", "bytes": len(codebooks) * container.CODEBOOK_BYTES,
                              "count": len(codebooks)},
                "moe_layers": layers, "tokenizer": {"files": [], "chat_template": None}}
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return path
