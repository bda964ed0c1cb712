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


def _quantize_groups(x: torch.Tensor, dtype: torch.dtype, fp8_max: float):
    """(M, G, W) float32 -> (fp8 (M, G, W), float32 (M, G)): one scale per row and group of W."""
    scale = x.abs().amax(dim=-1).clamp_min(1e-12) / fp8_max
    q = (x / scale.unsqueeze(-1)).clamp(-fp8_max, fp8_max).to(dtype)
    return q, scale


def quantize_activations(x: torch.Tensor, dtype: torch.dtype):
    """(M, K) → (fp8 (M, K), float32 (M, ceil(K/128))) with one scale per row and 128-wide K group."""
    m, k = x.shape
    x = x.float()
    fp8_max = torch.finfo(dtype).max
    full, tail = k // _GROUP, k % _GROUP
    # The whole 128-wide groups and the last partial group are quantised apart and concatenated, so that
    # no element finds its group by dividing its column by 128: inductor's CPU loop split (torch 2.13)
    # turns such a division over a K that 128 does not divide into K // 128 rows of 128 and never
    # computes the last K % 128 columns. Quantising a padded (M, G, 128) tensor and slicing it back to
    # (M, K) leaves those fp8 bytes unwritten under torch.compile (NaN and garbage in the output).
    qs, scales = [], []
    if full:
        q, scale = _quantize_groups(x[:, : full * _GROUP].reshape(m, full, _GROUP), dtype, fp8_max)
        qs.append(q.reshape(m, full * _GROUP))
        scales.append(scale)
    if tail:
        q, scale = _quantize_groups(x[:, full * _GROUP :].reshape(m, 1, tail), dtype, fp8_max)
        qs.append(q.reshape(m, tail))
        scales.append(scale)
    if len(qs) <= 1:
        return (qs[0], scales[0]) if qs else (x.to(dtype), x.new_empty((m, 0)))  # K == 0: nothing to scale
    return torch.cat(qs, dim=1), torch.cat(scales, dim=1)


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
            raise RuntimeError(
                f"Fp8BlockLinear: input must have {k} features in its last dimension, got shape {list(input.shape)}"
            )
        a, a_scale = quantize_activations(input.reshape(-1, k), self.weight.dtype)
        out = _gemm(a, self.weight, a_scale, self.weight_scale_inv)
        if self.bias is not None:
            out = out + self.bias
        return out.to(input.dtype).reshape(*input.shape[:-1], n)
