# scripts/sluicepy/int8_activations.py: the engine's int8 trunk activations
# (compute/kernels/quant.h), modelled in the reference: the input of every
# product with a grouped (q8g128, q6g128, q4g128) trunk matrix is quantized per group of 128
# columns (the weights' group) in f32 exactly as the engine does, and MLA's cache holds
# halves (sluicepy/mla.py). Changes no weight and no other product.
import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from . import mla

BLOCK = 128
# Matrices whose products take f32 inputs in either mode: MLA's kv_b, applied
# in its absorbed form from its stored rows (compute/model/mla_mixer.cpp).
ROW_READ_SUFFIXES = ("kv_b_proj.weight",)


def quantize_groups(x32):
    """x32: f32 [..., cols] -> (q int64 [..., cols], d f32 [..., groups]): per
    group of 128 columns, in f32, d = amax/127, q = rint(x * (127/amax))
    (round half to even; 0 where amax is 0)."""
    cols = x32.shape[-1]
    padded = -(-cols // BLOCK) * BLOCK
    blocks = np.zeros(x32.shape[:-1] + (padded,), dtype=np.float32)
    blocks[..., :cols] = x32
    blocks = blocks.reshape(x32.shape[:-1] + (padded // BLOCK, BLOCK))
    amax = np.max(np.abs(blocks), axis=-1, keepdims=True)
    scale = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inverse = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(blocks * inverse), -127, 127).astype(np.int64)
    return q.reshape(x32.shape[:-1] + (padded,))[..., :cols], scale[..., 0]


def quantize_dequantize(x):
    """x [..., cols] -> the values the engine multiplies with, in x's dtype:
    q * d per group (quantize_groups)."""
    x32 = np.asarray(x.detach().to(torch.float32).numpy(), dtype=np.float32)
    q, scale = quantize_groups(x32)
    per_column = np.repeat(scale.astype(np.float64), BLOCK, axis=-1)[..., :x32.shape[-1]]
    values = q.astype(np.float64) * per_column
    return torch.from_numpy(np.ascontiguousarray(values)).to(x.dtype)


class _QuantizedInputs(TorchFunctionMode):
    """While active, `x @ W.T` for a registered W (by storage) quantizes x first."""

    def __init__(self, weights):
        super().__init__()
        self.weights = weights  # data_ptr -> (rows, cols)

    def _is_registered_transpose(self, y):
        if not isinstance(y, torch.Tensor) or y.dim() != 2:
            return False
        shape = self.weights.get(y.data_ptr())
        return shape is not None and tuple(y.shape) == (shape[1], shape[0]) and y.stride() == (1, shape[1])

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # The mode is off inside this handler, so the torch calls below do not come back here.
        if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__) and len(args) == 2 \
                and self._is_registered_transpose(args[1]):
            return func(quantize_dequantize(args[0]), args[1], **kwargs)
        return func(*args, **kwargs)


def with_int8_activations(model, trunk_formats):
    """Wraps model.forward so every product with a quantized trunk matrix of the
    container (trunk_formats: name -> format) takes int8 activations."""
    weights = {}  # a tied LM head shares the embedding's storage, so it is found through it
    for name, tensor in model.w.items():
        if trunk_formats.get(name) in ("q8g128", "q6g128", "q4g128") and not name.endswith(ROW_READ_SUFFIXES):
            weights[tensor.data_ptr()] = tuple(tensor.shape)
    inner = model.forward

    def forward(*args, **kwargs):
        with _QuantizedInputs(weights), mla.cached_as_halves():
            return inner(*args, **kwargs)

    model.forward = forward
    return model
