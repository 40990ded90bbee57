#!/usr/bin/python3
# The engine against the PyTorch reference on every config variant of
# sluicepy/config_variants.py (one math-changing key set or dropped, as
# proto/families/README.md's audit lists them): after sluice convert, the f32
# engine's logits (a 16-token prompt, then greedy steps) agree with
# scripts/reference.py's to 1e-4 and the greedy tokens are identical. Each
# variant also differs from its family's base checkpoint by more than that bar
# (so a key read wrongly on one side is caught), or, where the key's absent
# default equals the tiny config's value, gives the base's logits bit for bit.
# The reference and the checkpoint writer run in this process (one torch import).
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.environ["SLUICE_SOURCE_ROOT"]
SLUICE = os.environ["SLUICE_BIN"]
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_tiny_checkpoint  # noqa: E402
import reference  # noqa: E402
from sluicepy import config_variants  # noqa: E402

PROMPT = [5, 17, 200, 3, 88, 41, 9, 300, 12, 77, 150, 6, 250, 33, 101, 64]
STEPS = 3
TOLERANCE = 1e-4
# Variants whose key, set or dropped, leaves the tiny config's math as it was:
# the class default (or transformers' reading of 0) equals the tiny value.
SAME_AS_BASE = {
    "olmoe": {"rms_norm_eps_absent", "rope_theta_absent", "norm_topk_prob_absent", "norm_topk_prob_false"},
    "qwen3_moe": {"rms_norm_eps_absent", "norm_topk_prob_true"},
    "mixtral": {"rms_norm_eps_absent", "rope_theta_absent"},
    "deepseek_v3": {"rms_norm_eps_absent", "rope_theta_absent", "norm_topk_prob_absent", "norm_topk_prob_true",
                    "yarn_betas_zero"},
    # K2's betas are 1 and 1: one correction dim, whose floor/ceil ramp and 0.001-wide ramp agree.
    "kimi_k2": {"yarn_no_truncate"},
    "kimi_linear": set(),
}


def run(*args, env=None):
    result = subprocess.run(args, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(args)}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def in_process(main, *args):
    """Runs a script's main(argv) here, its stdout kept; exits on failure."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(args))
    if status != 0:
        sys.exit(f"FAILED: {main.__module__} {' '.join(args)}")
    return out.getvalue()


def logits_of(family, variant, work):
    """(engine, reference) logit rows [STEPS + 1, vocab] of the tiny checkpoint's `variant` (None: the base)."""
    name = f"{family}.{variant or 'base'}"
    checkpoint, container = os.path.join(work, name), os.path.join(work, name + ".sluice")
    in_process(make_tiny_checkpoint.main, family, checkpoint, "--seed", "7",
               *(["--variant", variant] if variant else []))
    run(SLUICE, "convert", checkpoint, container, "-q")
    env = dict(os.environ, SLUICE_TRUNK_ACTIVATIONS="f32")
    summary = json.loads(run(SLUICE, "run", container, "--prompt-ids", ",".join(map(str, PROMPT)), "-n", str(STEPS),
                             "--temp", "0", "--dump-logits", os.path.join(work, name + ".engine"), "--json", env=env))
    in_process(reference.main, container, "--prompt-ids", ",".join(map(str, PROMPT)), "-n", str(STEPS), "--temp", "0",
               "--dump-logits", os.path.join(work, name + ".ref"), "--decode-crossover",
               str(summary["kernels"]["rvq_decode_crossover"]))
    vocab = json.load(open(os.path.join(checkpoint, "config.json")))["vocab_size"]
    rows = [np.fromfile(os.path.join(work, name + suffix), dtype="<f4") for suffix in (".engine", ".ref")]
    for r in rows:
        assert r.size == (STEPS + 1) * vocab, f"{name}: {r.size} logits, expected {(STEPS + 1) * vocab}"
    return [r.reshape(STEPS + 1, vocab) for r in rows]


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="sluice-variants-") as work:
        for family, same_as_base in SAME_AS_BASE.items():
            base, _ = logits_of(family, None, work)
            for variant in config_variants.names(family):
                ours, theirs = logits_of(family, variant, work)
                diff = float(np.max(np.abs(ours - theirs)))
                same_tokens = bool(np.array_equal(ours[:-1].argmax(1), theirs[:-1].argmax(1)))
                moved = float(np.max(np.abs(ours - base)))
                print(f"{family} {variant}: engine vs reference max |diff| {diff:.3g}, greedy tokens identical: "
                      f"{same_tokens}; vs the base checkpoint {moved:.3g}")
                if not diff <= TOLERANCE:
                    failures.append(f"{family} {variant}: engine and reference differ by {diff:.3g} > {TOLERANCE}")
                if not same_tokens:
                    failures.append(f"{family} {variant}: greedy tokens differ")
                if variant in same_as_base and moved != 0.0:
                    failures.append(f"{family} {variant}: the class default should leave the base's logits, "
                                    f"they moved by {moved:.3g}")
                if variant not in same_as_base and not moved > 2 * TOLERANCE:
                    failures.append(f"{family} {variant}: moves the logits only {moved:.3g} from the base, "
                                    "too little for the comparison to tell a key read wrongly")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
