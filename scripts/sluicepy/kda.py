# scripts/sluicepy/kda.py: Kimi Delta Attention (architectures.md §4.3) as the
# oracle: short causal convolutions with their carried inputs, the decay and
# write gates, and the delta rule both token by token and in the chunked form.
# The recurrence runs in f64; nothing here is fast-pathed or shares state across calls.
import torch

from .ops import rms_norm

RECURRENT = "recurrent"
# fla's l2norm: x / sqrt(Σx² + 1e-6), the epsilon inside the square root (not F.normalize's max).
L2_EPS = 1e-6


def short_conv(x, weight, carried):
    """Causal depthwise convolution. x [T, P] are this call's inputs, weight [P, 1, K],
    carried [K-1, P] the inputs before them (oldest first, zeros at sequence start).
    Returns (pre-activation output [T, P], the last K-1 inputs to carry on)."""
    kernel, steps = weight.shape[-1], x.shape[0]
    inputs = torch.cat([carried, x])
    taps = weight[:, 0, :]
    out = sum(taps[:, j] * inputs[j:j + steps] for j in range(kernel))  # tap K-1 meets the current token
    return out, inputs[inputs.shape[0] - (kernel - 1):]


def l2_normalise(x):
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + L2_EPS)


def recurrent(q, k, v, g, beta, state):
    """The delta rule token by token, per head h with state S [d_k, d_v]:
    S ← diag(exp g_t) S;  S ← S + k_t ⊗ β_t (v_t − Sᵀk_t);  o_t = Sᵀ q_t.
    q, k, g [T, H, d_k] (q, k already normalised, q scaled), v [T, H, d_v], beta [T, H],
    state [H, d_k, d_v]. Returns (o [T, H, d_v], final state)."""
    out = []
    for t in range(q.shape[0]):
        state = state * torch.exp(g[t])[:, :, None]  # decay first
        predicted = torch.einsum("hkv,hk->hv", state, k[t])
        state = state + k[t][:, :, None] * (beta[t][:, None] * (v[t] - predicted))[:, None, :]
        out.append(torch.einsum("hkv,hk->hv", state, q[t]))  # read with the updated state
    return torch.stack(out), state


def _chunk(q, k, v, g, beta, state):
    """One chunk of the §4.3 chunked form; every decay is exp of a difference of
    cumulative sums (factors ≤ 1), never a product of separate exponentials."""
    n = q.shape[0]
    cum = torch.cumsum(g, dim=0)  # Γ_r = Σ_{i≤r} g_i, [n, H, d_k]
    diff = cum[:, None] - cum[None, :]  # Γ_r − Γ_s, [r, s, H, d_k]
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # s ≤ r
    strict = causal & ~torch.eye(n, dtype=torch.bool)  # s < r
    decay = torch.exp(diff.masked_fill(~causal[:, :, None, None], float("-inf")))  # D_rs, 0 above the diagonal
    m = torch.einsum("rhc,rshc,shc->hrs", k, decay, k) * beta.T[:, :, None]
    m = m.masked_fill(~strict[None], 0.0)
    eye = torch.eye(n, dtype=q.dtype).expand_as(m)
    # T = (I + M)^-1 diag(β): unit lower-triangular, solved by forward substitution.
    t = torch.linalg.solve_triangular(eye + m, torch.diag_embed(beta.T), upper=False, unitriangular=True)
    decayed_k = torch.exp(cum) * k  # exp(Γ_r) ⊙ k_r
    w = torch.einsum("hrs,shc->hrc", t, decayed_k)
    u = torch.einsum("hrs,shv->hrv", t, v)
    pseudo = u - torch.einsum("hrc,hcv->hrv", w, state)  # V' = U − W S₀
    a = torch.einsum("rhc,rshc,shc->hrs", q, decay, k).masked_fill(~causal[None], 0.0)
    out = torch.einsum("rhc,hcv->rhv", torch.exp(cum) * q, state) + torch.einsum("hrs,hsv->rhv", a, pseudo)
    to_end = torch.exp(cum[-1][None] - cum) * k  # exp(Γ_n − Γ_s) ⊙ k_s
    state = torch.exp(cum[-1])[:, :, None] * state + torch.einsum("shc,hsv->hcv", to_end, pseudo)
    return out, state


def chunked(q, k, v, g, beta, state, chunk):
    """Same contract as recurrent(), in chunks of `chunk` tokens (the last may be shorter)."""
    outs = []
    for start in range(0, q.shape[0], chunk):
        s = slice(start, start + chunk)
        out, state = _chunk(q[s], k[s], v[s], g[s], beta[s], state)
        outs.append(out)
    return torch.cat(outs), state


class Kda:
    """One model's KDA mixers over HF-named weights; per-layer state lives in the cache
    dict: "conv" (q̃, k̃, ṽ inputs of the last K-1 tokens) and "state" [H, d, d] (f64).
    chunk: None runs the recurrence token by token; N runs the chunked form in chunks of N."""

    def __init__(self, config, weights, chunk=None):
        self.w, self.eps, self.chunk = weights, config["rms_norm_eps"], chunk
        linear = config["linear_attn_config"]
        self.heads, self.d, self.kernel = linear["num_heads"], linear["head_dim"], linear["short_conv_kernel_size"]

    def __call__(self, i, x, positions, cache):
        p, w, steps = f"model.layers.{i}.self_attn.", self.w, x.shape[0]

        def lin(name, inputs):
            return inputs @ w[p + name].T

        heads, d, width = self.heads, self.d, self.heads * self.d
        if "conv" not in cache:
            cache["conv"] = {n: torch.zeros(self.kernel - 1, width, dtype=x.dtype) for n in "qkv"}
            cache["state"] = torch.zeros(heads, d, d, dtype=torch.float64)
        qkv = {}
        for n in "qkv":
            pre, cache["conv"][n] = short_conv(lin(f"{n}_proj.weight", x), w[p + f"{n}_conv1d.weight"],
                                               cache["conv"][n])
            qkv[n] = torch.nn.functional.silu(pre).view(steps, heads, d)
        z = lin("f_b_proj.weight", lin("f_a_proj.weight", x))
        a_log = w[p + "A_log"].reshape(heads)
        g = -torch.exp(a_log)[:, None] * torch.nn.functional.softplus((z + w[p + "dt_bias"]).view(steps, heads, d))
        beta = torch.sigmoid(lin("b_proj.weight", x))
        q = l2_normalise(qkv["q"].double()) * d ** -0.5
        k = l2_normalise(qkv["k"].double())
        args = (q, k, qkv["v"].double(), g.double(), beta.double(), cache["state"])
        if self.chunk is None:
            o, cache["state"] = recurrent(*args)
        else:
            o, cache["state"] = chunked(*args, self.chunk)
        gate = lin("g_b_proj.weight", lin("g_a_proj.weight", x)).view(steps, heads, d)
        o = rms_norm(o.to(x.dtype), w[p + "o_norm.weight"], self.eps) * torch.sigmoid(gate)
        return lin("o_proj.weight", o.reshape(steps, width))
