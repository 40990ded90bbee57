#!/usr/bin/python3
# Kimi K3-tiny (k3.md §6) against the f64 reference (scripts/sluicepy/k3.py) on the
# same container: logits after a 16-token prompt and 8 greedy steps agree to 1e-4,
# greedy tokens are identical, and the routed expert ids of every MoE layer are equal
# with weights equal to f32 rounding (the latent norm cancels common factors, so the
# logits alone could not tell). Attention Residuals' edge cases: block sizes that put
# a boundary at every layer, leave a partial last block, or store only the embedding;
# and the final mixture matters (the reference without it is far from the engine).
# SiTU in saturation (β = 1, β_L = 2). Also the MXFP4 sources: the same agreement,
# and a checkpoint whose scales were misread is refused naming the tensor.
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_reference_agreement import TOLERANCE, compare_logits  # noqa: E402

ROOT = os.environ["SLUICE_SOURCE_ROOT"]
# The reference computes f32 trunk activations: the engine is pinned to them (not its int8 default).
os.environ["SLUICE_TRUNK_ACTIVATIONS"] = "f32"
SLUICE = os.environ["SLUICE_BIN"]
PY = "/usr/bin/python3"
PROMPT = [5, 17, 200, 3, 88, 41, 9, 300, 12, 77, 150, 6, 250, 33, 101, 64]
STEPS = 8
WEIGHT_TOLERANCE = 1e-5
VOCAB = 512
IDS = ",".join(map(str, PROMPT))


def run(*args, ok=True):
    result = subprocess.run(args, capture_output=True, text=True)
    if ok and result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(args)}\n{result.stdout}\n{result.stderr}")
    return result


def load(path):
    rows = np.fromfile(path, dtype="<f4")
    assert rows.size == (STEPS + 1) * VOCAB, f"{path}: {rows.size} floats, expected {(STEPS + 1) * VOCAB}"
    return rows.reshape(STEPS + 1, VOCAB)


def read_trace(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def convert(work, name, *variant):
    checkpoint, container = os.path.join(work, name), os.path.join(work, name + ".sluice")
    run(PY, os.path.join(ROOT, "scripts/make_tiny_checkpoint.py"), "kimi_k3", checkpoint, "--seed", "7", *variant)
    run(SLUICE, "convert", checkpoint, container, "-q")
    return checkpoint, container


def engine(container, out, trace=None):
    """The engine's logits and the reference flags that model its table/decode-once choice."""
    extra = ["--trace-out", trace] if trace else []
    result = run(SLUICE, "run", container, "--prompt-ids", IDS, "-n", str(STEPS), "--temp", "0", "--dump-logits", out,
                 "--json", *extra)
    crossover = json.loads(result.stdout)["kernels"]["rvq_decode_crossover"]
    return load(out), ["--decode-crossover", str(crossover)]


def reference(container, out, *extra):
    run(PY, os.path.join(ROOT, "scripts/reference.py"), container, "--prompt-ids", IDS, "-n", str(STEPS),
        "--temp", "0", "--dump-logits", out, *extra)
    return load(out)


def compare_routing(name, ours, theirs, failures):
    """Expert ids equal in routing order; weights equal to f32 rounding."""
    if [r["tok"] for r in ours] != [r["tok"] for r in theirs]:
        failures.append(f"{name}: the traces cover different tokens")
        return
    worst = 0.0
    for a, b in zip(ours, theirs):
        if a["layers"] != b["layers"]:
            failures.append(f"{name}: token {a['tok']}: routed experts {a['layers']} vs reference {b['layers']}")
            return
        if "weights" not in a:
            failures.append(f"{name}: the engine's trace has no routing weights")
            return
        worst = max(worst, float(np.max(np.abs(np.array(a["weights"]) - np.array(b["weights"])))))
    print(f"{name}: routed ids equal over {len(ours)} tokens, max |weight diff| {worst:.3g}")
    if not worst <= WEIGHT_TOLERANCE:
        failures.append(f"{name}: routing weights differ by {worst:.3g} > {WEIGHT_TOLERANCE}")


def check(work, name, failures, *variant, routing=False, final_mixture=False):
    checkpoint, container = convert(work, name, *variant)
    trace = os.path.join(work, name + ".trace") if routing else None
    ours, as_engine = engine(container, os.path.join(work, name + ".engine"), trace)
    ref_trace = os.path.join(work, name + ".ref.trace")
    theirs = reference(container, os.path.join(work, name + ".ref"), *as_engine,
                       *(["--trace-out", ref_trace] if routing else []))
    compare_logits(name, ours, theirs, failures)
    if routing:
        compare_routing(name, read_trace(trace), read_trace(ref_trace), failures)
    if final_mixture:
        # Row 0 (after the prompt) is fed the same tokens in both runs.
        skipped = reference(container, os.path.join(work, name + ".skip"), *as_engine, "--skip-final-mixture")
        gap = float(np.max(np.abs(ours[0] - skipped[0])))
        print(f"{name}: engine vs reference without the final mixture: max |diff| {gap:.3g} (row 0)")
        if not gap > 100 * TOLERANCE:
            failures.append(f"{name}: skipping the final AttnRes mixture changes the logits by only {gap:.3g}")
    return checkpoint, container


def check_misread_scales(work, checkpoint, failures):
    """A row whose nibbles all read 0.5 (what a scale off by a factor of 8 would
    leave) breaks the quantiser's guarantee and is refused naming tensor and row."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from sluicepy import families, safetensors
    bad = os.path.join(work, "k3_mxfp4_bad")
    os.makedirs(bad, exist_ok=True)
    tensors = safetensors.load_checkpoint(checkpoint)
    with open(os.path.join(checkpoint, "config.json")) as f:
        config = f.read()
    packed = next(n for n in tensors if n.endswith("experts.0.w2.weight_packed"))
    tensors[packed] = tensors[packed].copy()
    tensors[packed][0] = 0x11
    dtypes = {n: ("U8" if v.dtype == np.uint8 else "F32" if families.is_f32_tensor(n) else "BF16")
              for n, v in tensors.items()}
    safetensors.save_checkpoint(bad, tensors, dtypes)
    with open(os.path.join(bad, "config.json"), "w") as f:
        f.write(config)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(checkpoint, name), bad)
    result = run(SLUICE, "convert", bad, bad + ".sluice", "-q", ok=False)
    message = result.stderr.strip()
    print(f"misread MXFP4 scales: exit {result.returncode}: {message[-200:]}")
    weight = packed.replace("_packed", "")
    if result.returncode == 0 or weight not in message or "row 0" not in message:
        failures.append(f"an MXFP4 group whose largest nibble is 0.5 was not refused naming {weight} and row 0")
    if os.path.exists(os.path.join(bad + ".sluice", "manifest.json")):
        failures.append("a refused MXFP4 checkpoint left a finished container")


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="sluice-k3-") as work:
        check(work, "k3", failures, routing=True, final_mixture=True)
        # AttnRes block boundaries: every layer (4 stored blocks before the last
        # layer's FFN), 2 (a full last block), 4 (only the embedding is stored).
        for size in (1, 2, 4):
            check(work, f"k3_block{size}", failures, "--set", f"text_config.attn_res_block_size={size}")
        # SiTU in saturation: both tanh halves bend.
        check(work, "k3_situ_saturated", failures, "--set", "text_config.activation_situ_beta=1",
              "--set", "text_config.activation_situ_linear_beta=2", routing=True)
        mx_checkpoint, _ = check(work, "k3_mxfp4", failures, "--mxfp4", routing=True)
        check_misread_scales(work, mx_checkpoint, failures)
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
