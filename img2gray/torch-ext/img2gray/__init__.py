"""RGB -> grayscale for uint8 images: ``gray = trunc(0.21 R + 0.72 G + 0.07 B)`` in float32.

>>> gray = img2gray(image)          # image: uint8 (..., H, W, 3), RGB, channels last
"""

from typing import Optional

import torch

from ._ops import add_op_namespace_prefix, ops
from ._validate import check_arguments, check_image

__all__ = ["img2gray", "layers"]


def img2gray(image: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Convert ``image`` (uint8, shape ``(..., H, W, 3)``, RGB) to grayscale (uint8, ``(..., H, W)``).

    ``out``, if given, must be a contiguous uint8 tensor of shape ``image.shape[:-1]`` on the same device
    that does not overlap ``image`` in memory. Bad input raises TypeError (an argument that is not a
    tensor) or RuntimeError (wrong dtype, shape, device...) naming the argument, the expected and the
    received value.
    """
    # While torch.compile traces this, the fake implementation below runs the same checks.
    checking = not torch.compiler.is_compiling()
    if out is None:
        if checking:
            check_image(image)  # before out takes its shape from the image
        out = torch.empty(image.shape[:-1], dtype=torch.uint8, device=image.device)
    if checking:
        check_arguments(out, image)
    ops.img2gray(out, image)
    return out


@torch.library.register_fake(add_op_namespace_prefix("img2gray"))
def _img2gray_fake(out: torch.Tensor, image: torch.Tensor) -> None:
    # The wrapper's checks (no data is read), so meta tensors and torch.compile tracing fail the same way
    # an eager call does. Mutates `out` in place; nothing is returned.
    check_arguments(out, image)
    return None


# Imported last: layers.py uses img2gray() defined above.
from . import layers  # noqa: E402
