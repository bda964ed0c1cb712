"""FP8 block-scaled GEMM (DeepSeek-V3 / AMD Developer Challenge 2025 recipe), bf16 output.

    out[m, n] = bf16( sum_kb a_scale[m, kb] * b_scale[n // 128, kb] * sum_{k in block kb} a[m, k] * b[n, k] )

a: (M, K) and b: (N, K), both float8_e4m3fnuz or both float8_e4m3fn, any strides;
a_scale: (M, ceil(K/128)) float32; b_scale: (ceil(N/128), ceil(K/128)) float32; out: (M, N) bfloat16.
See README.md for the layout contract (challenge, DeepSeek/vLLM row-major, seed tutorial).
"""
from typing import Optional

import torch

from ._ops import add_op_namespace_prefix, ops
from ._validate import check_2d, check_inputs

__all__ = ["gemm", "ops", "layers"]


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Block-scaled FP8 matmul ``a @ b.T`` with per-(row, 128-K-block) and per-(128x128)-block scales.

    Allocates a bfloat16 (M, N) ``out`` on a's device when none is given; returns ``out``.
    Bad input raises TypeError (an argument that is not a tensor) or RuntimeError (wrong dtype, shape,
    device, overlap...) naming the argument, the expected and the received value.
    """
    # While torch.compile traces this, the fake implementation below runs the same checks.
    checking = not torch.compiler.is_compiling()
    if out is None:
        if checking:
            check_2d(a, "a")  # before out takes its shape from a and b
            check_2d(b, "b")
        out = torch.empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
    if checking:
        check_inputs(out, a, b, a_scale, b_scale)
    ops.gemm(out, a, b, a_scale, b_scale)
    return out


@torch.library.register_fake(add_op_namespace_prefix("gemm"))
def _gemm_fake(out, a, b, a_scale, b_scale):
    # The wrapper's checks (no data is read), so meta tensors and torch.compile tracing fail the same
    # way an eager call does. out is mutated in place; nothing is returned.
    check_inputs(out, a, b, a_scale, b_scale)
    return None


# Imported last: layers.py (kernels' kernelize layers) uses gemm() defined above.
from . import layers  # noqa: E402
