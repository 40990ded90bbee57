# scripts/sluicepy/safetensors.py: read and write safetensors files and
# sharded checkpoints (index.json). BF16/F16/F32 and F8_E4M3 (decoded with
# fp8.py, dequantized by its weight_scale_inv); every offset in a header is
# checked against the file before any data is touched.
import json
import os
import struct

import numpy as np

from . import SluiceError, fp8

_ITEM_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}
SCALE_SUFFIX = "_scale_inv"
_MAX_HEADER_BYTES = 100 * 1024 * 1024
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


def f32_to_bf16_bits(x):
    """bf16 bit patterns (uint16) of f32 values, rounding to nearest even."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = (bits + (((bits >> 16) & 1) + np.uint32(0x7FFF))) >> 16
    # NaN must stay NaN (rounding could carry it into infinity).
    rounded = np.where(np.isnan(x), np.uint32(0x7FC0), rounded)
    return rounded.astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _encode(array, dtype, name):
    if dtype == "F8_E4M3":
        return fp8.encode(np.asarray(array, dtype=np.float32), name).tobytes()
    if dtype == "F32":
        return np.ascontiguousarray(array, dtype="<f4").tobytes()
    if dtype == "U8":  # MXFP4's packed nibbles and E8M0 scales, stored as they are
        return np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(array, dtype="<f2").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(array).astype("<u2").tobytes()
    raise SluiceError(f"safetensors: unsupported dtype {dtype}")


def _dtype_of(dtype, name):
    return dtype[name] if isinstance(dtype, dict) else dtype


def _count(array):
    # np.shape reads .shape without materialising objects that compute their data lazily.
    return int(np.prod(np.shape(array), dtype=np.int64))


def save_file(path, tensors, dtype="BF16", metadata=None):
    """Writes `tensors` (name -> array, in this order) converted to `dtype`,
    one dtype for all or a dict name -> dtype. The file appears atomically.
    A value may be any object with .shape and __array__ (made when written)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    cursor = 0
    for name, array in tensors.items():
        kind = _dtype_of(dtype, name)
        if kind not in _ITEM_BYTES:
            raise SluiceError(f"safetensors: tensor {name}: unsupported dtype {kind}")
        size = _ITEM_BYTES[kind] * _count(array)
        header[name] = {"dtype": kind, "shape": list(np.shape(array)),
                        "data_offsets": [cursor, cursor + size]}
        cursor += size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    tmp = str(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, array in tensors.items():  # one tensor in memory at a time
            f.write(_encode(array, _dtype_of(dtype, name), name))
    os.replace(tmp, path)


def read_header(path):
    """Returns (tensor table without __metadata__, metadata, data start offset)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise SluiceError(f"{path}: too short for a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER_BYTES or 8 + n > size:
            raise SluiceError(f"{path}: header length {n} does not fit the file ({size} bytes)")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SluiceError(f"{path}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise SluiceError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_start = 8 + n
    for name, info in header.items():
        kind = info.get("dtype") if isinstance(info, dict) else None
        if kind not in _ITEM_BYTES:
            raise SluiceError(f"{path}: tensor {name} has unsupported dtype {kind}")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise SluiceError(f"{path}: tensor {name} has a bad shape {shape}")
        want = _ITEM_BYTES[kind] * int(np.prod(shape, dtype=np.int64))
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] and data_start + offsets[1] <= size
                and offsets[1] - offsets[0] == want):
            raise SluiceError(f"{path}: tensor {name} data_offsets {offsets} do not hold "
                              f"{kind}{shape} inside the file ({size} bytes)")
    return header, metadata, data_start


def load_file(path, names=None):
    """Reads tensors as float32 numpy arrays (all, or only `names`); U8 stays uint8."""
    header, _, data_start = read_header(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if names is not None and name not in names:
            continue
        begin, end = info["data_offsets"]
        data = raw[data_start + begin:data_start + end]
        kind = info["dtype"]
        if kind == "F32":
            array = data.view("<f4").astype(np.float32)
        elif kind == "F16":
            array = data.view("<f2").astype(np.float32)
        elif kind == "F8_E4M3":
            array = fp8.decode(data)
        elif kind == "U8":
            array = np.array(data, dtype=np.uint8)
        else:
            array = bf16_bits_to_f32(data.view("<u2"))
        out[name] = array.reshape(info["shape"])
    return out


def shard_name(i, count):
    return f"model-{i + 1:05d}-of-{count:05d}.safetensors"


def checkpoint_files(directory):
    """Maps tensor name -> safetensors file of a checkpoint directory."""
    index = os.path.join(directory, INDEX_NAME)
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f).get("weight_map")
        if not isinstance(weight_map, dict):
            raise SluiceError(f"{index}: no weight_map object")
        for name, file in weight_map.items():
            if os.path.basename(file) != file or not os.path.exists(os.path.join(directory, file)):
                raise SluiceError(f"{index}: tensor {name} maps to a missing file {file}")
        return {name: os.path.join(directory, file) for name, file in weight_map.items()}
    single = os.path.join(directory, SINGLE_NAME)
    if not os.path.exists(single):
        raise SluiceError(f"{directory}: neither {SINGLE_NAME} nor {INDEX_NAME}")
    return {name: single for name in read_header(single)[0]}


def load_checkpoint(directory):
    """All tensors of a (possibly sharded) checkpoint as float32 arrays; each
    F8_E4M3 weight comes out dequantized by its `<name>_scale_inv`, which is dropped."""
    by_file = {}
    for name, file in checkpoint_files(directory).items():
        by_file.setdefault(file, set()).add(name)
    out, fp8_names = {}, []
    for file, names in by_file.items():
        found = load_file(file, names)
        missing = names - found.keys()
        if missing:
            raise SluiceError(f"{file}: the index lists {sorted(missing)[0]} but the file lacks it")
        header = read_header(file)[0]
        fp8_names += [n for n in names if header[n]["dtype"] == "F8_E4M3"]
        for n in names:
            if n.endswith(SCALE_SUFFIX) and header[n]["dtype"] != "F32":
                raise SluiceError(f"{file}: tensor {n} is {header[n]['dtype']}, a block scale must be F32")
        out.update(found)
    for name in fp8_names:
        scale = out.pop(name + SCALE_SUFFIX, None)
        if scale is None:
            raise SluiceError(f"{directory}: F8_E4M3 tensor {name} has no {name + SCALE_SUFFIX}")
        out[name] = fp8.dequantize(out[name], scale, name)
    orphans = sorted(n for n in out if n.endswith(SCALE_SUFFIX))
    if orphans:
        raise SluiceError(f"{directory}: {orphans[0]} scales a tensor that is not F8_E4M3")
    return out


def save_checkpoint(directory, tensors, dtype="BF16", shards=1):
    """Writes model.safetensors, or `shards` files of about equal size plus the
    index (tensors keep their order; each shard gets at least one)."""
    names = list(tensors)
    if shards <= 1:
        save_file(os.path.join(directory, SINGLE_NAME), tensors, dtype, {"format": "pt"})
        return
    if shards > len(names):
        raise SluiceError(f"--shards {shards} exceeds the {len(names)} tensors")
    sizes = np.array([_count(tensors[n]) for n in names], dtype=np.float64)
    cumulative = np.cumsum(sizes) / sizes.sum()
    cuts = [0]
    for s in range(1, shards):
        cut = int(np.searchsorted(cumulative, s / shards)) + 1
        cuts.append(min(max(cut, cuts[-1] + 1), len(names) - (shards - s)))
    cuts.append(len(names))
    weight_map = {}
    total = 0
    for s in range(shards):
        part = {n: tensors[n] for n in names[cuts[s]:cuts[s + 1]]}
        file = shard_name(s, shards)
        save_file(os.path.join(directory, file), part, dtype, {"format": "pt"})
        for n, a in part.items():
            weight_map[n] = file
            total += _ITEM_BYTES[_dtype_of(dtype, n)] * _count(a)
    index = {"metadata": {"total_size": int(total)}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(directory, INDEX_NAME), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
