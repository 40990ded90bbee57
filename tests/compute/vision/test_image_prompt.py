#!/usr/bin/python3
# `sluice run --image` on K3-tiny against scripts/reference.py (f64 text model
# and vision tower, k3.md §4, §6) reading the same container: prompts whose
# media pad expands to an image's positions, for the three grids of §6 (4×6
# resizing the 8×8 position grid, from a 90×60 PNG resampled to 84×56; 8×8
# identity from a 112×112 BMP; 2×2 from a 20×20 TGA scaled up), two images in
# one prompt, and a one-token last prefill chunk that is a pad, then 8 greedy
# steps: logits agree to 1e-4 and greedy tokens are identical. A text prompt
# gets the media block in front (its token count checked against the
# tokenizer); a file that is not an image, a missing file and a model without
# a vision tower are refused naming the file or the model, exit 1, and leave
# no logits file behind.
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.environ["SLUICE_SOURCE_ROOT"]
# The reference computes f32 trunk activations: the engine is pinned to them (not its int8 default).
os.environ["SLUICE_TRUNK_ACTIVATIONS"] = "f32"
SLUICE = os.environ["SLUICE_BIN"]
PY = "/usr/bin/python3"
STEPS = 8
VOCAB = 512
PAD = 509
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import image_files  # noqa: E402
from test_reference_agreement import compare_logits  # noqa: E402


def run(*args, ok=True):
    result = subprocess.run(args, capture_output=True, text=True)
    if ok and result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(args)}\n{result.stdout}\n{result.stderr}")
    return result


def load(path):
    rows = np.fromfile(path, dtype="<f4")
    return rows.reshape(-1, VOCAB)


def agreement(work, model, name, prompt, images, failures, *extra):
    """images: (writer, width, height); the engine reads the files, the reference the arrays."""
    files, arrays = [], []
    for i, (writer, width, height) in enumerate(images):
        rgb = image_files.picture(width, height, seed=i + 3)
        path = os.path.join(work, f"{name}{i}.{writer.__name__[6:]}")
        writer(path, rgb)
        np.save(path + ".npy", rgb)
        files += ["--image", path]
        arrays += ["--image-rgb", path + ".npy"]
    ids = ",".join(map(str, prompt))
    ours_path, theirs_path = os.path.join(work, name + ".engine"), os.path.join(work, name + ".ref")
    summary = json.loads(run(SLUICE, "run", model, "--prompt-ids", ids, "-n", str(STEPS), "--temp", "0",
                             "--dump-logits", ours_path, "--json", *files, *extra).stdout)
    crossover = str(summary["kernels"]["rvq_decode_crossover"])
    run(PY, os.path.join(ROOT, "scripts/reference.py"), model, "--prompt-ids", ids, "-n", str(STEPS), "--temp", "0",
        "--dump-logits", theirs_path, "--decode-crossover", crossover, *arrays)
    ours, theirs = load(ours_path), load(theirs_path)
    if ours.shape != (STEPS + 1, VOCAB) or theirs.shape != ours.shape:
        failures.append(f"{name}: logits of shape {ours.shape} (engine) and {theirs.shape} (reference)")
        return summary
    print(f"{name}: {summary['prompt_tokens']} prompt tokens")
    compare_logits(name, ours, theirs, failures)
    return summary


def refused(name, args, must_name, failures, dump):
    result = run(SLUICE, "run", *args, "-n", "2", "--dump-logits", dump, ok=False)
    message = result.stderr.strip()
    print(f"{name}: exit {result.returncode}: {message}")
    if result.returncode != 1 or must_name not in message or len(message.splitlines()) != 1:
        failures.append(f"{name}: expected exit 1 and one line naming {must_name}, got {result.returncode}: {message}")
    if os.path.exists(dump):
        failures.append(f"{name}: a refused run left {dump}")


def check_plan(model, checkpoint, failures):
    """plan --images puts the tower in the floor: its stored weights and more (the
    activations); without --images the floor is the text model's, and the plan from
    config.json equals the container's either way."""
    def plan(*args):
        return json.loads(run(SLUICE, "plan", *args, "--ctx", "256", "--ram", "16G", "--json").stdout)
    text, images = plan(model), plan(model, "--images")
    config = os.path.join(checkpoint, "config.json")
    manifest = json.load(open(os.path.join(model, "manifest.json")))
    weights = sum(t["bytes"] + t["scale_bytes"] for t in manifest["trunk"]["tensors"]
                  if t["name"].startswith(("vision_tower.", "mm_projector.")))
    print(f"plan: floor {text['floor_bytes']} text only, {images['floor_bytes']} with images; "
          f"vision {images['vision_bytes']} (weights {weights})")
    if images["floor_bytes"] - text["floor_bytes"] != images["vision_bytes"] or images["vision_bytes"] <= weights:
        failures.append(f"plan --images: floor {images['floor_bytes']} vs {text['floor_bytes']}, vision "
                        f"{images['vision_bytes']}, stored tower weights {weights}")
    for args, ours in (((), text), (("--images",), images)):
        theirs = plan("--config", config, *args)
        differing = sorted(k for k in ours if theirs.get(k) != ours[k])
        if differing:
            failures.append(f"plan --config {' '.join(args)} differs from the container's in {differing}")


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="sluice-image-") as work:
        checkpoint, model = os.path.join(work, "k3"), os.path.join(work, "k3.sluice")
        run(PY, os.path.join(ROOT, "scripts/make_tiny_checkpoint.py"), "kimi_k3", checkpoint, "--seed", "7")
        run(SLUICE, "convert", checkpoint, model, "-q")
        text = [5, 17, 200, 3, 88, 41]
        agreement(work, model, "grid6x4", text[:3] + [PAD] + text[3:], [(image_files.write_png, 90, 60)], failures)
        s = agreement(work, model, "grid8x8", [PAD] + text, [(image_files.write_bmp, 112, 112)], failures)
        if s["prompt_tokens"] != 16 + len(text):
            failures.append(f"grid8x8: {s['prompt_tokens']} prompt tokens, expected 16 image positions + {len(text)}")
        agreement(work, model, "grid2x2", text + [PAD], [(image_files.write_tga, 20, 20)], failures)
        agreement(work, model, "two_images", [PAD] + text + [PAD],
                  [(image_files.write_png, 90, 60), (image_files.write_tga, 20, 20)], failures)
        # Chunks of 6: the 2×2 image's single position is the last chunk, alone.
        agreement(work, model, "pad_last_chunk", text + [PAD], [(image_files.write_tga, 20, 20)], failures,
                  "--chunk", "6")

        # A text prompt: the media block goes first, as markup.
        png = os.path.join(work, "grid6x40.png")
        summary = json.loads(run(SLUICE, "run", model, "hello", "-n", "1", "--json", "--image", png).stdout)
        begin = json.loads(run(SLUICE, "tokenize", model, "--specials", "--json",
                               "<|media_begin|>image 90x60<|media_content|>").stdout)["ids"]
        end = json.loads(run(SLUICE, "tokenize", model, "--specials", "--json", "<|media_end|>").stdout)["ids"]
        hello = json.loads(run(SLUICE, "tokenize", model, "--json", "hello").stdout)["ids"]
        expected = len(begin) + 6 + len(end) + len(hello)
        print(f"text prompt with an image: {summary['prompt_tokens']} prompt tokens (expected {expected})")
        if summary["prompt_tokens"] != expected:
            failures.append(f"a text prompt with a 6x4-grid image has {summary['prompt_tokens']} tokens, not {expected}")

        check_plan(model, checkpoint, failures)

        dump = os.path.join(work, "refused.logits")
        not_image = os.path.join(work, "notes.png")
        with open(not_image, "w") as f:
            f.write("these are notes, not pixels\n")
        refused("not an image", [model, "--prompt-ids", f"5,{PAD}", "--image", not_image], not_image, failures, dump)
        missing = os.path.join(work, "absent.jpg")
        refused("missing file", [model, "--prompt-ids", f"5,{PAD}", "--image", missing], missing, failures, dump)
        refused("pads and images differ", [model, "--prompt-ids", f"{PAD},5,{PAD}", "--image", png], "media pad",
                failures, dump)
        # The same checkpoint without its vision_config: the converter skips the tower.
        with open(os.path.join(checkpoint, "config.json")) as f:
            config = json.load(f)
        del config["vision_config"]
        with open(os.path.join(checkpoint, "config.json"), "w") as f:
            json.dump(config, f)
        text_only = os.path.join(work, "k3_text.sluice")
        converted = json.loads(run(SLUICE, "convert", checkpoint, text_only, "-q", "--json").stdout)
        if converted.get("skipped_vision_tensors") != 18:
            failures.append(f"text-only conversion skipped {converted.get('skipped_vision_tensors')} vision tensors, not 18")
        refused("no vision tower", [text_only, "--prompt-ids", f"5,{PAD}", "--image", png], text_only, failures, dump)
        result = run(SLUICE, "plan", text_only, "--images", ok=False)
        if result.returncode != 1 or "vision" not in result.stderr:
            failures.append(f"plan --images of a model without a tower: exit {result.returncode}: {result.stderr}")
        info = run(SLUICE, "info", model).stdout + run(SLUICE, "info", text_only).stdout
        vision_lines = [line for line in info.splitlines() if line.startswith("vision ")]
        print("\n".join(vision_lines))
        if len(vision_lines) != 2 or "present" not in vision_lines[0] or "none" not in vision_lines[1]:
            failures.append(f"sluice info does not say whether vision is present: {vision_lines}")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
