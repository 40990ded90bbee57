# scripts/sluicepy/routing_shape.py: make_tiny_checkpoint.py --routing realistic,
# the design of compute/convert/routing_shape.h in numpy: embedding rows
# [1, slow (8), fast (8), filler] of mean square 1, routers bias + slow and
# fast weights over fixed random directions, an LM head that scores token j
# after i as kappa·slow_j·slow_i/8, less 4 when j is i (through the filler),
# every residual writer scaled by 1e-3, and
# the fit of compute/cli/routing_fit.cpp (simulate decode at temperature 1,
# measure, correct) against the recorded profile (tests/router/data/
# routing-stats.json, stretched to the geometry as router/routing_profile.cpp
# does). It draws values; it never writes files.
import json
import os

import numpy as np

from . import SluiceError

SLOW, FAST = 8, 8
SHAPED = 1 + SLOW + FAST
RESIDUAL_SCALE = 1e-3
KAPPA = 8.0
SELF_PENALTY = 4.0  # keeps a token from following itself
WINDOWS = (1, 2, 4, 8, 16)
ROUNDS, RUNS = 24, 8
_STATS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "tests", "router", "data", "routing-stats.json")


def _cumulative(counts, x):
    pos = x * len(counts)
    whole = min(len(counts), int(pos))
    s = counts[:whole].sum() + ((pos - whole) * counts[whole] if whole < len(counts) else 0.0)
    return s / counts.sum()


def profile(layers, experts, top_k):
    """(tokens, repeat per layer, sorted counts per layer): the recording
    nearest in experts per layer, stretched to this geometry."""
    with open(_STATS, encoding="utf-8") as f:
        models = json.load(f)["models"].values()
    src = min(models, key=lambda m: abs(np.log(m["experts"]) - np.log(experts)))
    tokens, n = src["tokens"], src["moe_layers"]
    repeat, counts = [], []
    for layer in range(layers):
        frm = layer * n // layers
        repeat.append(src["next_token_repeat_per_layer"][frm])
        c = np.array(src["per_layer_expert_counts_sorted_descending"][frm], dtype=np.float64)
        edges = [_cumulative(c, r / experts) for r in range(experts + 1)]
        counts.append(np.minimum(tokens, tokens * top_k * np.diff(edges)))
    return tokens, np.array(repeat), np.array(counts)


def _unit_rows(rng, rows, dims, radius):
    v = rng.standard_normal((rows, dims))
    return v * (radius / np.linalg.norm(v, axis=1, keepdims=True))


class Shape:
    """The latents of a model of `vocab` tokens, `moe_layers` × `experts`, and the fitted parameters."""

    def __init__(self, hidden, vocab, moe_layers, experts, seed):
        if hidden < 2 * SHAPED:
            raise SluiceError(f"--routing realistic: hidden_size {hidden} is below {2 * SHAPED}")
        rng = np.random.default_rng([seed, 0x70CE])
        self.hidden, self.vocab = hidden, vocab
        self.slow = _unit_rows(rng, vocab, SLOW, np.sqrt(SLOW))
        self.fast = rng.standard_normal((vocab, FAST))
        self.slow_dir = rng.standard_normal((moe_layers, experts, SLOW)) / np.sqrt(SLOW)
        self.fast_dir = rng.standard_normal((moe_layers, experts, FAST)) / np.sqrt(FAST)
        self.angle = np.full(moe_layers, 0.7)
        self.bias = -1e-3 * np.stack([rng.permutation(experts) for _ in range(moe_layers)]).astype(np.float64)
        self.seed = seed

    def embedding(self):
        rng = np.random.default_rng([self.seed, 0xF111])
        filler = rng.standard_normal((self.vocab, self.hidden - SHAPED))
        used = 1 + (self.slow ** 2).sum(1) + (self.fast ** 2).sum(1)
        room = np.maximum(self.hidden - used, 0.0)
        filler *= np.sqrt(room / (filler ** 2).sum(1))[:, None]
        return np.hstack([np.ones((self.vocab, 1)), self.slow, self.fast, filler]).astype(np.float32)

    def lm_head(self):
        out = self.embedding()
        out[:, 0] = 0
        out[:, 1:1 + SLOW] *= KAPPA / SLOW
        out[:, 1 + SLOW:SHAPED] = 0
        filler = out[:, SHAPED:]
        filler *= -SELF_PENALTY / (filler ** 2).sum(1, keepdims=True)
        return out

    def router(self, moe):
        out = np.zeros((self.bias.shape[1], self.hidden), dtype=np.float32)
        out[:, 0] = self.bias[moe]
        out[:, 1:1 + SLOW] = np.cos(self.angle[moe]) * self.slow_dir[moe]
        out[:, 1 + SLOW:SHAPED] = np.sin(self.angle[moe]) * self.fast_dir[moe]
        return out

    def decode(self, tokens, top_k, rng, select):
        """[tokens, moe layers, top_k] experts of a decode sampled at temperature 1."""
        seq = np.empty(tokens, dtype=np.int64)
        t = rng.integers(self.vocab)
        for i in range(tokens):
            seq[i] = t
            logits = KAPPA / SLOW * (self.slow @ self.slow[t])
            logits[t] -= SELF_PENALTY  # the filler's terms between two tokens are left out
            p = np.exp(logits - logits.max())
            t = rng.choice(self.vocab, p=p / p.sum())
        logits = (self.bias[None] + np.cos(self.angle)[None, :, None] * np.einsum("les,ts->tle", self.slow_dir,
                                                                                    self.slow[seq])
                  + np.sin(self.angle)[None, :, None] * np.einsum("lef,tf->tle", self.fast_dir, self.fast[seq]))
        return select(logits, top_k)


def measure(trace, experts):
    """(repeat per layer, uses of each expert per layer) of a [tokens, layers, k] trace."""
    tokens, layers, k = trace.shape
    used = np.zeros((tokens, layers, experts), dtype=bool)
    np.put_along_axis(used, trace, True, axis=2)
    repeat = (used[1:] & used[:-1]).sum(2).mean(0) / k
    return repeat, used.sum(0).astype(np.float64)


def fit(shape, layers, experts, top_k, select):
    tokens, target_repeat, target_counts = profile(layers, experts, top_k)
    rng = np.random.default_rng([shape.seed, 0x0DDE])
    for _ in range(ROUNDS):
        repeat, counts = np.zeros(layers), np.zeros((layers, experts))
        for _ in range(RUNS):
            r, c = measure(shape.decode(tokens, top_k, rng, select), experts)
            repeat += r / RUNS
            counts += c / RUNS
        shape.angle = np.clip(shape.angle - 1.5 * (target_repeat - repeat), 0.02, 1.55)
        for m in range(layers):
            # The expert now used r-th most is to be used as the recording's r-th.
            order = np.argsort(-counts[m] - 1e-6 * shape.bias[m], kind="stable")
            shape.bias[m][order] += 0.5 * np.log((target_counts[m] + 0.5) / (counts[m][order] + 0.5))
    return shape


def select_for(config):
    """The family's top-k over [tokens, layers, experts] logits: softmax's
    order is the logits'; sigmoid with groups keeps the topk_group groups
    whose two best scores sum highest (the selection bias is 0 here)."""
    groups, kept = config.get("n_group") or 1, config.get("topk_group") or 1

    def select(logits, k):
        if groups > 1:
            tokens, layers, experts = logits.shape
            scores = 1 / (1 + np.exp(-logits))
            per_group = np.sort(scores.reshape(tokens, layers, groups, experts // groups), -1)[..., -2:].sum(-1)
            keep = np.zeros((tokens, layers, groups), dtype=bool)
            np.put_along_axis(keep, np.argsort(-per_group, -1, kind="stable")[..., :kept], True, 2)
            logits = np.where(np.repeat(keep, experts // groups, 2), logits, -np.inf)
        return np.argsort(-logits, -1, kind="stable")[..., :k]

    return select
