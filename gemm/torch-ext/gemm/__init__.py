"""FP8 block-scaled GEMM (DeepSeek-V3 / AMD Developer Challenge 2025 recipe), bf16 output.

    out[m, n] = bf16( sum_kb a_scale[m, kb] * b_scale[n // 128, kb] * sum_{k in block kb} a[m, k] * b[n, k] )

a: (M, K) and b: (N, K), both float8_e4m3fnuz or both float8_e4m3fn, any strides;
a_scale: (M, ceil(K/128)) float32; b_scale: (ceil(N/128), ceil(K/128)) float32; out: (M, N) bfloat16.
Every scale argument may also be float8_e8m0fnu (UE8M0: 2^(code - 127)), converted exactly to float32.
See README.md for the layout contract (challenge, DeepSeek/vLLM row-major, seed tutorial).

For fine-grained FP8 models (transformers' FP8Linear, kernels-community's finegrained-fp8 surface):
fp8_act_quant(x) quantizes bf16/fp16/fp32 activations per row and 128-wide group, and
matmul_2d(A, B, Bs, block_size) runs quantization and GEMM from raw activations.

For fine-grained FP8 mixture-of-experts models (transformers' FP8Experts): matmul_batched (one expert
id per row) and matmul_grouped (rows sorted by expert, inclusive row-end offsets) run the experts'
GEMMs from raw activations. Weight scales may be float32 or float8_e8m0fnu (UE8M0) everywhere.
"""
from typing import Optional, Sequence, Union

import torch

from ._ops import add_op_namespace_prefix, ops
from ._validate import (
    check_2d,
    check_act_quant,
    check_inputs,
    check_matmul_2d,
    check_matmul_batched,
    check_matmul_grouped,
    quantized_layout,
)

__all__ = ["gemm", "fp8_act_quant", "matmul_2d", "matmul_batched", "matmul_grouped", "ops", "layers"]

ActivationScale = Union[None, float, torch.Tensor]


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


def _scale_args(activation_scale: ActivationScale):
    """The op's (Tensor? activation_scale, float? activation_scale_value) pair."""
    if activation_scale is None or isinstance(activation_scale, torch.Tensor):
        return activation_scale, None
    return None, float(activation_scale)


def fp8_act_quant(
    x: torch.Tensor,
    block_size: int = 128,
    dtype: torch.dtype = torch.float8_e4m3fn,
    activation_scale: ActivationScale = None,
):
    """Quantize activations x (..., K) (bf16, fp16 or fp32, any strides) to fp8 per row and 128-wide group.

    Returns ``(q, scale)``: q (..., K) contiguous in ``dtype`` (float8_e4m3fn or float8_e4m3fnuz) and
    scale (..., ceil(K/128)) float32 with ``x[..., k] ~= q[..., k] * scale[..., k // 128]``, where
    scale = max(amax of the group / fp8 max, 1e-12) (README.md states the exact arithmetic and the
    special values). ``activation_scale`` (a float or a one-element float32 tensor) quantizes with that
    static per-tensor scale instead. The scales are stored M-contiguous (``scale.stride(-2) == 1``),
    the layout the GEMM reads in place: ``gemm(q.view(-1, K), w, scale.view(-1, G), w_scale)``.
    """
    if not torch.compiler.is_compiling():
        check_act_quant(x, block_size, dtype, activation_scale)
    return ops.fp8_act_quant(x, block_size, dtype, *_scale_args(activation_scale))


@torch.library.register_fake(add_op_namespace_prefix("fp8_act_quant"))
def _fp8_act_quant_fake(x, block_size, dtype, activation_scale, activation_scale_value):
    if activation_scale is None:
        activation_scale, activation_scale_value = activation_scale_value, None
    check_act_quant(x, block_size, dtype, activation_scale, activation_scale_value)
    return quantized_layout(x.shape, dtype, x.device)


def matmul_2d(
    A: torch.Tensor,
    B: torch.Tensor,
    Bs: torch.Tensor,
    block_size: Sequence[int],
    output_dtype: Optional[torch.dtype] = None,
    activation_scale: ActivationScale = None,
) -> torch.Tensor:
    """``A @ dequant(B).T`` for a block-quantized fp8 weight, from raw activations: fp8_act_quant(A) and
    the block-scaled GEMM in one op.

    A (..., K) bf16/fp16/fp32 (any strides); B (N, K) float8_e4m3fn or float8_e4m3fnuz (its dtype is the
    activations' fp8 kind); Bs (ceil(N/128), ceil(K/128)) float32 or float8_e8m0fnu;
    block_size [128, 128];
    output_dtype defaults to A.dtype (the GEMM produces bf16, converted when another dtype is asked);
    activation_scale as in fp8_act_quant. Returns (..., N).
    """
    if not torch.compiler.is_compiling():
        check_matmul_2d(A, B, Bs, block_size, output_dtype, activation_scale)
    if isinstance(block_size, tuple):
        block_size = list(block_size)
    return ops.matmul_2d(A, B, Bs, block_size, output_dtype, *_scale_args(activation_scale))


@torch.library.register_fake(add_op_namespace_prefix("matmul_2d"))
def _matmul_2d_fake(a, b, b_scale, block_size, output_dtype, activation_scale, activation_scale_value):
    if activation_scale is None:
        activation_scale, activation_scale_value = activation_scale_value, None
    check_matmul_2d(a, b, b_scale, block_size, output_dtype, activation_scale, activation_scale_value)
    out_dtype = a.dtype if output_dtype is None else output_dtype
    return a.new_empty(tuple(a.shape[:-1]) + (b.shape[0],), dtype=out_dtype)


def _int_list(block_size):
    return list(block_size) if isinstance(block_size, tuple) else block_size


def matmul_batched(
    A: torch.Tensor,
    B: torch.Tensor,
    Bs: torch.Tensor,
    expert_ids: torch.Tensor,
    block_size: Sequence[int],
    output_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Mixture-of-experts GEMM with one expert per row: ``C[s] = A[s] @ dequant(B[expert_ids[s]]).T``.

    A (S, K) bf16/fp16/fp32 activations (any strides), quantized as fp8_act_quant does with B's fp8 kind;
    B (E, N, K) float8_e4m3fn or float8_e4m3fnuz; Bs (E, ceil(N/128), ceil(K/128)) float32 or
    float8_e8m0fnu; expert_ids (S,) of any integer dtype and stride; block_size [128, 128]. Returns
    C (S, N) in output_dtype (default A.dtype). Rows whose id is outside [0, E) (expert-parallel
    placeholders) are zeros.
    """
    if not torch.compiler.is_compiling():
        check_matmul_batched(A, B, Bs, expert_ids, block_size, output_dtype)
    return ops.matmul_batched(A, B, Bs, expert_ids, _int_list(block_size), output_dtype)


@torch.library.register_fake(add_op_namespace_prefix("matmul_batched"))
def _matmul_batched_fake(a, b, b_scale, expert_ids, block_size, output_dtype):
    check_matmul_batched(a, b, b_scale, expert_ids, block_size, output_dtype)
    out_dtype = a.dtype if output_dtype is None else output_dtype
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


def matmul_grouped(
    A: torch.Tensor,
    B: torch.Tensor,
    Bs: torch.Tensor,
    offsets: torch.Tensor,
    tokens_per_expert: torch.Tensor,
    block_size: Sequence[int],
    output_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Mixture-of-experts GEMM over rows sorted by expert: expert e owns rows [offsets[e-1], offsets[e]).

    A, B, Bs, block_size and output_dtype as in matmul_batched; offsets (E,) int32 inclusive row ends
    (cumsum of the counts), any stride; tokens_per_expert (E,) the counts (integer, float32 or float64, as
    torch.histc gives them). Rows at or past offsets[E-1] are zeros. On the CPU the values are checked
    (a RuntimeError names the index and value); on a GPU they are never read on the host (no
    synchronisation, CUDA-graph capturable) and bad offsets are clamped to [0, S] (README.md).
    """
    if not torch.compiler.is_compiling():
        check_matmul_grouped(A, B, Bs, offsets, tokens_per_expert, block_size, output_dtype)
    return ops.matmul_grouped(A, B, Bs, offsets, tokens_per_expert, _int_list(block_size), output_dtype)


@torch.library.register_fake(add_op_namespace_prefix("matmul_grouped"))
def _matmul_grouped_fake(a, b, b_scale, offsets, tokens_per_expert, block_size, output_dtype):
    check_matmul_grouped(a, b, b_scale, offsets, tokens_per_expert, block_size, output_dtype)
    out_dtype = a.dtype if output_dtype is None else output_dtype
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


# Imported last: layers.py (kernels' kernelize layers) uses the functions defined above.
from . import layers  # noqa: E402
