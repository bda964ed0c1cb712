"""The CPU backend against the float64 reference (and against itself where bits must not change)."""
import os
import shutil
import subprocess

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import gemm
from reference import (
    FP8_DTYPES,
    LAYOUTS,
    assert_close_challenge,
    make_inputs,
    poisoned_out,
    reference_gemm,
)

# The 11 correctness cases of the AMD challenge (M, N, K, seed), gpu-mode amd-fp8-mm task.yml.
CHALLENGE_TESTS = [
    (64, 64, 128, 6635),
    (64, 1536, 7168, 6635),
    (64, 3072, 1536, 1236),
    (64, 576, 7168, 542),
    (96, 7168, 256, 1234),
    (96, 7168, 2048, 4153),
    (96, 4608, 7168, 412),
    (128, 7168, 2304, 624),
    (128, 512, 7168, 2514),
    (512, 4096, 512, 543),
    (512, 1536, 7168, 12341),
]


def run(a, b, a_scale, b_scale):
    out = poisoned_out(a.shape[0], b.shape[0])
    result = gemm.gemm(a, b, a_scale, b_scale, out=out)
    assert result is out
    return out


@pytest.mark.parametrize(
    "layout,dtype",
    [("mn_major", torch.float8_e4m3fnuz), ("k_major", torch.float8_e4m3fn)],
    ids=["challenge-fnuz", "kmajor-fn"],
)
@pytest.mark.parametrize("m,n,k,seed", CHALLENGE_TESTS, ids=[f"{m}x{n}x{k}" for m, n, k, _ in CHALLENGE_TESTS])
def test_challenge_shapes(m, n, k, seed, layout, dtype):
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, layout, seed)
    assert_close_challenge(run(a, b, a_scale, b_scale), reference_gemm(a, b, a_scale, b_scale))


@given(
    m=st.integers(1, 300),
    n=st.integers(1, 300),
    k=st.integers(1, 700),
    layout=st.sampled_from(LAYOUTS),
    dtype=st.sampled_from(FP8_DTYPES),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_shapes(m, n, k, layout, dtype, seed):
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, layout, seed)
    assert_close_challenge(run(a, b, a_scale, b_scale), reference_gemm(a, b, a_scale, b_scale))


def test_allocates_out_when_none():
    a, b, a_scale, b_scale = make_inputs(70, 200, 300, seed=5)
    out = gemm.gemm(a, b, a_scale, b_scale)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (70, 200) and out.device == a.device
    assert_close_challenge(out, reference_gemm(a, b, a_scale, b_scale))


@pytest.mark.parametrize("dtype", FP8_DTYPES)
def test_exact_when_no_fp32_rounding_happens(dtype):
    # Small fp8 values (multiples of 1/4 up to 16) and power-of-two scales keep every partial sum
    # and every scaled accumulation exactly representable in fp32, so out must equal the float64
    # result rounded once to bf16 -- bit for bit, on both layouts.
    m, n, k = 37, 300, 1000
    gen = torch.Generator().manual_seed(7)
    values = torch.tensor([0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16], dtype=torch.float32)
    values = torch.cat([values, -values])

    def draw(*shape):
        return values[torch.randint(len(values), shape, generator=gen)]

    a = draw(m, k).to(dtype)
    b = draw(n, k).to(dtype)
    a_scale = torch.exp2(torch.randint(-2, 3, (m, 8), generator=gen).float())
    b_scale = -torch.exp2(torch.randint(-2, 3, (3, 8), generator=gen).float())
    expected = reference_gemm(a, b, a_scale, b_scale).to(torch.float32).to(torch.bfloat16)
    for a_, b_ in ((a, b), (a.T.contiguous().T, b.T.contiguous().T)):
        assert torch.equal(run(a_, b_, a_scale, b_scale), expected)


@pytest.mark.parametrize("dtype", FP8_DTYPES)
def test_every_fp8_code_decodes_like_torch(dtype):
    # Row i of a holds fp8 code i at k = 0 and b is 1.0 there: out[i, 0] is exactly decode(i)
    # (bf16 holds every e4m3 value). NaN codes must come out NaN.
    codes = torch.arange(256, dtype=torch.uint8)
    a = torch.zeros(256, 3, dtype=torch.uint8)
    a[:, 0] = codes
    a = a.view(dtype)
    b = torch.ones(1, 3, dtype=torch.float32).to(dtype)
    out = run(a, b, torch.ones(256, 1), torch.ones(1, 1))
    expected = codes.view(dtype).to(torch.float32).to(torch.bfloat16)
    torch.testing.assert_close(out[:, 0], expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bits_do_not_depend_on_thread_count_or_layout(layout, restore_num_threads):
    a, b, a_scale, b_scale = make_inputs(200, 333, 1000, torch.float8_e4m3fnuz, layout, seed=11)
    torch.set_num_threads(1)
    single = run(a, b, a_scale, b_scale)
    torch.set_num_threads(max(2, restore_num_threads))
    multi = run(a, b, a_scale, b_scale)
    other = run(a.T.contiguous().T if layout == "k_major" else a.contiguous(), b.contiguous(), a_scale, b_scale)
    assert torch.equal(single, multi)
    assert torch.equal(single, other)


@pytest.mark.parametrize("dtype", FP8_DTYPES)
def test_portable_path_matches_simd_path(dtype, monkeypatch):
    # The portable (non-AVX2) micro-kernel runs on other CPUs; it must give the same bits.
    a, b, a_scale, b_scale = make_inputs(50, 300, 700, dtype, "mn_major", seed=12)
    default = run(a, b, a_scale, b_scale)
    monkeypatch.setenv("FP8GEMM_CPU_GENERIC", "1")
    portable = run(a, b, a_scale, b_scale)
    assert torch.equal(default, portable)
    assert_close_challenge(portable, reference_gemm(a, b, a_scale, b_scale))


def test_arbitrary_strides_and_strided_out():
    m, n, k = 45, 150, 260
    a, b, a_scale, b_scale = make_inputs(m, n, k, torch.float8_e4m3fn, "k_major", seed=3)
    ref = reference_gemm(a, b, a_scale, b_scale)
    # Every other column of a wider buffer, a negative-free but non-unit stride on both dims of b.
    a_wide = torch.zeros(m, 2 * k, dtype=torch.uint8).view(a.dtype)
    a_wide[:, ::2] = a
    b_big = torch.zeros(3 * n, 2 * k, dtype=torch.uint8).view(b.dtype)
    b_big[::3, 1::2] = b
    a_scale_t = a_scale.T.contiguous().T
    # out: a (M, N) window into a larger poisoned buffer; nothing outside the window may change.
    canvas = torch.full((m + 4, 2 * n + 6), float("nan"), dtype=torch.bfloat16)
    canvas_before = canvas.clone()
    out = canvas[2 : 2 + m, 3 : 3 + 2 * n : 2]
    gemm.gemm(a_wide[:, ::2], b_big[::3, 1::2], a_scale_t, b_scale, out=out)
    assert_close_challenge(out, ref)
    outside = torch.ones_like(canvas, dtype=torch.bool)
    outside[2 : 2 + m, 3 : 3 + 2 * n : 2] = False
    assert torch.equal(canvas[outside].isnan(), canvas_before[outside].isnan())
    # Transposed (column-major) out.
    out_t = poisoned_out(n, m).T
    gemm.gemm(a, b, a_scale, b_scale, out=out_t)
    assert_close_challenge(out_t, ref)


def test_broadcast_scales_and_inputs():
    # Zero strides (expand) on read-only arguments are fine.
    m, n, k = 20, 140, 300
    a, b, _, _ = make_inputs(m, n, k, seed=4)
    a_row = a[:1].expand(m, k)
    a_scale = torch.randn(1, 3).expand(m, 3)
    b_scale = torch.randn(2, 1).expand(2, 3)
    out = run(a_row, b, a_scale, b_scale)
    assert_close_challenge(out, reference_gemm(a_row, b, a_scale, b_scale))


@pytest.mark.parametrize("dtype", FP8_DTYPES)
def test_nan_and_inf_propagate(dtype):
    m, n, k = 9, 260, 300
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, "k_major", seed=8)
    nan_code = 0x80 if dtype == torch.float8_e4m3fnuz else 0x7F
    a = a.clone()
    a.view(torch.uint8)[2, 150] = nan_code  # row 2 all NaN
    b = b.clone()
    b.view(torch.uint8)[7, 0] = nan_code  # column 7 all NaN
    a_scale = a_scale.clone()
    a_scale[4, 1] = float("inf")  # row 4: +-inf (or NaN where that block's partial is 0)
    b_scale = b_scale.clone()
    b_scale[2, 0] = float("nan")  # columns 256.. all NaN
    out = run(a, b, a_scale, b_scale)
    ref = reference_gemm(a, b, a_scale, b_scale)
    assert ref[2].isnan().all() and ref[:, 7].isnan().all() and ref[:, 256:].isnan().all()
    assert ref[4].isinf().any()
    assert_close_challenge(out, ref)


@pytest.mark.parametrize("m,n", [(0, 5), (5, 0), (0, 0)])
def test_empty_m_or_n(m, n):
    a, b, a_scale, b_scale = make_inputs(m, n, 200, seed=1)
    out = gemm.gemm(a, b, a_scale, b_scale)
    assert tuple(out.shape) == (m, n)


def test_k_zero_gives_zeros():
    m, n = 3, 200
    a = torch.empty(m, 0, dtype=torch.float8_e4m3fnuz)
    b = torch.empty(n, 0, dtype=torch.float8_e4m3fnuz)
    out = poisoned_out(m, n)
    gemm.gemm(a, b, torch.empty(m, 0), torch.empty(2, 0), out=out)
    assert torch.equal(out, torch.zeros(m, n, dtype=torch.bfloat16))


def test_opcheck(monkeypatch):
    # opcheck's schema check compares arguments before/after with torch.allclose, which has no fp8
    # kernel; compare fp8 tensors bitwise instead (as vLLM's opcheck wrapper does).
    allclose = torch.allclose

    def allclose_fp8_aware(lhs, rhs, *args, **kwargs):
        if lhs.dtype in FP8_DTYPES or rhs.dtype in FP8_DTYPES:
            return lhs.dtype == rhs.dtype and torch.equal(lhs.view(torch.uint8), rhs.view(torch.uint8))
        return allclose(lhs, rhs, *args, **kwargs)

    monkeypatch.setattr(torch, "allclose", allclose_fp8_aware)
    for m, n, k, layout in ((33, 130, 200, "mn_major"), (1, 1, 1, "k_major")):
        a, b, a_scale, b_scale = make_inputs(m, n, k, layout=layout, seed=2)
        torch.library.opcheck(gemm.ops.gemm.default, (poisoned_out(m, n), a, b, a_scale, b_scale))


def test_torch_compile_fullgraph():
    a, b, a_scale, b_scale = make_inputs(64, 192, 384, seed=9)

    # Only the op and views in the graph: inductor then has no C++ of its own to compile (CI time).
    @torch.compile(fullgraph=True)
    def compiled(a, b, a_scale, b_scale):
        return gemm.gemm(a, b, a_scale, b_scale).T

    got = compiled(a, b, a_scale, b_scale)
    assert_close_challenge(got.T, reference_gemm(a, b, a_scale, b_scale))
    # out= form: the mutation must survive functionalization.
    out = poisoned_out(64, 192)
    torch.compile(gemm.gemm, fullgraph=True)(a, b, a_scale, b_scale, out=out)
    assert_close_challenge(out, reference_gemm(a, b, a_scale, b_scale))


def test_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b, a_scale, b_scale = make_inputs(48, 576, 7168, device="cpu")
        out = gemm.gemm(a, b, a_scale, b_scale)
        assert tuple(out.shape) == (48, 576) and out.dtype == torch.bfloat16


def test_fma_emulation_is_correctly_rounded(tmp_path):
    # The portable path's fp32 fma emulation (targets without hardware FMA), bit for bit vs libm.
    here = os.path.dirname(os.path.abspath(__file__))
    cxx = next((c for c in (os.environ.get("CXX"), "g++", "c++", "clang++") if c and shutil.which(c)), None)
    if cxx is None:
        pytest.fail("no C++ compiler found (set CXX)")
    exe = str(tmp_path / "fma_selftest")
    cmd = [cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-DFP8GEMM_EMULATE_FMA",
           "-I", os.path.join(os.path.dirname(here), "gemm_cpu"), os.path.join(here, "fma_f32_selftest.cpp"),
           "-o", exe, "-lm"]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr
