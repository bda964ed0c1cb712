"""Layers for ``kernels.kernelize``: drop-in ``forward`` replacements for a host module.

``Fp8BlockLinear`` replaces the forward of a fine-grained (block-quantized) FP8 linear layer such as
transformers' ``FP8Linear`` (DeepSeek-V3/R1, Qwen3-FP8 checkpoints), whose host module holds

* ``weight``: float8 (N, K) (e4m3fn, or e4m3fnuz on MI300),
* ``weight_scale_inv``: float32 (ceil(N/128), ceil(K/128)), one scale per 128x128 weight block,
* ``bias``: optional (N,),
* ``block_size``: the weight blocking, (128, 128) (a host without it is taken as (128, 128)),
* for static activation quantization (``activation_scheme == "static"``) ``activation_scale``, a
  one-element float32 tensor.

The forward is ``matmul_2d``: the activations quantized per token and 128-wide K group (or with the
static scale) in one kernel, the block-scaled GEMM, the bias, the input's dtype out. A weight that is
not fp8 takes ``torch.nn.functional.linear``, as the host's own forward does. Following kernels'
layer rules the class defines no ``__init__``, only ``forward`` and the two capability flags; the
host's attributes are declared as annotations.
"""

from typing import Optional, Tuple

import torch
from torch import nn

from . import matmul_2d as _matmul_2d
from ._validate import FP8_DTYPES as _FP8_DTYPES


class Fp8BlockLinear(nn.Module):
    """``y = x @ dequant(weight).T + bias`` with fp8 activations quantized per (token, 128 K group)."""

    weight: torch.Tensor
    weight_scale_inv: torch.Tensor
    bias: Optional[torch.Tensor]
    block_size: Optional[Tuple[int, int]]

    # matmul_2d is one op with a fake implementation: the forward traces fullgraph for any K.
    can_torch_compile: bool = True
    # FP8 inference GEMM: no backward is implemented.
    has_backward: bool = False

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype not in _FP8_DTYPES:
            return nn.functional.linear(input, self.weight, self.bias)
        n, k = self.weight.shape
        if input.shape[-1] != k:
            raise RuntimeError(
                f"Fp8BlockLinear: input must have {k} features in its last dimension, got shape {list(input.shape)}"
            )
        block_size = getattr(self, "block_size", None)
        activation_scale = None
        if getattr(self, "activation_scheme", "dynamic") == "static":
            activation_scale = self.activation_scale
        out = _matmul_2d(
            input,
            self.weight,
            self.weight_scale_inv,
            [128, 128] if block_size is None else block_size,
            output_dtype=input.dtype,
            activation_scale=activation_scale,
        )
        if self.bias is not None:
            out = out + self.bias
        return out.to(input.dtype)
