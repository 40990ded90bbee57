#!/usr/bin/python3
# scripts/train_demo.py: trains the demo's tiny OLMoE (scripts/demo_model/) on
# Jane Austen's novels and measures its perplexity on held-out text. It trains
# with sluicepy.models' forward, the one the engine is checked against; it never
# touches the engine or the network beyond `apt-get download` of two packages.
#
# Text: Jane Austen's six novels (1811-1818, public domain: the author died in
# 1817), as shipped by the Debian package r-cran-janeaustenr (the R packaging is
# MIT-licensed, see /usr/share/doc/r-cran-janeaustenr/copyright; its text comes
# from Project Gutenberg). Five novels train the tokenizer and the model;
# "Persuasion" is held out and its opening chapters are the evaluation text.
import argparse
import gzip
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
import torch

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
from sluicepy import SluiceError, bpe, families, safetensors  # noqa: E402
from sluicepy.models import MoeModel  # noqa: E402
import reference  # noqa: E402

DEFAULT_OUT = os.path.join(SCRIPTS, "demo_model")
AUSTEN_PACKAGE = "r-cran-janeaustenr"
AUSTEN_DATA = "usr/lib/R/site-library/janeaustenr/data"
HELD_OUT_NOVEL = "persuasion"
HELD_OUT_CHARS = 24000
OPENBLAS_PACKAGE = "libopenblas0-pthread"
OPENBLAS_DIR = "usr/lib/x86_64-linux-gnu/openblas-pthread"

CONFIG = {
    "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe",
    "vocab_size": 2048, "hidden_size": 128, "intermediate_size": 96,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
    "hidden_act": "silu", "max_position_embeddings": 256, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
    "clip_qkv": None, "num_experts": 16, "num_experts_per_tok": 2,
    "norm_topk_prob": False, "tie_word_embeddings": False, "router_aux_loss_coef": 0.01,
    "bos_token_id": None, "eos_token_id": 2, "pad_token_id": 1, "torch_dtype": "bfloat16",
}


# --- the corpus -------------------------------------------------------------

class _RUnserializer:
    """The subset of R's XDR serialization (format 2/3) the package's lazy-load
    database uses: character vectors, lists and their attributes."""

    _NIL_LIKE = {254, 253, 252, 251, 242, 241}  # NULL, environments, missing

    def __init__(self, data, where):
        self.data, self.at, self.where, self.refs = data, 0, where, []

    def _int(self):
        if self.at + 4 > len(self.data):
            raise SluiceError(f"{self.where}: truncated R serialization at byte {self.at}")
        value = struct.unpack_from(">i", self.data, self.at)[0]
        self.at += 4
        return value

    def _take(self, count):
        if count < 0 or self.at + count > len(self.data):
            raise SluiceError(f"{self.where}: R item of {count} bytes runs past the end")
        chunk = self.data[self.at:self.at + count]
        self.at += count
        return chunk

    def _attributes(self, flags):
        return dict(self.item()) if flags & (1 << 9) else {}

    def item(self):
        flags = self._int()
        kind = flags & 0xFF
        if kind in self._NIL_LIKE:
            return None
        if kind == 255:  # reference to an earlier symbol
            index = (flags >> 8) - 1
            if not 0 <= index < len(self.refs):
                raise SluiceError(f"{self.where}: R reference {index} out of range")
            return self.refs[index]
        if kind == 1:  # symbol
            self.refs.append(self.item())
            return self.refs[-1]
        if kind == 2:  # pairlist: [(tag, value), ...]
            self._attributes(flags)  # a pairlist's own attributes: read past them
            tag = self.item() if flags & (1 << 10) else None
            head = self.item()
            return [(tag, head)] + (self.item() or [])
        if kind == 9:  # one string
            length = self._int()
            return None if length == -1 else self._take(length).decode("utf-8", errors="replace")
        if kind in (16, 19):  # character vector, list
            values = [self.item() for _ in range(self._int())]
        elif kind in (10, 13):
            count = self._int()
            values = list(struct.unpack(f">{count}i", self._take(4 * count)))
        elif kind == 14:
            count = self._int()
            values = list(struct.unpack(f">{count}d", self._take(8 * count)))
        else:
            raise SluiceError(f"{self.where}: R type {kind} is not one this reader knows")
        names = self._attributes(flags).get("names")
        return dict(zip(names, values)) if names else values

    def top(self):
        if self._take(2) != b"X\n":
            raise SluiceError(f"{self.where}: not an XDR R serialization")
        version = self._int()
        self._int(), self._int()
        if version == 3:
            self._take(self._int())  # native encoding name
        return self.item()


def _austen_data_dir(work):
    installed = os.path.join("/", AUSTEN_DATA)
    if os.path.isdir(installed):
        return installed
    return os.path.join(_unpacked_package(AUSTEN_PACKAGE, work), AUSTEN_DATA)


def _unpacked_package(package, work):
    """The package's files under work/package (apt-get download + dpkg -x; installs nothing)."""
    target = os.path.join(work, package)
    if not os.path.isdir(target):
        download = tempfile.mkdtemp(dir=work)
        result = subprocess.run(["apt-get", "download", package], cwd=download, capture_output=True, text=True)
        debs = [f for f in os.listdir(download) if f.endswith(".deb")]
        if result.returncode != 0 or not debs:
            raise SluiceError(f"apt-get download {package} failed: {result.stderr.strip()}")
        subprocess.run(["dpkg", "-x", os.path.join(download, debs[0]), target + ".part"], check=True)
        os.rename(target + ".part", target)
        shutil.rmtree(download)
    return target


def austen_novels(work):
    """{novel name: list of lines} read from the package's R data files."""
    data = _austen_data_dir(work)
    index_path = os.path.join(data, "Rdata.rdx")
    index = _RUnserializer(gzip.decompress(open(index_path, "rb").read()), index_path).top()
    db_path = os.path.join(data, "Rdata.rdb")
    db = open(db_path, "rb").read()
    novels = {}
    for name, (offset, length) in index["variables"].items():
        if offset < 0 or length < 5 or offset + length > len(db):
            raise SluiceError(f"{db_path}: entry {name} ({offset}+{length}) lies outside the file")
        novels[name] = _RUnserializer(zlib.decompress(db[offset + 4:offset + length]), db_path).top()
    return novels


_HEADING = re.compile(r"(chapter|volume)\s+\w+\.?$", re.IGNORECASE)


def paragraphs(lines):
    """Prose paragraphs of a novel: lines joined, italics marks dropped, the
    front matter before the first chapter or volume heading, headings and
    lines with no lower-case letter skipped."""
    out, current, started = [], [], False
    for line in lines + [""]:
        line = (line or "").strip()
        if line:
            current.append(line)
            continue
        if current:
            text = " ".join(current).replace("_", "").replace("\u00a3", "L")
            text = text.encode("ascii", errors="ignore").decode()
            current = []
            if _HEADING.match(text):
                started = True
                continue
            if not any(c.islower() for c in text) or text.startswith("*"):
                continue
            if started:
                out.append(" ".join(text.split()))
    return out


def corpus(work):
    """(training text, held-out text)."""
    novels = austen_novels(work)
    if HELD_OUT_NOVEL not in novels:
        raise SluiceError(f"{AUSTEN_PACKAGE}: no novel {HELD_OUT_NOVEL!r} (has {sorted(novels)})")
    train = "\n".join("\n".join(paragraphs(lines)) for name, lines in sorted(novels.items())
                      if name != HELD_OUT_NOVEL)
    held_out = "\n".join(paragraphs(novels[HELD_OUT_NOVEL]))
    cut = held_out.rfind("\n", 0, HELD_OUT_CHARS)
    return train + "\n", held_out[:cut] + "\n"


# --- the model --------------------------------------------------------------

class _TrainableMoe(MoeModel):
    """The reference forward, also keeping each layer's router logits for the
    load-balancing loss."""

    def __init__(self, config, weights):
        super().__init__(config, weights)
        self.router_logits = []

    def _moe(self, i, b, trace, positions):
        self.router_logits.append(b @ self.w[f"model.layers.{i}.mlp.gate.weight"].T)
        return super()._moe(i, b, trace, positions)


def initial_weights(config, seed):
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in families.tensor_shapes(config).items():
        if name.endswith("norm.weight"):
            tensor = torch.ones(shape)
        else:
            tensor = torch.randn(shape, generator=generator) * 0.02
        weights[name] = tensor.requires_grad_()
    return weights


def load_balancing_loss(router_logits, experts, top_k):
    """Switch-style: experts * sum_e (share of routed slots) * (mean probability)."""
    total = 0.0
    for logits in router_logits:
        probs = torch.softmax(logits, dim=-1)
        chosen = torch.topk(probs, top_k, dim=-1).indices
        share = torch.zeros(experts).scatter_add_(0, chosen.reshape(-1), torch.ones(chosen.numel()))
        total = total + experts * torch.sum(share / chosen.numel() * probs.mean(dim=0))
    return total / len(router_logits)


def learning_rate(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(config, ids, args, log):
    weights = initial_weights(config, args.seed)
    model = _TrainableMoe(config, weights)
    if any(model.w[name] is not weights[name] for name in weights):
        raise SluiceError("the reference model copied the weights: training would not reach them")
    matrices = [w for n, w in weights.items() if w.dim() == 2]
    vectors = [w for n, w in weights.items() if w.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1},
                                   {"params": vectors, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), foreach=True)
    rng = np.random.default_rng(args.seed)
    context = config["max_position_embeddings"]
    ids = torch.as_tensor(ids, dtype=torch.int64)
    started, losses = time.time(), []
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr, args.warmup)
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for start in rng.integers(0, len(ids) - context - 1, size=args.batch):
            window = ids[start:start + context + 1]
            model.router_logits = []
            logits = model.forward(window[:-1].tolist(), model.new_cache())
            loss = torch.nn.functional.cross_entropy(logits, window[1:])
            aux = load_balancing_loss(model.router_logits, config["num_experts"], config["num_experts_per_tok"])
            ((loss + config["router_aux_loss_coef"] * aux) / args.batch).backward()
            step_loss += float(loss) / args.batch
        torch.nn.utils.clip_grad_norm_(list(weights.values()), 1.0)
        optimizer.step()
        losses.append(step_loss)
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            recent = float(np.mean(losses[-args.log_every:]))
            elapsed = time.time() - started
            tokens = (step + 1) * args.batch * context
            log(f"step {step + 1}/{args.steps}  loss {recent:.3f}  {tokens / elapsed:.0f} tokens/s  {elapsed:.0f} s")
    return {n: w.detach() for n, w in weights.items()}, float(np.mean(losses[-args.log_every:]))


# --- evaluation -------------------------------------------------------------

def perplexity(config, weights, ids):
    """exp(mean NLL) in windows of the context length, each started fresh: the
    windows `sluice eval` scores."""
    model = MoeModel(config, weights)
    window = config["max_position_embeddings"]
    nll, scored = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, window):
            chunk = ids[start:start + window]
            if len(chunk) < 2:
                break
            logits = model.forward(chunk, model.new_cache())
            target = torch.as_tensor(chunk[1:], dtype=torch.int64)
            nll += float(torch.nn.functional.cross_entropy(logits[:-1].double(), target, reduction="sum"))
            scored += len(chunk) - 1
    return {"tokens": len(ids), "scored": scored, "mean_nll": nll / scored, "perplexity": math.exp(nll / scored)}


def tokenizer_of(path):
    tokenizer_path = os.path.join(path, "tokenizer.json")
    if not os.path.exists(tokenizer_path):
        raise SluiceError(f"{path}: no tokenizer.json")
    return bpe.Tokenizer.from_file(tokenizer_path)


def evaluate(model_path, text_path):
    config, weights = reference.load_weights(model_path)
    with open(text_path, encoding="utf-8") as f:
        ids = tokenizer_of(model_path).encode(f.read())
    if len(ids) < 2:
        raise SluiceError(f"{text_path}: needs at least two tokens to score")
    return perplexity(config, weights, ids)


def encode_fast(tokenizer, text):
    """tokenizer.encode for text without special tokens, memoised per piece."""
    memo, ids = {}, []
    for piece in tokenizer.regex.findall(text):
        if piece not in memo:
            memo[piece] = tokenizer._bpe(piece)
        ids.extend(memo[piece])
    return ids


# --- the command ------------------------------------------------------------

def with_openblas(work, log):
    """Debian's torch calls the reference BLAS (about 8 GFLOP/s here); OpenBLAS
    is about 15x faster. Re-executes this script with OpenBLAS's libblas first
    on the library path, unpacked from its package (nothing is installed)."""
    if os.environ.get("SLUICE_TRAIN_BLAS") or sys.platform != "linux":
        return
    os.environ["SLUICE_TRAIN_BLAS"] = "reference"
    installed = os.path.join("/", OPENBLAS_DIR)
    try:
        directory = installed if os.path.isdir(installed) else \
            os.path.join(_unpacked_package(OPENBLAS_PACKAGE, work), OPENBLAS_DIR)
    except (SluiceError, subprocess.CalledProcessError) as e:
        log(f"no OpenBLAS ({e}); training with the reference BLAS, about 15x slower")
        return
    env = dict(os.environ, SLUICE_TRAIN_BLAS=directory, OPENBLAS_NUM_THREADS="1",
               LD_LIBRARY_PATH=":".join(filter(None, [directory, os.environ.get("LD_LIBRARY_PATH")])))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


def build(args, log):
    os.makedirs(args.work, exist_ok=True)
    with_openblas(args.work, log)
    torch.manual_seed(args.seed)
    started = time.time()
    train_text, held_out = corpus(args.work)
    log(f"corpus: {len(train_text)} characters to train on, {len(held_out)} held out ({HELD_OUT_NOVEL})")
    config = dict(CONFIG)
    tokenizer_json = bpe.build_tokenizer_json("olmoe", config["vocab_size"], train_text)
    tokenizer = bpe.Tokenizer(tokenizer_json)
    ids = encode_fast(tokenizer, train_text)
    log(f"tokenizer: {len(tokenizer.vocab_ids())} ids; {len(ids)} training tokens ({time.time() - started:.0f} s)")
    weights, final_loss = train(config, ids, args, log)
    held_out_ids = tokenizer.encode(held_out)
    result = perplexity(config, weights, held_out_ids)
    log(f"held-out perplexity (f32 weights): {result['perplexity']:.2f} over {result['scored']} tokens")

    os.makedirs(args.out, exist_ok=True)
    safetensors.save_checkpoint(args.out, {n: w.numpy() for n, w in weights.items()}, "BF16")
    write_json(os.path.join(args.out, "config.json"), config)
    write_json(os.path.join(args.out, "tokenizer.json"), tokenizer_json)
    write_json(os.path.join(args.out, "tokenizer_config.json"), bpe.build_tokenizer_config("olmoe", config))
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(held_out)
    saved = evaluate(args.out, os.path.join(args.out, "heldout.txt"))
    write_json(os.path.join(args.out, "training.json"), {
        "text": f"Jane Austen's novels from the Debian package {AUSTEN_PACKAGE}, {HELD_OUT_NOVEL} held out",
        "seed": args.seed, "steps": args.steps, "batch": args.batch, "lr": args.lr,
        "training_tokens": len(ids), "final_training_loss": round(final_loss, 4),
        "held_out_perplexity_bf16_checkpoint": round(saved["perplexity"], 3),
        "blas": "reference" if os.environ.get("SLUICE_TRAIN_BLAS", "reference") == "reference" else "OpenBLAS",
        "seconds": round(time.time() - started)})
    log(f"wrote {args.out}; held-out perplexity of the bf16 checkpoint: {saved['perplexity']:.2f}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Train the demo's tiny OLMoE on Jane Austen (public domain, Debian's r-cran-janeaustenr) "
                    "and write it in the Hugging Face layout; or, with --eval, print a model's perplexity.")
    parser.add_argument("--out", default=DEFAULT_OUT, help="checkpoint directory to write (default: %(default)s)")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "sluice-train-demo"),
                        help="where downloaded packages are unpacked (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=4, help="sequences of the context length per step")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--eval", metavar="MODEL",
                        help="print {tokens, scored, mean_nll, perplexity} as JSON for a checkpoint directory or "
                             "a .sluice container, with the PyTorch forward (windows as `sluice eval` scores them)")
    parser.add_argument("--text", default=os.path.join(DEFAULT_OUT, "heldout.txt"),
                        help="text --eval scores (default: %(default)s)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    log = lambda message: print(f"train_demo: {message}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        if args.eval:
            print(json.dumps(evaluate(args.eval, args.text)))
        else:
            if args.steps < 1 or args.batch < 1 or args.warmup < 1 or args.log_every < 1:
                raise SluiceError("--steps, --batch, --warmup and --log-every must be at least 1")
            build(args, log)
    except (SluiceError, OSError) as e:
        print(f"train_demo: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
