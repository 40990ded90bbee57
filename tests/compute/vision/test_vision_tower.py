#!/usr/bin/python3
# K3-tiny's vision tower and projector (k3.md §4.2, §6) against the f64 oracle
# (scripts/sluicepy/vision.py) reading the same container: the three grids of
# §6 on random pixels (4×6 resizes the 8×8 position grid, 8×8 is its identity,
# 2×2 the smallest), and a real picture preprocessed by the oracle, agree to
# 1e-5 relative (max |diff| over max |row|). Also: the container stores the
# patch kernel as [out, 588] rows and the grid as rows, all matrices in int8;
# a tower whose RoPE turned rows on even pairs (the docstring's reading) is far
# from the engine, so the test can tell the two apart.
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.environ["SLUICE_SOURCE_ROOT"]
SLUICE = os.environ["SLUICE_BIN"]
TOOL = os.environ["SLUICE_VISION_ROWS"]
PY = "/usr/bin/python3"
TOLERANCE = 1e-5
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from sluicepy import container as sluice_container, vision  # noqa: E402

def picture():
    """A 120×90 RGB picture with edges and gradients; §4.4 makes it an 8×6 grid
    (resampled to 112×84 pixels, the 8×8 position grid resized to 6×8)."""
    y, x = np.mgrid[0:90, 0:120]
    rgb = np.stack([(x * 2) % 256, (y * 3) % 256, ((x // 15 + y // 10) % 2) * 255], axis=-1)
    return rgb.astype(np.uint8)


def run(*args):
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(args)}\n{result.stdout}\n{result.stderr}")
    return result


def engine_rows(work, model, pixels, name):
    _, ph, pw = pixels.shape
    path_in, path_out = os.path.join(work, name + ".pixels"), os.path.join(work, name + ".rows")
    pixels.astype("<f4").tofile(path_in)
    run(TOOL, model, "--pixels", path_in, "--grid-width", str(pw // 14), "--grid-height", str(ph // 14),
        "--out", path_out)
    return np.fromfile(path_out, dtype="<f4")


def relative(ours, theirs):
    return float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="sluice-vision-") as work:
        checkpoint, model = os.path.join(work, "k3"), os.path.join(work, "k3.sluice")
        run(PY, os.path.join(ROOT, "scripts/make_tiny_checkpoint.py"), "kimi_k3", checkpoint, "--seed", "7")
        summary = json.loads(run(SLUICE, "convert", checkpoint, model, "-q", "--json").stdout)
        if "skipped_vision_tensors" in summary:
            failures.append("the converter skipped the vision tensors of a config with a vision_config")
        c = sluice_container.Container(model)
        v = c.config["vision_config"]
        formats = {n: (t["format"], t["shape"]) for n, t in c.trunk.items()}
        if formats.get("vision_tower.patch_embed.proj.weight") != ("q8g128", [64, 588]):
            failures.append(f"patch kernel stored as {formats.get('vision_tower.patch_embed.proj.weight')}")
        if formats.get("vision_tower.patch_embed.pos_emb.weight") != ("q8g128", [64, 64]):
            failures.append(f"position grid stored as {formats.get('vision_tower.patch_embed.pos_emb.weight')}")
        weights = {name: c.trunk_tensor(name) for name in vision.tensor_names(v)}
        rng = np.random.default_rng(11)
        cases = [(f"random {gw}x{gh}", rng.uniform(-1, 1, size=(3, 14 * gh, 14 * gw)))
                 for gw, gh in ((6, 4), (8, 8), (2, 2))]
        pixels, grid = vision.preprocess(picture())
        cases.append((f"picture 120x90 -> {grid[0]}x{grid[1]}", pixels.numpy()))
        for name, pix in cases:
            ours = engine_rows(work, model, pix, name.split()[0] + str(len(name)))
            theirs = vision.tower(weights, v, pix).numpy()
            gh, gw = pix.shape[1] // 14, pix.shape[2] // 14
            if ours.size != theirs.size or theirs.shape != (gh // 2 * gw // 2, 128):
                failures.append(f"{name}: engine wrote {ours.size} values, reference {list(theirs.shape)}")
                continue
            error = relative(ours.reshape(theirs.shape), theirs)
            print(f"{name}: tower rows {list(theirs.shape)}, relative max |diff| {error:.3g}")
            if not error <= TOLERANCE:
                failures.append(f"{name}: tower output differs by {error:.3g} relative > {TOLERANCE}")
        # The other RoPE reading (rows on even pairs) must be visibly different. Random
        # weights of K3-tiny keep attention near uniform, so the gap is small, but it is
        # still over ten times the tolerance (and the agreement is far inside it).
        pix = cases[0][1]
        swapped = vision.tower(weights, v, pix, rows_on_even_pairs=True).numpy()
        gap = relative(engine_rows(work, model, pix, "swap").reshape(swapped.shape), swapped)
        print(f"RoPE with rows on even pairs vs the engine: relative max |diff| {gap:.3g}")
        if not gap > 10 * TOLERANCE:
            failures.append(f"swapping the RoPE axes changes the tower output by only {gap:.3g}")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
