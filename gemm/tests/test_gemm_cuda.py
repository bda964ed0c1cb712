"""Properties of the CUDA sm_90a (Hopper) backend alone, on an H100/H200: its scale-layout fast path,
DeepGEMM's shapes, the two accumulation classes, the hand-written kernels forced one by one, the operand
preparation pass, CUDA graphs and streams. What every backend must do (challenge and odd shapes, both
layouts and fp8 kinds, special values, strided and poisoned out, the numerical range) is in test_gemm.py,
where the "cuda" and "cuda-exact" backends run it; bad input in test_gemm_errors.py (api-cuda, raw-cuda).

Skips cleanly without a CUDA device of compute capability 9.0 (CI has none). On the GPU machine:
    MAX_JOBS=16 pip install --no-build-isolation -e gemm && pytest -q gemm/tests

Two accuracy classes (docs/cuda_sm90.md, "Accuracy"):
- the default fp8 tensor-core path (DeepSeek's recipe, like torch._scaled_mm's blockwise cuBLAS kernel):
  Hopper's fp8 MMA keeps ~13 fraction bits while it adds products inside a 128-wide K block, so ~0.3 % of
  the outputs of a K = 7168 product (the ones near zero) miss the challenge's absolute 1e-3. It is held
  to the challenge bound plus 2^-12 of the sum of |terms| (reference.assert_close_fp8_tensor_core) -- a
  wrong scale, tile or K block still fails by orders of magnitude;
- GEMM_CUDA_EXACT_ACCUMULATION=1 (fp16 operands, fp32 accumulation): the challenge bound itself.
"""
import pytest
import torch

from reference import (
    assert_close_challenge,
    assert_close_fp8_tensor_core,
    make_inputs,
    poisoned_out,
    reference_gemm,
    reference_gemm_on_device,
)


def _sm90_available():
    if not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(0) == (9, 0)


pytestmark = pytest.mark.skipif(not _sm90_available(), reason="needs a CUDA device of compute capability 9.0")

if _sm90_available():
    import gemm


FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz

# AMD challenge: the 18 benchmark shapes (gemm_shapes.json).
BENCH_SHAPES = [(m, n, k) for m in (1024, 6144)
                for (n, k) in ((1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048), (4608, 7168),
                               (7168, 2304), (512, 7168), (4096, 512))]
# DeepGEMM's test shapes: M x (N, K).
DEEPGEMM_SHAPES = [(m, n, k) for m in (64, 128, 4096)
                   for (n, k) in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
                                  (7168, 2048))]


def _shape_id(s):
    return "x".join(map(str, s))


def check(out, a, b, a_scale, b_scale, exact):
    if exact:
        assert_close_challenge(out, reference_gemm_on_device(a, b, a_scale, b_scale).cpu())
    else:
        assert_close_fp8_tensor_core(out, a, b, a_scale, b_scale)


@pytest.fixture(params=["fp8", "exact"])
def accumulation(request, monkeypatch):
    """Runs a test on both paths: the default fp8 one and GEMM_CUDA_EXACT_ACCUMULATION=1."""
    if request.param == "exact":
        monkeypatch.setenv("GEMM_CUDA_EXACT_ACCUMULATION", "1")
    else:
        monkeypatch.delenv("GEMM_CUDA_EXACT_ACCUMULATION", raising=False)
    return request.param


def _as_torch_scaled_mm_scales(a_scale, b_scale):
    """The scale layouts torch._scaled_mm's blockwise recipe expects (and our zero-copy fast path):
    a_scale contiguous along M, b_scale contiguous along K with a 4-padded row stride."""
    a_mn = a_scale.t().contiguous().t()
    nb, kb = b_scale.shape
    kbp = (kb + 3) // 4 * 4
    b_pad = torch.zeros((nb, kbp), dtype=b_scale.dtype, device=b_scale.device)
    b_pad[:, :kb] = b_scale
    return a_mn, b_pad[:, :kb]


def run_and_check(m, n, k, dtype, layout, seed, scales="as_drawn", out_kind="contiguous", exact=False):
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, layout, seed, device="cuda")
    if scales == "torch":
        a_scale, b_scale = _as_torch_scaled_mm_scales(a_scale, b_scale)
    if out_kind == "contiguous":
        out = poisoned_out(m, n, device="cuda")
    else:  # rows not 16-byte aligned: the staged-output path
        out = torch.full((m, n + 3), float("nan"), dtype=torch.bfloat16, device="cuda")[:, :n]
    result = gemm.gemm(a, b, a_scale, b_scale, out=out)
    assert result is out
    torch.cuda.synchronize()
    check(out, a, b, a_scale, b_scale, exact)


@pytest.mark.parametrize("shape", BENCH_SHAPES, ids=_shape_id)
def test_torch_scale_layout_fast_path(shape):
    run_and_check(*shape, FN, "k_major", seed=7, scales="torch")


@pytest.mark.parametrize("kernel", ["dispatch", "tile128x128", "tile192x128", "cutlass128x128"])
@pytest.mark.parametrize("m", [130, 257, 333, 1000])
def test_row_scales_padded_to_four(m, kernel, monkeypatch):
    """a_scale as fp8_act_quant stores it: (ceil(M / 4) * 4, K / 128) M-contiguous storage, a (M, K / 128)
    view with M % 4 != 0. The tile kernels read it in place, CUTLASS's through the preparation pass."""
    if kernel != "dispatch":
        monkeypatch.setenv("GEMM_CUDA_CONFIG", f"{kernel},dp,1,8")
    n, k = 1536, 2048
    a, b, a_scale, b_scale = make_inputs(m, n, k, FN, "k_major", seed=m, device="cuda")
    storage = torch.full(((k + 127) // 128, (m + 3) // 4 * 4), float("nan"), device="cuda")
    storage[:, :m] = a_scale.T
    out = poisoned_out(m, n, device="cuda")
    gemm.gemm(a, b, storage[:, :m].T, b_scale, out=out)
    torch.cuda.synchronize()
    check(out, a, b, a_scale, b_scale, exact=False)


@pytest.mark.parametrize("layout", ["mn_stride_m", "k_major", "offset"])
@pytest.mark.parametrize("kernel", ["dispatch", "tile64x32", "tile64x64", "tile128x128", "tile192x144", "tile256x128"])
@pytest.mark.parametrize("m", [1, 2, 3, 13, 16])
def test_tile_kernels_read_few_rows_of_scales_tma_cannot(m, kernel, layout, monkeypatch):
    """Up to 16 rows the tile kernels read in place an a_scale whose K-block stride or base is not 16-byte
    aligned (their producer copies it next to b_scale): M-contiguous with a K-block stride of M floats, the
    (M, K / 128) contiguous tensor (in place at M = 1, copied by the launcher above), a base 4 bytes off."""
    if kernel != "dispatch":
        split = ["dp,1", "streamk,1", "splitk,3"][(m + len(layout)) % 3]
        monkeypatch.setenv("GEMM_CUDA_CONFIG", f"{kernel},{split},8")
    n, k = 2056, 1000
    kb = (k + 127) // 128
    a, b, a_scale, b_scale = make_inputs(m, n, k, FN, "k_major", seed=100 + m, device="cuda")
    if layout == "mn_stride_m":
        sa = a_scale.T.contiguous().T
    elif layout == "k_major":
        sa = a_scale.contiguous()
    else:
        ld = (m + 3) // 4 * 4
        storage = torch.full((1 + ld * kb,), float("nan"), device="cuda")
        sa = storage[1:].as_strided((m, kb), (1, ld))
        sa.copy_(a_scale)
    assert torch.equal(sa, a_scale)
    out = poisoned_out(m, n, device="cuda")
    gemm.gemm(a, b, sa, b_scale, out=out)
    torch.cuda.synchronize()
    check(out, a, b, a_scale, b_scale, exact=False)


@pytest.mark.parametrize("shape", DEEPGEMM_SHAPES, ids=_shape_id)
def test_deepgemm_shapes(shape):
    run_and_check(*shape, FN, "k_major", seed=11, scales="torch")


def test_fp8_path_is_not_exact_but_exact_path_is(monkeypatch):
    """Documents the accuracy classes: on a K = 7168 product the fp8 tensor-core path misses the
    plain challenge bound on a few near-zero outputs, the exact-accumulation path meets it."""
    m, n, k = 256, 1536, 7168
    a, b, a_scale, b_scale = make_inputs(m, n, k, FN, "k_major", seed=4, device="cuda")
    ref = reference_gemm_on_device(a, b, a_scale, b_scale)
    outs = {}
    for mode in ("fp8", "exact"):
        if mode == "exact":
            monkeypatch.setenv("GEMM_CUDA_EXACT_ACCUMULATION", "1")
        outs[mode] = gemm.gemm(a, b, a_scale, b_scale)
        torch.cuda.synchronize()
    fails = {mode: int(((o.to(torch.float64) - ref).abs() > 1e-3 + 2e-2 * ref.abs()).sum()) for mode, o in outs.items()}
    assert fails["exact"] == 0
    assert fails["fp8"] < 0.01 * m * n  # a handful of near-zero outputs, not a broken kernel


# The tile kernels (gemm_cuda/sm90_tile_kernel.cuh): data-parallel, stream-K and split-K (2, 3), forced
# through GEMM_CUDA_CONFIG="kernel,split,splits,group" on shapes with edge tiles in M and N, K tails,
# K < 128 (split-K then runs unsplit), tiles cut across 2-6 CTAs (the fix-up path) and the workspace
# paths (MN-major inputs, fnuz, unaligned output rows). 6144x576x1536 has more tiles than SMs: the
# 128x128 stream-K build splits only its partial last wave there (stream_k_partial_wave_only), the others
# one full wave as well. On 1900x2300x2000 every stream-K request runs whole waves and then its partial
# wave (at most half of the SMs) as split-K units at common K offsets (split_k_tail_splits).
TILE_KERNELS = ["tile128x128", "tile64x128", "tile128x192", "tile128x64", "tile192x128", "tile192x144", "tile64x64",
                "tile64x32", "tile256x128", "tile64x48", "tile64x96", "tile128x96"]
TILE_SHAPES = [(1, 576, 208), (127, 576, 2304), (130, 100, 100), (257, 129, 1000), (129, 4608, 7168),
               (384, 960, 4096), (1000, 192, 384), (6144, 576, 1536), (1900, 2300, 2000)]
TILE_LAYOUTS = [("k_major", FN, "contiguous"), ("mn_major", FNUZ, "contiguous"), ("k_major", FNUZ, "strided"),
                ("mn_major", FN, "contiguous")]
SPLITS = {"dp": "dp,1", "streamk": "streamk,1", "splitk2": "splitk,2", "splitk3": "splitk,3"}


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("kernel", TILE_KERNELS)
@pytest.mark.parametrize("shape", TILE_SHAPES, ids=_shape_id)
def test_tile_kernels(shape, kernel, split, monkeypatch):
    monkeypatch.setenv("GEMM_CUDA_CONFIG", f"{kernel},{SPLITS[split]},8")
    i = TILE_SHAPES.index(shape) + TILE_KERNELS.index(kernel) + list(SPLITS).index(split)
    layout, dtype, out_kind = TILE_LAYOUTS[i % len(TILE_LAYOUTS)]
    run_and_check(*shape, dtype, layout, seed=i, out_kind=out_kind)


def test_config_override_ignores_malformed_values(monkeypatch):
    for bad in ("x", "tile128x128,dp", "tile128x128,dp,1,8,9", "tile99,dp,1,8", "tile128x128,dp,0,8", "tile128x128,dp,1,257",
                "tile128x128;dp;1;8", "tile128x128,sideways,1,8", "decode,splitk,4,128"):  # decode: M > 64
        monkeypatch.setenv("GEMM_CUDA_CONFIG", bad)
        run_and_check(130, 100, 100, FN, "k_major", seed=1)


def test_gpu_reference_matches_cpu_reference():
    a, b, a_scale, b_scale = make_inputs(130, 200, 300, FNUZ, "mn_major", 1, device="cuda")
    torch.testing.assert_close(reference_gemm_on_device(a, b, a_scale, b_scale).cpu(), reference_gemm(a, b, a_scale, b_scale),
                               rtol=1e-12, atol=1e-12)


def _padded_operand(values, layout, pad, nan_byte):
    """`values` (rows, K) as a view with a padded leading dimension: MN-major (strides (1, ld)) or
    K-major (strides (ld, 1)), ld = the contiguous extent rounded up to 16 plus `pad`. The padding
    holds NaN bytes, so a pass that reads past the logical extent shows up in the output."""
    rows, k = values.shape
    inner = rows if layout == "mn_major" else k
    ld = (inner + 15) // 16 * 16 + pad
    outer = k if layout == "mn_major" else rows
    base = torch.full((outer, ld), nan_byte, dtype=torch.uint8, device=values.device).view(values.dtype)
    if layout == "mn_major":
        base[:, :rows] = values.T
        return base[:, :rows].T
    base[:, :k] = values
    return base[:, :k]


# (rows of the permuted operand, K): rows and K cut the 128x128 preparation tiles, the 16-row / 16-byte
# chunks and the 32- / 64-row CTAs of the K-contiguous copies; K % 16 != 0 pads the rows the kernel reads.
# The pass cuts K-contiguous copies into 32 rows per CTA for the small shapes, 64 for (2000, 2048) and, fp8
# out, 128 for (4000, 4096) (prep::kmajor_copy_rows on 132 SMs).
PERMUTATION_SHAPES = [(1, 16), (100, 208), (16, 264), (257, 1000), (144, 130), (33, 7), (2000, 2048), (4000, 4096)]


# Leading-dimension padding: 16-byte aligned rows / columns (16- or 8-byte loads), 8- and 4-byte aligned
# ones (narrower loads on the vectorised paths), and an odd one (the generic byte path).
@pytest.mark.parametrize("pad", [0, 1, 4, 8, 16], ids=["ld16", "ld16+1", "ld16+4", "ld16+8", "ld16+16"])
@pytest.mark.parametrize("layout", ["mn_major", "k_major"])
@pytest.mark.parametrize("dtype", [FN, FNUZ], ids=["fn", "fnuz"])
@pytest.mark.parametrize("shape", PERMUTATION_SHAPES, ids=_shape_id)
def test_preparation_pass_is_exact(shape, dtype, layout, pad, accumulation):
    """The operand preparation (transpose / pad / fnuz conversion) checked bit for bit: with one operand
    a permutation matrix of ones and unit scales, each output is one fp8 value of the other operand
    times 1 (exact in fp32 and in bf16), so out must equal the permuted operand exactly. Operands are
    views with a padded leading dimension filled with NaN bytes: 16-, 8- and 4-byte aligned (the
    vectorised transpose and K-contiguous copies with their narrower loads), odd (the generic byte path);
    K % 16 != 0: the padded-K path."""
    rows, k = shape
    gen = torch.Generator(device="cuda").manual_seed(rows * 7 + k)
    nan_byte = 0x80 if dtype == FNUZ else 0x7F
    x = torch.randn((rows, k), generator=gen, device="cuda") * 8
    vals = torch.where(x.abs() < 2.0 ** -5, torch.full_like(x, 0.75), x).to(dtype)  # normal fp8 values only
    perm = torch.randperm(k, generator=gen, device="cuda")
    ones = torch.zeros((k, k), device="cuda")
    ones[torch.arange(k, device="cuda"), perm] = 1.0
    ones = ones.to(dtype)  # ones[i, perm[i]] = 1
    kb = (k + 127) // 128
    expected = vals.to(torch.float32)[:, perm]  # (rows, k)
    for side in ("a", "b"):
        op = _padded_operand(vals, layout, pad, nan_byte)
        other = _padded_operand(ones, layout, pad, nan_byte)
        if side == "a":  # out (rows, k)[m, n] = vals[m, perm[n]]
            a, b, m, n, want = op, other, rows, k, expected
        else:  # out (k, rows)[m, n] = vals[n, perm[m]]
            a, b, m, n, want = other, op, k, rows, expected.T
        a_scale = torch.ones((m, kb), device="cuda")
        b_scale = torch.ones(((n + 127) // 128, kb), device="cuda")
        out = poisoned_out(m, n, device="cuda")
        gemm.gemm(a, b, a_scale, b_scale, out=out)
        torch.cuda.synchronize()
        assert torch.equal(out.to(torch.float32), want), (
            f"operand {side}: {int((out.to(torch.float32) != want).sum())} of {want.numel()} outputs differ")


@pytest.mark.parametrize("layout,dtype", [("mn_major", FN), ("k_major", FNUZ), ("k_major", FN)],
                         ids=["mn-fn", "kmajor-fnuz", "kmajor-fn"])
def test_cuda_graph_replay(layout, dtype, accumulation):
    """Captured into a CUDA graph (as torch.compile's reduce-overhead mode and serving engines do) and
    replayed on new inputs: the preparation pass, the GEMM kernel launched as its programmatic dependent
    and the workspace from the graph's memory pool must replay in order and read each replay's inputs.
    K-major e4m3fn takes no pass (the control)."""
    m, n, k = 300, 1000, 1024
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, layout, seed=31, device="cuda")
    out = poisoned_out(m, n, device="cuda")
    gemm.gemm(a, b, a_scale, b_scale, out=out)  # first call outside the capture (one-time kernel attributes)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemm.gemm(a, b, a_scale, b_scale, out=out)
    for seed in (32, 33):
        new = make_inputs(m, n, k, dtype, layout, seed=seed, device="cuda")
        for dst, src in zip((a, b, a_scale, b_scale), new):  # in place: the graph holds these addresses
            if dst.dtype == dtype:
                dst.view(torch.uint8).copy_(src.view(torch.uint8))
            else:
                dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, a, b, a_scale, b_scale, accumulation == "exact")


def test_uses_current_stream():
    m, n, k = 1024, 1536, 7168
    a, b, a_scale, b_scale = make_inputs(m, n, k, FN, "k_major", seed=2, device="cuda")
    s = torch.cuda.Stream()
    out = poisoned_out(m, n, device="cuda")
    torch.cuda.current_stream().synchronize()
    with torch.cuda.stream(s):
        gemm.gemm(a, b, a_scale, b_scale, out=out)
        # Enqueued on s: once s is done the result must be complete.
        done = torch.cuda.Event()
        done.record(s)
    done.synchronize()
    check(out, a, b, a_scale, b_scale, exact=False)
