"""RGB -> grayscale for uint8 images: ``gray = trunc(0.21 R + 0.72 G + 0.07 B)`` in float32.

>>> gray = img2gray(image)          # image: uint8 (..., H, W, 3), RGB, channels last
"""

from typing import Optional

import torch

from ._ops import add_op_namespace_prefix, ops

__all__ = ["img2gray", "layers"]


def img2gray(image: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Convert ``image`` (uint8, shape ``(..., H, W, 3)``, RGB) to grayscale (uint8, ``(..., H, W)``).

    ``out``, if given, must be a contiguous uint8 tensor of shape ``image.shape[:-1]`` on the same device.
    """
    if not isinstance(image, torch.Tensor):
        raise TypeError(f"img2gray: image must be a torch.Tensor, got {type(image).__name__}")
    if image.dim() < 3:
        raise ValueError(f"img2gray: image must have shape (..., H, W, 3), got {image.dim()}-D shape {tuple(image.shape)}")
    if out is None:
        out = torch.empty(image.shape[:-1], dtype=torch.uint8, device=image.device)
    ops.img2gray(out, image)
    return out


@torch.library.register_fake(add_op_namespace_prefix("img2gray"))
def _img2gray_fake(out: torch.Tensor, image: torch.Tensor) -> None:
    # Mutates `out` in place; the shapes the real op checks are checked here too, so tracing fails early.
    torch._check(image.dim() >= 3 and image.shape[-1] == 3, lambda: f"img2gray: image must be (..., H, W, 3), got {tuple(image.shape)}")
    torch._check(out.device == image.device, lambda: f"img2gray: out and image must be on the same device, got out on {out.device} and image on {image.device}")
    torch._check(tuple(out.shape) == tuple(image.shape[:-1]), lambda: f"img2gray: out must have shape {tuple(image.shape[:-1])}, got {tuple(out.shape)}")
    return None


# Imported last: layers.py uses img2gray() defined above.
from . import layers  # noqa: E402
