"""Layers for ``kernels.kernelize``: drop-in ``forward`` replacements for a host module.

``Fp8BlockLinear`` replaces the forward of a DeepSeek-V3-style block-quantized FP8 linear layer, the
host module holding (as transformers' fine-grained FP8 ``FP8Linear`` does)

* ``weight``: float8 (N, K) (e4m3fn, or e4m3fnuz on MI300),
* ``weight_scale_inv``: float32 (ceil(N/128), ceil(K/128)), one scale per 128x128 weight block,
* ``bias``: optional (N,).

The forward quantizes the activations per token and 128-wide K group (scale = amax / fp8 max, the
recipe's dynamic activation quantization), runs the block-scaled GEMM (bf16 out), adds the bias and
returns the input's dtype. Following kernels' layer rules the class defines no ``__init__``, only
``forward`` and the two capability flags; the host's attributes are declared as annotations.
"""

from typing import Optional

import torch
from torch import nn

from . import gemm as _gemm

_GROUP = 128


def quantize_activations(x: torch.Tensor, dtype: torch.dtype):
    """(M, K) → (fp8 (M, K), float32 (M, ceil(K/128))) with one scale per row and 128-wide K group."""
    m, k = x.shape
    groups = (k + _GROUP - 1) // _GROUP
    padded = torch.nn.functional.pad(x.float(), (0, groups * _GROUP - k)).view(m, groups, _GROUP)
    fp8_max = torch.finfo(dtype).max
    scale = padded.abs().amax(dim=-1).clamp_min(1e-12) / fp8_max
    q = (padded / scale.unsqueeze(-1)).clamp(-fp8_max, fp8_max).to(dtype)
    return q.view(m, groups * _GROUP)[:, :k], scale


class Fp8BlockLinear(nn.Module):
    """``y = x @ dequant(weight).T + bias`` with fp8 activations quantized per (token, 128 K group)."""

    weight: torch.Tensor
    weight_scale_inv: torch.Tensor
    bias: Optional[torch.Tensor]

    # The op has a fake (meta) implementation and the quantization is plain torch: it traces fullgraph.
    can_torch_compile: bool = True
    # FP8 inference GEMM: no backward is implemented.
    has_backward: bool = False

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        n, k = self.weight.shape
        if input.shape[-1] != k:
            raise ValueError(f"Fp8BlockLinear: input must have {k} features in its last dimension, got shape {tuple(input.shape)}")
        a, a_scale = quantize_activations(input.reshape(-1, k), self.weight.dtype)
        out = _gemm(a, self.weight, a_scale, self.weight_scale_inv)
        if self.bias is not None:
            out = out + self.bias
        return out.to(input.dtype).reshape(*input.shape[:-1], n)
