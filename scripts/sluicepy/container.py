# scripts/sluicepy/container.py: an independent decoder of a sluice container
# (proto/FORMAT.md, format 3): manifest checks, trunk dequantisation, codebooks,
# expert records. It trusts nothing it reads and never writes to the container;
# pack_codes, the inverse of its code decoding, is there for test fixtures.
import argparse
import json
import os
import struct
import sys
import zlib

import numpy as np

from . import SluiceError, families, k3

FORMAT_VERSION = 2          # record headers
MANIFEST_FORMAT_VERSION = 3  # manifest.json format_version (FORMAT.md)
ARCHES = families.FAMILIES + (k3.ARCH,)
RECORD_MAGIC = 0x52584C53  # "SLXR"
HEADER_BYTES = 64
SECTION_ALIGN = 64
RECORD_ALIGN = 4096
STAGES, ENTRIES, VEC_DIM, ROW_BLOCK = 2, 64, 4, 32
# Bytes of one row block's 6-bit codes for one vector: 32 rows x 2 stages.
UNIT_BYTES = 48
# Matrix widths are whole multiples of this (the kernels take vectors in pairs).
COLS_MULTIPLE = 8
INDEX_LAYOUT = "rowblock32.vector.split6"
CODEBOOK_BYTES = ENTRIES * VEC_DIM * 4
KINDS = ("gate", "up", "down")
GROUP = 128
# Bytes of one stored row of each grouped trunk format, from its padded width.
_ROW_BYTES = {"q8g128": lambda padded: padded, "q6g128": lambda padded: padded // 4 * 3,
              "q4g128": lambda padded: padded // 2}
_LIMITS = {"layers": 256, "experts": 4096, "top_k": 64, "hidden": 65536, "expert_width": 65536,
           "vocab": 1048576, "record_stride": 1 << 30}
_EXPERT_QUANT = {"method": "rvq", "stages": STAGES, "entries": ENTRIES, "vec_dim": VEC_DIM,
                 "index_bits": 6, "row_block": ROW_BLOCK, "index_layout": INDEX_LAYOUT,
                 "scale": "f16_row_absmax", "codebook_sharing": "layer.matrix.stage"}
_HEADER_FIELDS = ("magic", "version", "layer", "expert", "codebook_id", "stride", "gate_off", "up_off",
                  "down_off", "scales_off", "payload_end", "crc32")
_HEADER_STRUCT = struct.Struct("<IHHIIIIIIIII")
# Order and wording of the header checks follow FORMAT.md / proto/record_format.cpp.
_HEADER_CHECKS = (("magic", "magic"), ("version", "format version"), ("layer", "layer"),
                  ("expert", "expert id"), ("stride", "record stride"), ("codebook_id", "codebook id"),
                  ("gate_off", "gate offset"), ("up_off", "up offset"), ("down_off", "down offset"),
                  ("scales_off", "scales offset"), ("payload_end", "payload end"))


def _align(value, alignment):
    return (value + alignment - 1) // alignment * alignment


def _rows_padded(rows):
    return _align(rows, ROW_BLOCK)


def index_bytes(rows, cols):
    """Bytes of one matrix's codes: a 48-byte unit per 32-row block and vector."""
    return _rows_padded(rows) // ROW_BLOCK * (cols // VEC_DIM) * UNIT_BYTES


def unpack_codes(raw, rows, cols):
    """raw: one matrix's index bytes (uint8, index_bytes(rows, cols) of them) ->
    codes uint8 [rows, nv, STAGES], padding rows dropped. FORMAT.md, layout
    rowblock32.vector.split6: in the unit of block r/32 and vector v, with
    i = r%16 and h = (r%32)/16, byte 16s + i holds the low 4 bits of (r, s) at
    bit 4h and byte 32 + i the high 2 bits at bit 4s + 2h."""
    blocks, nv = _rows_padded(rows) // ROW_BLOCK, cols // VEC_DIM
    units = np.asarray(raw, dtype=np.uint8).reshape(blocks, nv, UNIT_BYTES)
    low_bytes = units[:, :, :32].reshape(blocks, nv, STAGES, 1, 16)  # [b, v, s, ·, i]
    high_bytes = units[:, :, None, None, 32:]                        # [b, v, ·, ·, i]
    half = np.arange(2, dtype=np.uint8)[None, :, None]
    stage = np.arange(STAGES, dtype=np.uint8)[:, None, None]
    low = (low_bytes >> (4 * half)) & 15                              # [b, v, s, h, i]
    high = (high_bytes >> (4 * stage + 2 * half)) & 3
    codes = (low | high << 4).transpose(0, 3, 4, 1, 2)                # [b, h, i, v, s]
    return codes.reshape(blocks * ROW_BLOCK, nv, STAGES)[:rows]


def pack_codes(codes):
    """codes: [rows, nv, STAGES] values below 64 -> the matrix's index bytes
    (unpack_codes' inverse; padding rows get code 0)."""
    codes = np.asarray(codes)
    rows, nv = codes.shape[0], codes.shape[1]
    if codes.shape[2:] != (STAGES,) or codes.size and (codes.min() < 0 or codes.max() >= ENTRIES):
        raise SluiceError(f"codes of shape {list(codes.shape)}: expected [rows, vectors, {STAGES}] below {ENTRIES}")
    padded = np.zeros((_rows_padded(rows), nv, STAGES), np.uint8)
    padded[:rows] = codes
    blocks = padded.shape[0] // ROW_BLOCK
    c = padded.reshape(blocks, 2, 16, nv, STAGES).transpose(0, 3, 4, 1, 2)  # [b, v, s, h, i]
    low = (c[:, :, :, 0] & 15) | (c[:, :, :, 1] & 15) << 4                 # [b, v, s, i]
    high = np.zeros((blocks, nv, 16), np.uint8)
    for s in range(STAGES):
        for h in range(2):
            high |= (c[:, :, s, h] >> 4 & 3) << (4 * s + 2 * h)
    return np.concatenate([low.reshape(blocks, nv, 32), high], axis=2).tobytes()


def record_layout(hidden, width):
    """Offsets of a record of a layer with this hidden size and expert width."""
    if hidden <= 0 or width <= 0 or hidden % COLS_MULTIPLE or width % COLS_MULTIPLE:
        raise SluiceError(f"expert shape hidden {hidden} x width {width} cannot be stored: "
                          f"both must be non-zero multiples of {COLS_MULTIPLE}")
    shapes = {"gate": (width, hidden), "up": (width, hidden), "down": (hidden, width)}
    offsets, cursor = {}, HEADER_BYTES
    for kind in KINDS:
        rows, cols = shapes[kind]
        offsets[kind] = cursor
        cursor = _align(cursor + index_bytes(rows, cols), SECTION_ALIGN)
    scales_off = cursor
    scale_at, cursor = {}, scales_off
    for kind in KINDS:
        scale_at[kind] = cursor
        cursor += 2 * _rows_padded(shapes[kind][0])
    return {"shapes": shapes, "offsets": offsets, "scales": scale_at, "scales_off": scales_off,
            "payload_end": cursor, "stride": _align(cursor, RECORD_ALIGN)}


def _get(obj, key, kind, where):
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise SluiceError(f"{where}: {key} is missing or not {getattr(kind, '__name__', kind)}")
    return value


def _plain_name(name, where):
    if not isinstance(name, str) or not name or os.path.basename(name) != name or name in (".", ".."):
        raise SluiceError(f"{where}: file name {name!r} is not a plain file name")
    return name


def _bounded(value, limit, what, where):
    if value < 0 or value > limit:
        raise SluiceError(f"{where}: {what} {value} is outside [0, {limit}]")
    return value


class Container:
    """A validated sluice container; tensors come out as float32 numpy arrays."""

    def __init__(self, path):
        self.path = path
        manifest_path = os.path.join(path, "manifest.json")
        if not os.path.isdir(path):
            raise SluiceError(f"{path}: not a container directory")
        if not os.path.exists(manifest_path):
            raise SluiceError(f"{path}: incomplete container: conversion did not finish (no manifest.json)")
        try:
            with open(manifest_path, encoding="utf-8") as f:
                manifest = json.load(f)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SluiceError(f"{manifest_path}: not valid JSON: {e}") from None
        self.manifest = manifest
        where = manifest_path
        if not isinstance(manifest, dict) or manifest.get("format") != "sluice":
            raise SluiceError(f"{where}: format is not \"sluice\"")
        version = manifest.get("format_version")
        if version != MANIFEST_FORMAT_VERSION:
            # Versions 1 and 2 stored codes of 8 weights in 3 stages of 256 entries.
            older = type(version) is int and version < MANIFEST_FORMAT_VERSION
            again = "; convert the checkpoint again" if older else ""
            raise SluiceError(f"{where}: format_version {version} is not supported "
                              f"(this reader reads {MANIFEST_FORMAT_VERSION}{again})")
        self.arch = manifest.get("arch")
        if self.arch not in ARCHES:
            raise SluiceError(f"{where}: unknown arch {self.arch!r}")
        self.config = _get(manifest, "config", dict, where)
        self._check_config(where)
        self._check_expert_quant(where)
        self._load_trunk_table(where)
        self._load_codebooks(where)
        self._load_layers(where)

    # --- manifest -----------------------------------------------------------------
    def _check_config(self, where):
        w = where + " config"
        try:  # the HF class defaults fill what the config leaves out (K3: its text_config)
            c = k3.resolve(self.config) if self.arch == k3.ARCH else families.resolve(self.config)
        except SluiceError as e:
            raise SluiceError(f"{w}: {e}") from None
        _bounded(_get(c, "num_hidden_layers", int, w), _LIMITS["layers"], "num_hidden_layers", w)
        key = families.num_experts_key(c)
        _bounded(_get(c, key, int, w), _LIMITS["experts"], key, w)
        _bounded(_get(c, families.top_k_key(c), int, w), _LIMITS["top_k"], families.top_k_key(c), w)
        _bounded(_get(c, "hidden_size", int, w), _LIMITS["hidden"], "hidden_size", w)
        _bounded(_get(c, "vocab_size", int, w), _LIMITS["vocab"], "vocab_size", w)
        self.resolved = c

    def _check_expert_quant(self, where):
        q = _get(self.manifest, "expert_quant", dict, where)
        for key, want in _EXPERT_QUANT.items():
            if q.get(key) != want:
                raise SluiceError(f"{where}: expert_quant.{key} is {q.get(key)!r}, this reader needs {want!r}")

    def _load_trunk_table(self, where):
        trunk = _get(self.manifest, "trunk", dict, where)
        self.trunk_file = os.path.join(self.path, _plain_name(trunk.get("file"), where + " trunk"))
        if not os.path.exists(self.trunk_file):
            raise SluiceError(f"{self.trunk_file}: missing")
        size = os.path.getsize(self.trunk_file)
        self.trunk = {}
        for t in _get(trunk, "tensors", list, where + " trunk"):
            name = _get(t, "name", str, where + " trunk tensor")
            w = f"{where}: trunk tensor {name}"
            fmt, shape = t.get("format"), t.get("shape")
            # f32 tensors keep their HF shape, up to 4-D (KDA's conv [P,1,K], A_log [1,1,H,1]).
            if not (isinstance(shape, list) and 1 <= len(shape) <= 4
                    and all(isinstance(d, int) and not isinstance(d, bool) and 0 < d <= (1 << 31) for d in shape)):
                raise SluiceError(f"{w}: bad shape {shape}")
            offset, nbytes = _get(t, "offset", int, w), _get(t, "bytes", int, w)
            soff, sbytes = _get(t, "scale_offset", int, w), _get(t, "scale_bytes", int, w)
            rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])
            padded = _align(cols, GROUP)
            if fmt == "f32":
                want, want_scales = 4 * int(np.prod(shape, dtype=np.int64)), 0
                if soff != 0:
                    raise SluiceError(f"{w}: f32 tensor has scale_offset {soff}, must be 0")
            elif fmt in _ROW_BYTES and len(shape) == 2:
                want = rows * _ROW_BYTES[fmt](padded)
                want_scales = 2 * rows * (padded // GROUP)
            else:
                raise SluiceError(f"{w}: format {fmt!r} with shape {shape} is not allowed")
            if nbytes != want or sbytes != want_scales:
                raise SluiceError(f"{w}: bytes {nbytes}/scale_bytes {sbytes}, expected {want}/{want_scales}")
            if offset % 64 != 0:
                raise SluiceError(f"{w}: offset {offset} is not 64-byte aligned")
            for off, n, what in ((offset, nbytes, "data"), (soff, sbytes, "scales")):
                if off < 0 or off + n > size:
                    raise SluiceError(f"{w}: {what} [{off}, {off + n}) is outside {self.trunk_file} ({size} bytes)")
            if name in self.trunk:
                raise SluiceError(f"{w}: listed twice")
            self.trunk[name] = {"format": fmt, "shape": shape, "offset": offset, "bytes": nbytes,
                                "scale_offset": soff, "scale_bytes": sbytes}

    def _load_codebooks(self, where):
        cb = _get(self.manifest, "codebooks", dict, where)
        file = os.path.join(self.path, _plain_name(cb.get("file"), where + " codebooks"))
        count, nbytes = _get(cb, "count", int, where + " codebooks"), _get(cb, "bytes", int, where + " codebooks")
        size = os.path.getsize(file) if os.path.exists(file) else None
        if count < 0 or nbytes != count * CODEBOOK_BYTES or size != nbytes:
            raise SluiceError(f"{where}: codebooks count {count} bytes {nbytes} do not match "
                              f"{count} x {CODEBOOK_BYTES} and the file's size {size}")
        self.codebooks = np.fromfile(file, dtype="<f4").astype(np.float32).reshape(count, ENTRIES, VEC_DIM)

    def _load_layers(self, where):
        self.layers = {}
        count = self.codebooks.shape[0]
        for m in _get(self.manifest, "moe_layers", list, where):
            layer = _get(m, "layer", int, where + " moe_layers")
            w = f"{where}: moe layer {layer}"
            if not 0 <= layer < self.resolved["num_hidden_layers"] or layer in self.layers:
                raise SluiceError(f"{w}: layer index out of range or repeated")
            experts = _bounded(_get(m, "experts", int, w), _LIMITS["experts"], "experts", w)
            hidden = _bounded(_get(m, "hidden", int, w), _LIMITS["hidden"], "hidden", w)
            width = _bounded(_get(m, "expert_width", int, w), _LIMITS["expert_width"], "expert_width", w)
            stride = _bounded(_get(m, "record_stride", int, w), _LIMITS["record_stride"], "record_stride", w)
            base, nbytes = _get(m, "codebook_base", int, w), _get(m, "bytes", int, w)
            layout = record_layout(hidden, width)
            if stride % RECORD_ALIGN or stride != layout["stride"]:
                raise SluiceError(f"{w}: record_stride {stride}, the geometry needs {layout['stride']}")
            file = os.path.join(self.path, _plain_name(m.get("file"), w))
            size = os.path.getsize(file) if os.path.exists(file) else None
            if nbytes != experts * stride or size != nbytes:
                raise SluiceError(f"{w}: bytes {nbytes} must equal experts x record_stride "
                                  f"({experts * stride}) and the size of {file} ({size})")
            if base < 0 or base + len(KINDS) * STAGES > count:
                raise SluiceError(f"{w}: codebook_base {base} + {len(KINDS) * STAGES} exceeds the {count} codebooks")
            self.layers[layer] = {"file": file, "experts": experts, "stride": stride, "base": base,
                                  "hidden": hidden, "width": width, "layout": layout}

    # --- trunk --------------------------------------------------------------------
    def trunk_stored(self, name):
        """A trunk tensor's table entry, its stored bytes and its scale bytes."""
        t = self.trunk.get(name)
        if t is None:
            raise SluiceError(f"{self.path}: no trunk tensor {name}")
        with open(self.trunk_file, "rb") as f:
            f.seek(t["offset"])
            data = f.read(t["bytes"])
            f.seek(t["scale_offset"])
            scale_data = f.read(t["scale_bytes"])
        if len(data) != t["bytes"] or len(scale_data) != t["scale_bytes"]:
            raise SluiceError(f"{self.trunk_file}: short read of trunk tensor {name}")
        return t, data, scale_data

    def trunk_tensor(self, name):
        t, data, scale_data = self.trunk_stored(name)
        shape, fmt = t["shape"], t["format"]
        if fmt == "f32":
            return np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(shape)
        rows, cols = shape
        padded = _align(cols, GROUP)
        raw = np.frombuffer(data, dtype=np.uint8).reshape(rows, -1)
        if fmt == "q8g128":
            q = raw.view(np.int8).astype(np.float32)
        elif fmt == "q6g128":
            # Blocks of 32 columns in 24 bytes: byte i < 16 holds the low nibbles of
            # columns i and 16 + i, byte 16 + j the top two bits of columns j + 8s at bit 2s.
            blocks = raw.reshape(rows, padded // 32, 24)
            low = np.concatenate([blocks[:, :, :16] & 0x0F, blocks[:, :, :16] >> 4], axis=2)
            top = blocks[:, :, 16:24]
            high = np.concatenate([(top >> (2 * s)) & 0x03 for s in range(4)], axis=2)
            q = ((low | (high << 4)).astype(np.float32) - 32).reshape(rows, padded)
        else:
            q = np.empty((rows, padded), dtype=np.float32)
            q[:, 0::2] = (raw & 0x0F).astype(np.float32) - 8
            q[:, 1::2] = (raw >> 4).astype(np.float32) - 8
        scales = np.frombuffer(scale_data, dtype="<f2").astype(np.float32).reshape(rows, padded // GROUP, 1)
        return (q.reshape(rows, padded // GROUP, GROUP) * scales).reshape(rows, padded)[:, :cols].copy()

    # --- experts ------------------------------------------------------------------
    def read_record(self, layer, expert, verify_crc=False):
        """The raw record bytes, after the header checks every reader applies."""
        info = self.layers.get(layer)
        if info is None:
            raise SluiceError(f"{self.path}: layer {layer} is not a MoE layer")
        if not 0 <= expert < info["experts"]:
            raise SluiceError(f"layer {layer}: expert {expert} is outside [0, {info['experts']})")
        stride = info["stride"]
        with open(info["file"], "rb") as f:
            f.seek(expert * stride)
            record = f.read(stride)
        if len(record) != stride:
            raise SluiceError(f"layer {layer} expert {expert}: short read ({len(record)} of {stride} bytes)")
        found = dict(zip(_HEADER_FIELDS, _HEADER_STRUCT.unpack_from(record)))
        lay = info["layout"]
        expected = {"magic": RECORD_MAGIC, "version": FORMAT_VERSION, "layer": layer, "expert": expert,
                    "stride": stride, "codebook_id": info["base"], "gate_off": lay["offsets"]["gate"],
                    "up_off": lay["offsets"]["up"], "down_off": lay["offsets"]["down"],
                    "scales_off": lay["scales_off"], "payload_end": lay["payload_end"]}
        for field, what in _HEADER_CHECKS:
            if found[field] != expected[field]:
                raise SluiceError(f"layer {layer} expert {expert}: header {what} mismatch "
                                  f"(found {found[field]}, expected {expected[field]})")
        if verify_crc:
            crc = zlib.crc32(record[HEADER_BYTES:lay["payload_end"]]) & 0xFFFFFFFF
            if crc != found["crc32"]:
                raise SluiceError(f"layer {layer} expert {expert}: payload crc32 mismatch "
                                  f"(found {found['crc32']:#010x}, computed {crc:#010x})")
        return record

    def matrix_codes(self, layer, kind, record):
        """One matrix of a record as stored: (codes uint8 [rows, nv, STAGES],
        f16 row scales as f32 [rows], its codebooks f32 [STAGES, ENTRIES, VEC_DIM])."""
        if kind not in KINDS:
            raise SluiceError(f"matrix kind {kind!r} is not one of {', '.join(KINDS)}")
        info = self.layers.get(layer)
        if info is None:
            raise SluiceError(f"{self.path}: layer {layer} is not a MoE layer")
        lay = info["layout"]
        rows, cols = lay["shapes"][kind]
        raw = np.frombuffer(record, dtype=np.uint8, count=index_bytes(rows, cols), offset=lay["offsets"][kind])
        first = info["base"] + KINDS.index(kind) * STAGES  # FORMAT.md: base + kind·2 + stage
        scales = np.frombuffer(record, dtype="<f2", count=rows, offset=lay["scales"][kind]).astype(np.float32)
        return unpack_codes(raw, rows, cols), scales, self.codebooks[first:first + STAGES]

    def expert_matrix(self, layer, expert, kind, record=None):
        """Decoded f32 matrix [rows, cols]: C0[i0] + C1[i1], then × f16 scale."""
        if record is None:
            record = self.read_record(layer, expert)
        codes, scales, books = self.matrix_codes(layer, kind, record)
        total = books[0][codes[:, :, 0]] + books[1][codes[:, :, 1]]
        return (total.reshape(codes.shape[0], -1) * scales[:, None]).astype(np.float32)

    def expert(self, layer, expert, verify_crc=False):
        record = self.read_record(layer, expert, verify_crc)
        return {kind: self.expert_matrix(layer, expert, kind, record) for kind in KINDS}

    def state_dict(self):
        """Every weight under its Hugging Face name, as the engine will compute with it
        (records hold gate/up/down; Mixtral names them w1/w3/w2)."""
        out = {name: self.trunk_tensor(name) for name in self.trunk}
        for layer, info in sorted(self.layers.items()):
            for e in range(info["experts"]):
                names = (k3.expert_names(self.resolved, layer, e) if self.arch == k3.ARCH
                         else families.expert_names(self.resolved, layer, e))
                for name, (kind, matrix) in zip(names, self.expert(layer, e).items()):
                    out[name] = matrix
        return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m sluicepy.container",
                                     description="Decode parts of a sluice container (FORMAT.md, format 3).")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("dump-expert", help="write one expert matrix as raw little-endian f32, rows x cols")
    p.add_argument("model")
    p.add_argument("--layer", type=int, required=True)
    p.add_argument("--expert", type=int, required=True)
    p.add_argument("--matrix", choices=KINDS, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--verify", action="store_true", help="also check the record's payload crc32")
    p = sub.add_parser("dump-tensor", help="write one dequantized trunk tensor as raw little-endian f32")
    p.add_argument("model")
    p.add_argument("--name", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("verify", help="check the manifest and every record header and crc32")
    p.add_argument("model")
    args = parser.parse_args(argv)
    try:
        c = Container(args.model)
        if args.mode == "dump-expert":
            record = c.read_record(args.layer, args.expert, args.verify)
            matrix = c.expert_matrix(args.layer, args.expert, args.matrix, record)
            matrix.astype("<f4").tofile(args.out)
            print(json.dumps({"rows": matrix.shape[0], "cols": matrix.shape[1]}))
        elif args.mode == "dump-tensor":
            tensor = c.trunk_tensor(args.name)
            tensor.astype("<f4").tofile(args.out)
            print(json.dumps({"shape": list(tensor.shape)}))
        else:
            records = 0
            for layer, info in sorted(c.layers.items()):
                for e in range(info["experts"]):
                    c.read_record(layer, e, verify_crc=True)
                    records += 1
            print(json.dumps({"records": records, "ok": True}))
    except (SluiceError, OSError) as e:
        print(f"sluicepy.container: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
