# scripts/sluicepy/ops.py: the two building blocks every family shares:
# RMSNorm (architectures.md §0.2) and the SwiGLU FFN (§0.3). Plain torch, any dtype.
import torch


def rms_norm(x, weight, eps):
    return weight * (x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps))


def swiglu(x, gate, up, down):
    return torch.nn.functional.silu(x @ gate.T) * (x @ up.T) @ down.T
