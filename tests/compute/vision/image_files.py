# tests/compute/vision/image_files.py: minimal PNG, BMP and TGA writers for
# the vision tests, so the engine decodes real files (through stb_image) whose
# pixels the test knows exactly and hands to the oracle as arrays.
import struct
import zlib

import numpy as np


def write_png(path, rgb):
    """8-bit RGB, no filter, one IDAT."""
    height, width, _ = rgb.shape

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(height))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def write_bmp(path, rgb):
    """24-bit bottom-up BGR rows padded to 4 bytes."""
    height, width, _ = rgb.shape
    stride = (width * 3 + 3) // 4 * 4
    rows = b"".join(rgb[y, :, ::-1].tobytes().ljust(stride, b"\x00") for y in range(height - 1, -1, -1))
    header = struct.pack("<2sIHHI", b"BM", 54 + len(rows), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    with open(path, "wb") as f:
        f.write(header + info + rows)


def write_tga(path, rgb):
    """Uncompressed 24-bit true colour, top-left origin."""
    height, width, _ = rgb.shape
    header = struct.pack("<BBBHHBHHHHBB", 0, 0, 2, 0, 0, 0, 0, 0, width, height, 24, 0x20)
    with open(path, "wb") as f:
        f.write(header + np.ascontiguousarray(rgb[:, :, ::-1]).tobytes())


def picture(width, height, seed):
    """Gradients, a checkerboard and noise: every channel varies along both axes."""
    y, x = np.mgrid[0:height, 0:width]
    noise = np.random.default_rng(seed).integers(0, 64, size=(height, width))
    rgb = np.stack([(x * 7 + noise) % 256, (y * 5 + 2 * noise) % 256,
                    ((x // 9 + y // 7) % 2) * 200 + noise % 56], axis=-1)
    return rgb.astype(np.uint8)
