"""Layers for ``kernels.kernelize``: drop-in ``forward`` replacements for a host module.

A host ``nn.Module`` decorated with ``@use_kernel_forward_from_hub("Grayscale")`` whose forward takes one
uint8 RGB image batch ``(..., H, W, 3)`` and returns uint8 ``(..., H, W)`` gets this forward after
``kernelize(model, mode=..., device=...)``. Following kernels' layer rules, the class defines no
``__init__``, only ``forward`` and the two capability flags.
"""

import torch
from torch import nn

from . import img2gray as _img2gray


class Grayscale(nn.Module):
    """RGB → grayscale with ``gray = trunc(0.21 R + 0.72 G + 0.07 B)`` (float32, no FMA), uint8 in and out."""

    # The op has a fake (meta) implementation, so it traces without graph breaks.
    can_torch_compile: bool = True
    # uint8 in, uint8 out: there is nothing to differentiate.
    has_backward: bool = False

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return _img2gray(image)
