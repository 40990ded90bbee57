# scripts/sluicepy/routing.py: which experts a token goes to and with what
# weight: softmax top-k (OLMoE, Qwen3-MoE, Mixtral; §1.3, §2.3, §5) and
# DeepSeek's sigmoid group-limited top-k (§3.5), also Kimi-Linear's (§4.5). Ties always go to the lower id.
# Another run's choice of experts can replace the choosing (ForcedRouting); the weights never come from it.
import torch

from . import SluiceError

# The two published ways to exclude the experts of groups that were not kept (§3.5, §10.2).
EXCLUDE_ZERO = "zero"  # transformers and DeepSeek's released remote code: masked_fill(…, 0.0)
EXCLUDE_NEG_INF = "neg-inf"  # DeepSeek's own inference/model.py: masked_fill(…, -inf)
EXCLUSIONS = (EXCLUDE_ZERO, EXCLUDE_NEG_INF)


def _top(values, k):
    """Indices of the k largest values per row, largest first; a stable sort
    keeps the lower index first among equal values."""
    return torch.sort(values, dim=-1, descending=True, stable=True).indices[:, :k]


def route_softmax(logits, top_k, renormalise, chosen=None):
    """Softmax over all experts, then the top_k largest probabilities, optionally
    renormalised to sum 1. Returns (expert ids [T, k], weights [T, k]) in routing order.
    chosen [T, k]: the expert ids to take instead of the top_k (ForcedRouting)."""
    probs = torch.softmax(logits, dim=-1)
    order = _top(probs, top_k) if chosen is None else chosen
    weights = torch.gather(probs, 1, order)
    if renormalise:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return order, weights


def route_sigmoid_grouped(logits, bias, top_k, n_group, topk_group, renormalise, scaling,
                          exclusion=EXCLUDE_ZERO, biased_weights=False, chosen=None):
    """DeepSeek-V3 / Kimi K2 `noaux_tc` routing.

    s = σ(logits) gives the weights; s + bias only chooses. A group scores the sum
    of its 2 largest s + bias; the topk_group best groups are kept and the experts
    of the others are set to 0 (or −∞) before the final top_k. Weights are
    s / (Σ s + 1e-20) when `renormalise`, then times `scaling`. `biased_weights`
    takes the weights from s + bias instead (Kimi-Linear's released code, §4.5).
    chosen [T, k]: the expert ids to take instead of choosing (ForcedRouting)."""
    scores = torch.sigmoid(logits)
    choice = scores + bias
    tokens, experts = choice.shape
    per_group = experts // n_group
    group_scores = torch.topk(choice.view(tokens, n_group, per_group), 2, dim=-1).values.sum(dim=-1)
    kept_groups = _top(group_scores, topk_group)
    kept = torch.zeros(tokens, n_group, dtype=torch.bool)
    kept.scatter_(1, kept_groups, True)
    kept = kept[:, :, None].expand(tokens, n_group, per_group).reshape(tokens, experts)
    fill = 0.0 if exclusion == EXCLUDE_ZERO else float("-inf")
    order = _top(choice.masked_fill(~kept, fill), top_k) if chosen is None else chosen
    weights = torch.gather(choice if biased_weights else scores, 1, order)
    if renormalise:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return order, weights * scaling


class ForcedRouting:
    """Which experts another run chose, to take instead of choosing: the rows of a
    routing trace as `sluice run --trace-out` writes it ({"tok": position, "layers":
    [[expert ids in routing order], ...] one list per MoE layer}). A comparison of two
    runs that share the choices cannot be thrown by a near-tie between two experts."""

    def __init__(self, rows, moe_layers):
        self.by_position = {row["tok"]: row["layers"] for row in rows}
        self.ordinal = {layer: n for n, layer in enumerate(moe_layers)}

    def chosen(self, layer, positions):
        """Expert ids [T, k] of MoE layer `layer` (a layer index) at `positions`."""
        rows = []
        for position in positions.tolist():
            layers = self.by_position.get(position)
            if layers is None or len(layers) != len(self.ordinal):
                raise SluiceError(f"forced routing: the trace has no routing of {len(self.ordinal)} MoE layers "
                                  f"at position {position}")
            rows.append(layers[self.ordinal[layer]])
        return torch.tensor(rows, dtype=torch.int64)
