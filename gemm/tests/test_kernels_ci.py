"""Smoke tests kernels-community's CI runs against a built variant: ``pytest tests -m kernels_ci``.

Fast (seconds on a CPU), and they import only torch, numpy, pytest and the kernel. There the variant is
loaded through ``LOCAL_KERNELS`` (see conftest.py); with an editable install they test that. Each runs on
the device the loaded build serves (a variant holds one backend), against a float64 NumPy evaluation of
the formula on fresh random inputs, and skips with its reason on a GPU the build was not compiled for
(kernels-community runs CUDA tests on an L4, sm_89; the CUDA backend is built for sm_90a only).
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import gemm

pytestmark = pytest.mark.kernels_ci

KERNEL_DIR = Path(__file__).resolve().parents[1]
BLOCK = 128


def _build_info():
    """(device, archs the loaded build was compiled for or None): metadata.json of a variant, else build.toml."""
    meta = Path(gemm.__file__).parent / "metadata.json"
    if meta.is_file():
        backend = json.loads(meta.read_text())["backend"]
        return ("cpu" if backend["type"] == "cpu" else "cuda"), backend.get("archs")
    if not torch.cuda.is_available():
        return "cpu", None
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(KERNEL_DIR / "build.toml", "rb") as f:
        sections = tomllib.load(f)["kernel"].values()
    key, backend = ("rocm-archs", "rocm") if torch.version.hip else ("cuda-capabilities", "cuda")
    archs = [a for s in sections if s["backend"] == backend for a in s.get(key, [])]
    return "cuda", archs or None


DEVICE, ARCHS = _build_info()


def _unsupported_gpu():
    if DEVICE == "cpu" or not ARCHS:
        return None
    if torch.version.hip:
        arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
        return None if arch in ARCHS else f"this build runs on {ARCHS} only; this GPU is {arch}"
    major, minor = torch.cuda.get_device_capability(0)
    base = f"{major}.{minor}"
    # "9.0a" code runs on 9.0 exactly; "X.Y+PTX" on X.Y and newer.
    for arch in ARCHS:
        plain = arch.removesuffix("+PTX").rstrip("af")
        if plain == base or (arch.endswith("+PTX") and tuple(map(int, plain.split("."))) <= (major, minor)):
            return None
    return f"this build is compiled for {ARCHS} only; this GPU is sm_{major}{minor}"


if _unsupported_gpu():
    pytest.skip(_unsupported_gpu(), allow_module_level=True)


@pytest.fixture
def gen():
    seed = int(np.random.SeedSequence().entropy % 2**63)
    print(f"seed {seed}")
    return torch.Generator().manual_seed(seed)


def _inputs(m, n, k, dtype, layout, gen):
    """Standard-normal bf16 cast to fp8 and standard-normal fp32 scales; "mn_major" is the AMD challenge's
    layout (transposed views), "k_major" row-major tensors."""
    kb, nb = math.ceil(k / BLOCK), math.ceil(n / BLOCK)

    def randn(*shape):
        return torch.randn(shape, generator=gen)

    if layout == "mn_major":
        a, b = randn(k, m).to(torch.bfloat16).to(dtype).T, randn(k, n).to(torch.bfloat16).to(dtype).T
        a_scale, b_scale = randn(kb, m).T, randn(kb, nb).T
    else:
        a, b = randn(m, k).to(torch.bfloat16).to(dtype), randn(n, k).to(torch.bfloat16).to(dtype)
        a_scale, b_scale = randn(m, kb), randn(nb, kb)
    return a, b, a_scale, b_scale


def _reference(a, b, a_scale, b_scale):
    """(ref, mass) in float64: out[m, n] = sum_kb a_scale[m, kb] * b_scale[n // 128, kb] * sum_{k in kb}
    a[m, k] * b[n, k], and the same sum over the magnitudes of its terms."""
    a64 = a.float().double().numpy()  # fp8 -> fp32 is exact
    b64 = b.float().double().numpy()
    sa, sb = a_scale.double().numpy(), b_scale.double().numpy()
    m, k = a64.shape
    n = b64.shape[0]
    out, mass = np.zeros((m, n)), np.zeros((m, n))
    for i in range(math.ceil(k / BLOCK)):
        cols = slice(i * BLOCK, min(k, (i + 1) * BLOCK))
        scale = sa[:, i, None] * sb[np.arange(n) // BLOCK, i][None, :]
        out += scale * (a64[:, cols] @ b64[:, cols].T)
        mass += np.abs(scale) * (np.abs(a64[:, cols]) @ np.abs(b64[:, cols]).T)
    return out, mass


@pytest.mark.parametrize("layout,dtype", [("k_major", torch.float8_e4m3fn), ("mn_major", torch.float8_e4m3fnuz)])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (37, 130, 300), (64, 256, 512), (96, 576, 1024)])
def test_matches_float64_reference(m, n, k, layout, dtype, gen):
    a, b, a_scale, b_scale = _inputs(m, n, k, dtype, layout, gen)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=DEVICE)  # poisoned
    args = [t.to(DEVICE) for t in (a, b, a_scale, b_scale)]
    assert gemm.gemm(*args, out=out) is out
    want, mass = _reference(a, b, a_scale, b_scale)
    got = out.cpu().double().numpy()
    # The AMD challenge's check (NaN fails it). On a GPU plus 2^-12 of the sum of |terms|: the fp8 tensor
    # cores keep about 13 fraction bits while they add up a K block (every Hopper FP8 GEMM misses the plain
    # bound on a few near-zero outputs); a wrong scale, block or tile still misses it by orders of magnitude.
    slack = 2.0 ** -12 * mass if DEVICE != "cpu" else 0.0
    bad = ~(np.abs(got - want) <= 1e-3 + 2e-2 * np.abs(want) + slack)
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements off, e.g. {got[bad][:4]} vs {want[bad][:4]}"


def test_allocates_bfloat16_output(gen):
    a, b, a_scale, b_scale = (t.to(DEVICE) for t in _inputs(5, 9, 200, torch.float8_e4m3fn, "k_major", gen))
    out = gemm.gemm(a, b, a_scale, b_scale)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (5, 9) and out.device.type == DEVICE


def test_bad_dtype_names_the_argument(gen):
    a, b, a_scale, b_scale = (t.to(DEVICE) for t in _inputs(4, 8, 128, torch.float8_e4m3fn, "k_major", gen))
    with pytest.raises(RuntimeError, match=r"a must be torch.float8_e4m3fnuz or torch.float8_e4m3fn, got torch.bfloat16"):
        gemm.gemm(a.to(torch.bfloat16), b, a_scale, b_scale)


def test_meta_tensors_give_the_output_shape():
    a = torch.empty((6, 256), dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty((10, 256), dtype=torch.float8_e4m3fn, device="meta")
    out = gemm.gemm(a, b, torch.empty((6, 2), device="meta"), torch.empty((1, 2), device="meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (6, 10) and out.dtype == torch.bfloat16


# ---- fine-grained FP8: fp8_act_quant and matmul_2d ------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
@pytest.mark.parametrize("shape", [(1, 1), (7, 300), (2, 3, 1000)])
def test_fp8_act_quant_matches_its_definition(shape, dtype, gen):
    # scale = max(amax / fp8_max, 1e-12) per row and 128-wide group in float32; q = torch's own
    # round-to-nearest-even cast of clamp(x / scale), byte for byte.
    x = (torch.randn(shape, generator=gen) * 10).to(torch.bfloat16)
    q, scale = gemm.fp8_act_quant(x.to(DEVICE), 128, dtype)
    k, fp8_max = shape[-1], torch.finfo(dtype).max
    assert q.dtype == dtype and tuple(q.shape) == shape and scale.shape == (*shape[:-1], math.ceil(k / BLOCK))
    x32 = x.float().reshape(-1, k).numpy()
    groups = np.arange(k) // BLOCK
    amax = np.stack([np.abs(x32[:, groups == g]).max(axis=1) for g in range(math.ceil(k / BLOCK))], axis=1)
    want_scale = np.maximum(amax / np.float32(fp8_max), np.float32(1e-12)).astype(np.float32)
    np.testing.assert_array_equal(scale.cpu().reshape(-1, amax.shape[1]).numpy(), want_scale)
    quotient = np.clip(x32 / want_scale[:, groups], -fp8_max, fp8_max).astype(np.float32)
    want_q = torch.from_numpy(quotient).to(dtype).view(torch.uint8).numpy()
    np.testing.assert_array_equal(q.cpu().view(torch.uint8).reshape(-1, k).numpy(), want_q)


@pytest.mark.parametrize("m,n,k", [(1, 130, 300), (33, 576, 1024)])
def test_matmul_2d_matches_float64_reference(m, n, k, gen):
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    w = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    w_scale = torch.rand(math.ceil(n / BLOCK), math.ceil(k / BLOCK), generator=gen) + 0.5
    y = gemm.matmul_2d(x.to(DEVICE), w.to(DEVICE), w_scale.to(DEVICE), [128, 128])
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == (m, n)
    q, scale = gemm.fp8_act_quant(x.to(DEVICE), 128, torch.float8_e4m3fn)
    q, scale = q.cpu().float(), scale.cpu()
    # Hopper's fp8 tensor cores keep ~13 fraction bits inside a 128-wide block: 2^-12 of the sum of |terms|.
    want, mass = _reference(q, w, scale, w_scale)
    got = y.cpu().double().numpy()
    bad = ~(np.abs(got - want) <= 1e-3 + 2e-2 * np.abs(want) + 2.0**-12 * mass)
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements off, e.g. {got[bad][:4]} vs {want[bad][:4]}"


# ---- mixture-of-experts: matmul_batched and matmul_grouped ----------------------------------------


@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.float8_e8m0fnu])
def test_expert_gemms_match_float64_reference(scale_dtype, gen):
    s, n, k, e = 40, 200, 300, 5
    x = torch.randn(s, k, generator=gen).to(torch.bfloat16)
    w = torch.randn(e, n, k, generator=gen).to(torch.float8_e4m3fn)
    shape = (e, math.ceil(n / BLOCK), math.ceil(k / BLOCK))
    if scale_dtype == torch.float32:
        w_scale = torch.rand(shape, generator=gen) + 0.5
    else:  # UE8M0: 2^(code - 127)
        w_scale = torch.randint(124, 131, shape, generator=gen, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    ids = torch.randint(-1, e + 1, (s,), generator=gen)  # -1 and e: placeholder rows
    expert = torch.where((ids >= 0) & (ids < e), ids, torch.full_like(ids, e))
    perm = torch.argsort(expert, stable=True)
    counts = torch.bincount(expert, minlength=e + 1)[:e]
    offsets = torch.cumsum(counts, 0).to(torch.int32)
    dev = [t.to(DEVICE) for t in (x, w, w_scale)]
    batched = gemm.matmul_batched(*dev, ids.to(DEVICE), [128, 128]).cpu()
    grouped = gemm.matmul_grouped(dev[0][perm.to(DEVICE)], dev[1], dev[2], offsets.to(DEVICE),
                                  counts.to(torch.int32).to(DEVICE), [128, 128]).cpu()
    assert batched.dtype == grouped.dtype == torch.bfloat16 and batched.shape == grouped.shape == (s, n)
    q, scale = gemm.fp8_act_quant(x.to(DEVICE), 128, torch.float8_e4m3fn)
    q, scale = q.cpu().float(), scale.cpu()
    w_scale64 = torch.exp2(w_scale.view(torch.uint8).double() - 127) if scale_dtype != torch.float32 else w_scale
    placeholder = expert == e
    assert not batched[placeholder].any() and not grouped[int(counts.sum()):].any()  # rows of no expert: zeros
    for j in range(e):
        rows = (expert == j).nonzero().flatten()
        if rows.numel() == 0:
            continue
        want, mass = _reference(q[rows], w[j], scale[rows], w_scale64[j])
        start = int(counts[:j].sum())
        for got in (batched[rows], grouped[start : start + rows.numel()]):
            got = got.double().numpy()
            bad = ~(np.abs(got - want) <= 1e-3 + 2e-2 * np.abs(want) + 2.0**-12 * mass)
            assert not bad.any(), f"expert {j}: {int(bad.sum())} of {bad.size} elements off"
