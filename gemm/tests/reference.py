"""Float64 reference and challenge-style inputs for the FP8 block-scaled GEMM.

Shared by the CPU tests and the GPU backends' tests. Written from the formula in SPEC.md, not
from any kernel:

    out[m, n] = sum_kb a_scale[m, kb] * b_scale[n // 128, kb] * sum_{k in block kb} a[m, k] * b[n, k]

API:
    make_inputs(m, n, k, dtype, layout, seed, device) -> (a, b, a_scale, b_scale)
    reference_gemm(a, b, a_scale, b_scale) -> float64 (M, N) tensor on the CPU
    reference_gemm_on_device(a, b, a_scale, b_scale, absolute=False) -> float64 (M, N) on a's device
    assert_close_challenge(out, ref)          # rtol 2e-2, atol 1e-3, NaN/inf positions must match
    assert_close_fp8_tensor_core(out, a, b, a_scale, b_scale)   # Hopper's fp8 MMA accuracy class
    poisoned_out(m, n, device)                # bf16 (M, N) filled with NaN
"""
import math

import torch

QUANT_BLOCK = 128
RTOL = 2e-2
ATOL = 1e-3
FP8_DTYPES = (torch.float8_e4m3fnuz, torch.float8_e4m3fn)
# "mn_major": the AMD challenge's tensors, a.stride() == (1, M) (what it calls column-major).
# "k_major": DeepSeek / vLLM row-major tensors, a.stride() == (K, 1).
LAYOUTS = ("mn_major", "k_major")


def _blocks(x):
    return math.ceil(x / QUANT_BLOCK)


def make_inputs(m, n, k, dtype=torch.float8_e4m3fnuz, layout="mn_major", seed=0, device="cpu"):
    """Draw inputs the way the challenge does: standard-normal bf16 cast to fp8, standard-normal fp32 scales.

    The draw order and shapes follow reference.py of gpu-mode's amd-fp8-mm (a, b, a_scale, b_scale).
    "mn_major" reproduces its memory layout exactly (transposed views of contiguous (K, M) etc.);
    "k_major" draws row-major tensors of the logical shapes.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    gen = torch.Generator(device=device).manual_seed(seed)
    kb, nb = _blocks(k), _blocks(n)

    def randn(*shape):
        return torch.randn(shape, dtype=torch.float32, generator=gen, device=device)

    if layout == "mn_major":
        a = randn(k, m).to(torch.bfloat16).to(dtype).T
        b = randn(k, n).to(torch.bfloat16).to(dtype).T
        a_scale = randn(kb, m).T
        b_scale = randn(kb, nb).T
    else:
        a = randn(m, k).to(torch.bfloat16).to(dtype)
        b = randn(n, k).to(torch.bfloat16).to(dtype)
        a_scale = randn(m, kb)
        b_scale = randn(nb, kb)
    return a, b, a_scale, b_scale


def reference_gemm(a, b, a_scale, b_scale):
    """The formula in float64, block by block (so inf * 0 gives NaN exactly where the formula does)."""
    m, k = a.shape
    n = b.shape[0]
    kb = _blocks(k)
    pad = kb * QUANT_BLOCK - k  # zero columns complete the last block without changing any sum

    def blocks_of(x, rows):  # fp8 (rows, K) -> float64 (KB, rows, 128); fp8 -> fp32 is exact
        x64 = x.cpu().to(torch.float32).to(torch.float64)
        x64 = torch.nn.functional.pad(x64, (0, pad))
        return x64.reshape(rows, kb, QUANT_BLOCK).permute(1, 0, 2).contiguous()

    a_blocks, b_blocks = blocks_of(a, m), blocks_of(b, n)
    as64 = a_scale.cpu().to(torch.float64).T  # (KB, M)
    # b_scale row for every output column n: b_scale[n // 128, :]
    bs64 = b_scale.cpu().to(torch.float64).repeat_interleave(QUANT_BLOCK, dim=0)[:n].T  # (KB, N)
    out = torch.zeros((m, n), dtype=torch.float64)
    for i in range(kb):
        partial = a_blocks[i] @ b_blocks[i].T  # (M, N): the unscaled sum over block i
        out.addcmul_(as64[i, :, None] * bs64[i, None, :], partial)  # += a_scale * b_scale * partial
    return out


def reference_gemm_on_device(a, b, a_scale, b_scale, absolute=False):
    """reference_gemm's block-by-block float64 formula, evaluated on a's device (a GPU evaluates the large
    shapes in milliseconds). With absolute=True: the same formula on |a|, |b|, |scales|, i.e. the sum of
    the magnitudes of the terms that are added up."""
    m, k = a.shape
    n = b.shape[0]
    a64 = a.to(torch.float32).to(torch.float64)
    b64 = b.to(torch.float32).to(torch.float64)
    as64 = a_scale.to(torch.float64)
    bs64 = b_scale.to(torch.float64).repeat_interleave(QUANT_BLOCK, dim=0)[:n]
    if absolute:
        a64, b64, as64, bs64 = a64.abs(), b64.abs(), as64.abs(), bs64.abs()
    out = torch.zeros((m, n), dtype=torch.float64, device=a.device)
    for kb in range(_blocks(k)):
        cols = slice(kb * QUANT_BLOCK, min(k, (kb + 1) * QUANT_BLOCK))
        out += as64[:, kb, None] * bs64[None, :, kb] * (a64[:, cols] @ b64[:, cols].T)
    return out


def poisoned_out(m, n, device="cpu"):
    """An output buffer full of NaN, so an element the kernel forgets to write cannot pass."""
    return torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)


def assert_close_challenge(out, ref, rtol=RTOL, atol=ATOL):
    """The challenge's check: |out - ref| <= atol + rtol * |ref| everywhere; NaN and inf must match."""
    assert out.dtype == torch.bfloat16, f"out must be bfloat16, got {out.dtype}"
    assert tuple(out.shape) == tuple(ref.shape), f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    got = out.detach().cpu().to(torch.float64)
    torch.testing.assert_close(got, ref, rtol=rtol, atol=atol, equal_nan=True, check_dtype=False)


# Hopper's fp8 MMA keeps ~13 fraction bits while it adds the products of a 128-wide K block, so near-zero
# outputs of long-K products can miss the challenge's absolute 1e-3 (gemm/docs/cuda_sm90.md, "Accuracy").
FP8_TENSOR_CORE_REL = 2.0 ** -12


def _block_peak_mass(a, b, a_scale, b_scale):
    """sum_kb |a_scale b_scale| * 128 * max_{k in kb} |a[m, k] b[n, k]|, in float64 on a's device: a bound of
    the sum of |terms| that also covers an addition aligned to the largest product of a block."""
    m, k = a.shape
    n = b.shape[0]
    a32, b32 = a.to(torch.float32).abs(), b.to(torch.float32).abs()
    bs = b_scale.to(torch.float64).abs().repeat_interleave(QUANT_BLOCK, dim=0)[:n]
    out = torch.zeros((m, n), dtype=torch.float64, device=a.device)
    for kb in range(_blocks(k)):
        cols = slice(kb * QUANT_BLOCK, min(k, (kb + 1) * QUANT_BLOCK))
        peak = (a32[:, None, cols] * b32[None, :, cols]).amax(dim=-1).to(torch.float64)  # fp8 products: exact
        out += a_scale[:, kb].to(torch.float64).abs()[:, None] * bs[None, :, kb] * QUANT_BLOCK * peak
    return out


def assert_close_fp8_tensor_core(out, a, b, a_scale, b_scale, outliers=False):
    """The challenge bound plus 2^-12 of the sum of |terms|, elementwise; NaN and inf positions (and the
    signs of the infinities) must match the reference. With outliers (a few fp8 codes of the largest
    magnitude among ordinary values): 2^-12 of 128 times each block's largest |term| instead, since the
    tensor cores' narrow addition loses the small terms of a block relative to its large ones."""
    ref = reference_gemm_on_device(a, b, a_scale, b_scale)
    mass = (_block_peak_mass(a, b, a_scale, b_scale) if outliers
            else reference_gemm_on_device(a, b, a_scale, b_scale, absolute=True))
    got = out.to(ref.device).to(torch.float64)
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), "NaN positions differ from the reference"
    inf = torch.isinf(ref)
    assert torch.equal(torch.isinf(got), inf) and torch.equal(got[inf], ref[inf]), "infinities differ"
    keep = ~(torch.isnan(ref) | inf)
    err = (got - ref).abs()[keep]
    bound = (ATOL + RTOL * ref.abs() + FP8_TENSOR_CORE_REL * mass)[keep]
    bad = err > bound
    assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} elements outside the fp8 tensor-core bound; "
                           f"worst excess {float((err - bound).max()):.4g}")
