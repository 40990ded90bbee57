#!/usr/bin/python3
# scripts/reference.py: the PyTorch f32 reference run of a Hugging Face
# checkpoint or a sluice container (decoded by sluicepy.container, so it uses the
# engine's quantized weights), Kimi K3 with images. Prints and dumps; never asserts anything itself.
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicepy import SluiceError, container, families, k3, mla, mxfp4, routing, safetensors, vision  # noqa: E402
from sluicepy.int8_activations import with_int8_activations  # noqa: E402
from sluicepy.models import MoeModel  # noqa: E402
from sluicepy.rvq_tables import ContainerExperts  # noqa: E402

_DESCRIPTION = """\
Run OLMoE / Qwen3-MoE / DeepSeek-V3 / Kimi K2 / Mixtral / Kimi-Linear in f32 (Kimi K3 in
f64, sluicepy/k3.py, its vision tower sluicepy/vision.py with --image-rgb) from the
published equations and dump logits. A checkpoint's fp8 weights are dequantized
by their block scales; a container's weights are the engine's quantized ones.
Missing config keys take the Hugging Face class defaults (sluicepy/families.py).
A container's experts run the engine's integer table arithmetic
(sluicepy/rvq_tables.py) unless --f32-experts; its q8/q4 trunk matrices take
f32 inputs, or with --int8-activations the engine's int8 activations
(SLUICE_TRUNK_ACTIVATIONS=int8, sluicepy/int8_activations.py).

Logits rows (raw little-endian float32, vocab_size values per row, 1 + N rows):
  row 0      logits at the prompt's last position;
  row i>=1   logits after feeding the i-th generated token.
Generated token i is chosen from row i-1: greedy (--temp 0) takes the lowest
id among equal maxima; --temp T>0 samples softmax(row/T) with a torch generator
seeded by --seed (not the engine's sampler; compare logits at --temp 0 only).
Routing ties go to the lower expert id. --forced-tokens feeds given tokens
instead of choosing them (teacher forcing) and --forced-routing takes each MoE
layer's experts from another run's trace (the weights still come from this
run's router): together they compare two runs row by row on the same inputs,
whatever near-tie either would break differently. MLA runs in its expanded
form (full keys and values per head, as HF caches) unless --mla absorbed. Kimi-Linear's
KDA runs token by token in f64 (the oracle) unless --kda-chunk N; its routed
expert weights follow the config's sluice_moe_weights ("biased", the default:
the released modeling code; "unbiased": vLLM) unless --moe-weights overrides it.
"""


def is_container(path):
    return os.path.isdir(path) and (path.rstrip("/").endswith(".sluice")
                                    or os.path.exists(os.path.join(path, "manifest.json")))


def load_weights(path):
    """(config, HF-named f32 numpy weights) of a checkpoint dir or a container."""
    if is_container(path):
        c = container.Container(path)
        return c.config, c.state_dict()
    config_path = os.path.join(path, "config.json")
    if not os.path.exists(config_path):
        raise SluiceError(f"{path}: neither a sluice container nor a checkpoint with config.json")
    with open(config_path) as f:
        config = json.load(f)
    return config, mxfp4.decode_weights(safetensors.load_checkpoint(path))  # K3's MXFP4 experts as f32


def build_model(config, weights, mla_form=mla.EXPANDED, exclusion=routing.EXCLUDE_ZERO, kda_chunk=None,
                moe_weights=None, skip_final_mixture=False):
    """The family's model; Kimi K3 is its own (sluicepy/k3.py), the others MoeModel."""
    if k3.is_k3(config):
        if moe_weights is not None or mla_form != mla.EXPANDED:
            raise SluiceError("--moe-weights and --mla absorbed do not apply to Kimi K3")
        return k3.K3Model(config, weights, kda_chunk, skip_final_mixture)
    if skip_final_mixture:
        raise SluiceError("--skip-final-mixture applies to Kimi K3 only")
    return MoeModel(config, weights, mla_form, exclusion, kda_chunk=kda_chunk, moe_weights=moe_weights)


def with_engine_experts(model, path, f32_experts=False, decode_crossover=None, int8_activations=False):
    """A container's experts run the engine's integer table arithmetic (rvq.h)
    unless f32_experts asks for f32 matmuls on the decoded weights; an expert
    that decode_crossover or more tokens of one call chose runs the engine's
    decode-once arithmetic (rvq_decoded.h) instead. With int8_activations its
    quantized trunk matrices take int8 activations (quant.h), its tables int8
    codes, and decode-once experts of rvq_tables.INT8_TILES_FROM or more tokens
    the int8 tiles' arithmetic."""
    if not is_container(path):
        return model
    c = container.Container(path)
    if not f32_experts:
        model.expert_apply = ContainerExperts(c, decode_crossover, activation=getattr(model, "expert_activation", None),
                                              int8_activations=int8_activations)
    if int8_activations:
        with_int8_activations(model, {name: t["format"] for name, t in c.trunk.items()})
    return model


def teacher_forced(model, prompt, tokens):
    """Logits rows of `prompt + tokens` from the prompt's last position on."""
    with torch.no_grad():
        return model.forward(prompt + tokens, model.new_cache())[len(prompt) - 1:]


def logit_cost(logits, ref):
    diff = (logits - ref).abs()
    return {"top1_agreement": float((logits.argmax(-1) == ref.argmax(-1)).float().mean()),
            "max_abs_logit_error": float(diff.max()), "mean_abs_logit_error": float(diff.mean())}


def with_images(config, weights, prompt, images):
    """Kimi K3: each media pad of `prompt` (one per image, in order) expanded to its
    image's positions, and the projector rows that are their input embeddings."""
    pad = config.get("media_placeholder_token_id")
    if not k3.is_k3(config) or "vision_config" not in config:
        raise SluiceError("--image-rgb: the model has no vision tower")
    if prompt.count(pad) != len(images):
        raise SluiceError(f"--image-rgb: the prompt has {prompt.count(pad)} media pads (id {pad}) "
                          f"for {len(images)} images")
    v, expanded, rows = config["vision_config"], [], []
    for token in prompt:
        if token != pad:
            expanded.append(token)
            continue
        pixels, _ = vision.preprocess(images[len(rows)], patch=v["patch_size"])
        rows.append(vision.tower(weights, v, pixels))
        expanded += [pad] * rows[-1].shape[0]
    return expanded, torch.cat(rows)


def generate(model, prompt, steps, temp=0.0, seed=0, use_cache=True, routes=None, media_rows=None,
             forced_tokens=None):
    """Returns (logits [1 + steps, vocab], generated token ids); `forced_tokens`, when
    a list of `steps` ids, are fed as the generated tokens. `routes`, when a
    list, receives one {"tok": position, "layers": [[expert ids], ...]} per token fed
    (the layout of `sluice run --trace-out`; needs the cache). `media_rows`: the
    prompt's image rows (K3)."""
    if routes is not None and not use_cache:
        raise SluiceError("--trace-out needs the KV cache (drop --no-kv-cache)")
    if media_rows is not None and not use_cache:
        raise SluiceError("--image-rgb needs the KV cache (drop --no-kv-cache)")
    generator = torch.Generator().manual_seed(seed)
    cache = model.new_cache()

    def feed(ids, media=None):
        start, trace = cache.length, None if routes is None else []
        logits = model.forward(ids, cache, trace) if media is None else model.forward(ids, cache, trace, media)
        if trace is not None:
            routes.extend({"tok": start + t, "layers": [chosen[t].tolist() for _, chosen, _ in trace],
                           "weights": [weights[t].tolist() for _, _, weights in trace]}
                          for t in range(len(ids)))
        return logits

    with torch.no_grad():
        rows = [feed(prompt, media_rows)[-1]]
        tokens = []
        for _ in range(steps):
            last = rows[-1]
            if forced_tokens is not None:
                token = forced_tokens[len(tokens)]
            elif temp > 0:
                token = int(torch.multinomial(torch.softmax(last / temp, dim=-1), 1, generator=generator))
            else:
                token = int(torch.argmax(last))  # first index among equal maxima
            tokens.append(token)
            if use_cache:
                rows.append(feed([token])[-1])
            else:
                rows.append(model.forward(prompt + tokens, model.new_cache())[-1])
    return torch.stack(rows), tokens


def parse_ids(text, flag):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SluiceError(f"{flag} {text!r}: expected comma-separated integers") from None


def moe_layer_indices(model):
    is_moe = k3.is_moe_layer if k3.is_k3(model.config) else families.is_moe_layer
    return [i for i in range(model.layers) if is_moe(model.config, i)]


def read_forced_routing(model, path):
    """A routing.ForcedRouting from a trace file (the JSON lines of --trace-out)."""
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        raise SluiceError(f"--forced-routing {path}: {e}") from None
    return routing.ForcedRouting(rows, moe_layer_indices(model))


def relative_errors(quantized, original):
    """Frobenius ||Q - W|| / ||W|| summarised per expert matrix kind and trunk format."""
    groups = {}
    for name, q in quantized.items():
        w = original.get(name)
        if w is None:
            raise SluiceError(f"--compare: the checkpoint lacks tensor {name} that the container holds")
        # The container may store a tensor in another shape of the same values (K3's patch kernel as rows).
        q, w = np.asarray(q).reshape(-1), np.asarray(w).reshape(-1)
        if q.size != w.size:
            raise SluiceError(f"--compare: tensor {name} has {q.size} values in the container, {w.size} in the checkpoint")
        err = float(np.linalg.norm(q - w) / max(np.linalg.norm(w), 1e-30))
        kind = name.rsplit(".", 2)[-2] if ".experts." in name else "trunk:" + name.split(".")[-2]
        groups.setdefault(kind, []).append(err)
    return {k: {"mean": float(np.mean(v)), "max": float(np.max(v)), "count": len(v)}
            for k, v in sorted(groups.items())}


def compare(model_path, hf_dir, prompt, steps, **options):
    """Quantization cost: the container's greedy run against the original
    weights teacher-forced on the same tokens."""
    if not is_container(model_path):
        raise SluiceError(f"--compare: {model_path} is not a sluice container")
    qconfig, qweights = load_weights(model_path)
    config, weights = load_weights(hf_dir)
    q_logits, tokens = generate(with_engine_experts(build_model(qconfig, qweights, **options), model_path), prompt, steps)
    ref = teacher_forced(build_model(config, weights, **options), prompt, tokens)
    # What the integer arithmetic alone costs: f32 matmuls on the same decoded weights.
    f32_experts = teacher_forced(build_model(qconfig, qweights, **options), prompt, tokens)
    diff = (q_logits - ref).abs()
    return {"tokens": tokens, "rows": int(ref.shape[0]),
            "top1_agreement": float((q_logits.argmax(-1) == ref.argmax(-1)).float().mean()),
            "max_abs_logit_error": float(diff.max()), "mean_abs_logit_error": float(diff.mean()),
            "logit_scale": float(ref.abs().mean()),
            "integer_kernels_vs_f32": logit_cost(q_logits, f32_experts),
            "relative_weight_error": relative_errors(qweights, weights)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint directory or MODEL.sluice container")
    parser.add_argument("--prompt-ids", required=True, help="comma-separated token ids, e.g. 1,2,3")
    parser.add_argument("-n", type=int, help="decode steps N (logits rows = 1 + N; default 0)")
    parser.add_argument("--dump-logits", metavar="FILE", help="write the logits rows as raw f32")
    parser.add_argument("--temp", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help='print {"tokens": [...]} instead of ids')
    parser.add_argument("--no-kv-cache", action="store_true",
                        help="recompute the whole sequence at every step (checks the cache)")
    parser.add_argument("--trace-out", metavar="FILE",
                        help="write the routing as JSON lines, one per token fed: "
                             '{"tok": N, "layers": [[expert ids, largest weight first], ...], '
                             '"weights": [[their routing weights], ...]} (as sluice run)')
    parser.add_argument("--forced-tokens", metavar="IDS",
                        help="comma-separated ids fed as the N generated tokens instead of choosing them "
                             "(teacher forcing; N is their count, -n must be absent or equal)")
    parser.add_argument("--forced-routing", metavar="FILE",
                        help="take every token's experts from a trace (sluice run --trace-out, or this "
                             "script's) instead of choosing them; their weights still come from the router")
    parser.add_argument("--mla", choices=mla.FORMS, default=mla.EXPANDED,
                        help="DeepSeek/K2 attention form (both give the same logits up to rounding)")
    parser.add_argument("--group-exclusion", choices=routing.EXCLUSIONS, default=routing.EXCLUDE_ZERO,
                        help="DeepSeek/K2 routing: score of experts in unkept groups before the final top-k "
                             "(zero: the released HF code; neg-inf: DeepSeek's inference script)")
    parser.add_argument("--kda-chunk", type=int, metavar="N",
                        help="Kimi-Linear: run KDA in the chunked form of chunk N instead of token by token")
    parser.add_argument("--moe-weights", choices=families.MOE_WEIGHTS,
                        help=f"Kimi-Linear: override the config's {families.MOE_WEIGHTS_KEY} (expert weights from "
                             "the biased scores s + bias, or from the plain sigmoid s)")
    parser.add_argument("--skip-final-mixture", action="store_true",
                        help="Kimi K3: read the last partial sum instead of the output AttnRes mixture "
                             "(a wrong model: for the test that must tell the difference)")
    parser.add_argument("--f32-experts", action="store_true",
                        help="a container's experts as f32 matmuls on the decoded weights "
                             "instead of the engine's integer table kernels (int8 table codes)")
    parser.add_argument("--int8-activations", action="store_true",
                        help="a container's q8/q4 trunk matrices take the engine's int8 activations instead of f32 "
                             "inputs (when `sluice run --json` reports kernels.trunk_activations int8)")
    parser.add_argument("--decode-crossover", type=int, metavar="N",
                        help="a container's expert chosen by N or more tokens of a prefill chunk runs the "
                             "decode-once arithmetic, as the engine does from its rvq_decode_crossover "
                             "(`sluice run --json` reports it); default: tables only")
    parser.add_argument("--image-rgb", metavar="FILE.npy", action="append", default=[],
                        help="Kimi K3: an image as a uint8 [H, W, 3] numpy array, preprocessed and encoded by "
                             "the oracle's tower; each media pad id of the prompt (one per image, in order) "
                             "expands to its positions (repeatable)")
    parser.add_argument("--compare", metavar="HF_DIR",
                        help="MODEL is a container: run it greedily, run HF_DIR teacher-forced on the same "
                             "tokens, print JSON with top-1 agreement, max/mean abs logit error and "
                             "per-matrix relative weight error")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        prompt = parse_ids(args.prompt_ids, "--prompt-ids")
        forced_tokens = None
        if args.forced_tokens is not None:
            forced_tokens = parse_ids(args.forced_tokens, "--forced-tokens")
            if args.n is not None and args.n != len(forced_tokens):
                raise SluiceError(f"--forced-tokens has {len(forced_tokens)} ids but -n is {args.n}")
            args.n = len(forced_tokens)
        if args.n is None:
            args.n = 0
        if not prompt or args.n < 0:
            raise SluiceError("--prompt-ids needs at least one id and -n must be >= 0")
        if args.kda_chunk is not None and args.kda_chunk < 1:
            raise SluiceError(f"--kda-chunk {args.kda_chunk}: the chunk size must be >= 1")
        if args.decode_crossover is not None and args.decode_crossover < 1:
            raise SluiceError(f"--decode-crossover {args.decode_crossover}: expected a token count >= 1")
        options = {"mla_form": args.mla, "exclusion": args.group_exclusion, "kda_chunk": args.kda_chunk,
                   "moe_weights": args.moe_weights, "skip_final_mixture": args.skip_final_mixture}
        if args.compare:
            print(json.dumps(compare(args.model, args.compare, prompt, args.n, **options), indent=2))
            return 0
        config, weights = load_weights(args.model)
        routes = [] if args.trace_out else None
        model = with_engine_experts(build_model(config, weights, **options), args.model, args.f32_experts,
                                    args.decode_crossover, args.int8_activations)
        if args.forced_routing:
            model.forced_routing = read_forced_routing(model, args.forced_routing)
        media_rows = None
        if args.image_rgb:
            prompt, media_rows = with_images(config, weights, prompt, [np.load(f) for f in args.image_rgb])
        logits, tokens = generate(model, prompt, args.n, args.temp, args.seed, not args.no_kv_cache, routes,
                                  media_rows, forced_tokens)
        if args.trace_out:
            with open(args.trace_out, "w") as f:
                f.writelines(json.dumps(row) + "\n" for row in routes)
        if args.dump_logits:
            logits.numpy().astype("<f4").tofile(args.dump_logits)
        print(json.dumps({"tokens": tokens}) if args.json else ",".join(map(str, tokens)))
    except SluiceError as e:
        print(f"reference: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
