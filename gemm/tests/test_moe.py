"""The MoE expert GEMMs (matmul_batched, matmul_grouped) and UE8M0 scales, on every backend this build has
(CPU here; CUDA on an sm_90 GPU, skipped without one).

Every result is checked against an independent float64 reference: the activations are quantized by the
NumPy reference of fp8_act_quant (act_quant_reference.py), each expert's rows go through the float64 GEMM
formula (reference.py) with the expert's weights and scales (UE8M0 scales decoded as 2^(code - 127) here,
not by torch). Rows that belong to no expert must be exactly zero. Outputs come from memory filled with
NaN just before the call, so a row the kernel forgets to write cannot pass. The CPU backend must also be
bit-identical to gemm() of the same quantized rows. Bad input is test_moe_errors.py.
"""
import os
import random
import zlib

import numpy as np
import pytest
import torch

import gemm
from act_quant_reference import act_quant_ref
from reference import assert_close_fp8_tensor_core, reference_gemm

FP8 = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}
KIND_OF = {v: k for k, v in FP8.items()}
INDEX_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0"))
DEVICES = ["cpu", CUDA]
BLOCK = [128, 128]
# Fresh draws on every run; GEMM_MOE_SEED replays one (the seed is in every failure message).
SEED = int(os.environ.get("GEMM_MOE_SEED", random.SystemRandom().randrange(2**31)))


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


# The CUDA launcher picks the decode kernel (few rows per expert) or the tile kernel from the shapes; the
# reference tests run every case through its choice and through each kernel forced.
def _cuda_forced(kernel):
    return pytest.param(f"cuda:{kernel}", marks=pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0"))


@pytest.fixture(params=DEVICES + [_cuda_forced("decode"), _cuda_forced("tiles"), _cuda_forced("pairs")])
def expert_device(request, monkeypatch):
    dev, _, kernel = request.param.partition(":")
    if kernel:
        monkeypatch.setenv("GEMM_CUDA_EXPERT_KERNEL", kernel)
    return dev


def groups(x):
    return -(-x // 128)


def generator(*salt):
    return torch.Generator().manual_seed((SEED + zlib.crc32(repr(salt).encode())) % 2**63)


def activations(s, k, dtype, gen):
    """Normal values with a magnitude drawn per row and 128-wide group (very different group scales)."""
    exps = torch.randint(-12, 13, (s, groups(k)), generator=gen).repeat_interleave(128, 1)[:, :k]
    return (torch.randn(s, k, generator=gen) * torch.exp2(exps.float())).to(dtype)


def experts(e, n, k, kind, scale_format, gen):
    """B (E, N, K) fp8, Bs (E, ceil(N/128), ceil(K/128)) as the op takes it, and Bs in float64 decoded here."""
    b = torch.randn(e, n, k, generator=gen).to(FP8[kind])
    shape = (e, groups(n), groups(k))
    if scale_format == "e8m0":
        codes = torch.randint(118, 136, shape, generator=gen, dtype=torch.uint8)
        return b, codes.view(torch.float8_e8m0fnu), torch.exp2(codes.to(torch.float64) - 127)
    scale = torch.randn(shape, generator=gen)  # signed, not powers of two
    return b, scale, scale.to(torch.float64)


def routing(kind, s, e, gen):
    """(S,) int64 expert ids; ids outside [0, E) are placeholders."""
    if kind == "uniform":
        return torch.randint(0, e, (s,), generator=gen)
    if kind == "skewed":  # a few experts take most rows, about half get none
        weight = 1.0 / torch.arange(1, e + 1, dtype=torch.float64) ** 2
        weight[torch.randperm(e, generator=gen)[: e // 2]] = 0.0
        weight[int(torch.argmax(weight))] += 1.0
        return torch.multinomial(weight, s, replacement=True, generator=gen)
    if kind == "one":
        return torch.full((s,), int(torch.randint(0, e, (1,), generator=gen)))
    if kind == "placeholders":  # expert-parallel sentinels (>= E) and negative ids among real ones
        ids = torch.randint(0, e, (s,), generator=gen)
        bad = torch.rand(s, generator=gen) < 0.3
        junk = torch.tensor([e, e + 3, -1, -7, 2**31 - 1])[torch.randint(0, 5, (s,), generator=gen)]
        return torch.where(bad, junk, ids)
    raise ValueError(kind)


def quantized_reference(a, kind):
    """The activations quantized by the NumPy reference: (q fp8 (S, K), scale float32 (S, G))."""
    q, scale = act_quant_ref(a.float().numpy(), kind)
    return torch.from_numpy(q).view(FP8[kind]), torch.from_numpy(scale)


def poison_allocator(elements, device):
    """Frees a block of NaN so the op's output is likely to be carved from NaN-filled memory."""
    junk = torch.full((elements,), float("nan"), dtype=torch.float32, device=device)
    del junk


def assert_close_cpu(out, a, b, a_scale, b_scale, what):
    """The CPU backend: the challenge bound plus the fp32 summation error of its exact products, 2^-15 of the
    sum of |terms| (as backends.py); NaN positions must match."""
    ref = reference_gemm(a, b, a_scale, b_scale)
    mass = reference_gemm(a.float().abs(), b.float().abs(), a_scale.abs(), b_scale.abs())
    got = out.detach().cpu().to(torch.float64)
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), f"{what}: NaN positions differ (seed {SEED})"
    bad = (got - ref).abs() > 1e-3 + 2e-2 * ref.abs() + 2.0**-15 * mass
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.numel()} elements off (seed {SEED})"


def check(c, a, b, bs64, expert_of_row, device):
    """c (S, N) against the float64 reference per expert; rows of expert -1 must be exactly zero."""
    kind = KIND_OF[b.dtype]
    c = c.detach().cpu().to(torch.bfloat16)  # exact: the op's results are bf16 values
    assert tuple(c.shape) == (a.shape[0], b.shape[1])
    q, qs = quantized_reference(a.cpu(), kind)
    b = b.cpu()
    none = expert_of_row < 0
    assert torch.equal(c[none].view(torch.int16), torch.zeros_like(c[none]).view(torch.int16)), (
        f"rows of no expert must be +0 (seed {SEED})")
    for e in torch.unique(expert_of_row[~none]).tolist():
        rows = (expert_of_row == e).nonzero().flatten()
        if device == "cpu":
            assert_close_cpu(c[rows], q[rows], b[e], qs[rows], bs64[e], f"expert {e}")
        else:  # Hopper's fp8 tensor-core accuracy class (reference.py)
            assert_close_fp8_tensor_core(c[rows].cuda(), q[rows].cuda(), b[e].cuda(), qs[rows].cuda(),
                                         bs64[e].cuda())


def assert_same_as_gemm(c, a, b, bs, expert_of_row):
    """CPU: every row bit-identical to gemm() of the same quantized rows against the same expert."""
    q, qs = gemm.fp8_act_quant(a, dtype=b.dtype)
    for e in torch.unique(expert_of_row[expert_of_row >= 0]).tolist():
        rows = (expert_of_row == e).nonzero().flatten()
        dense = gemm.gemm(q[rows], b[e], qs[rows], bs[e])
        assert torch.equal(c[rows].to(torch.bfloat16).view(torch.int16), dense.view(torch.int16)), f"expert {e}"


def sorted_problem(ids, e, device, tokens_dtype, strided):
    """transformers' grouped layout of a routing: the permutation sorting the routed rows by expert (placeholder
    rows last, past offsets[-1]), offsets (E,) int32 inclusive ends, tokens_per_expert (E,)."""
    key = torch.where((ids >= 0) & (ids < e), ids, torch.full_like(ids, e))
    perm = torch.argsort(key, stable=True)
    counts = torch.bincount(key, minlength=e + 1)[:e]
    offsets = torch.cumsum(counts, 0).to(torch.int32).to(device)
    tokens = counts.to(tokens_dtype).to(device)
    if strided:  # every other element of a larger buffer on the device (a copy across devices would be contiguous)
        offsets = torch.zeros(2 * e, dtype=torch.int32, device=device)[::2].copy_(offsets)
        tokens = torch.zeros(2 * e, dtype=tokens_dtype, device=device)[::2].copy_(tokens)
        assert offsets.stride() == (2,) or e <= 1
    expert_of_row = torch.where(key[perm] < e, key[perm], torch.full_like(key[perm], -1))
    return perm, offsets, tokens, expert_of_row


# (S, N, K, E, routing): odd N and K, E = 1, experts without rows, one expert with every row, placeholders.
CASES = [
    (64, 200, 300, 4, "uniform"),
    (96, 130, 129, 8, "skewed"),
    (40, 256, 512, 3, "one"),
    (50, 72, 1, 5, "placeholders"),
    (1, 576, 384, 6, "uniform"),
    (33, 1, 200, 2, "skewed"),
    (20, 130, 256, 1, "uniform"),
    (70, 160, 640, 16, "placeholders"),
    (96, 200, 272, 8, "skewed"),  # N and K multiples of 8 / 16 but not of 128 (the TMA paths)
    (150, 328, 1040, 5, "uniform"),
    (300, 136, 384, 3, "one"),  # one expert's rows in several chunks / tiles
    (8, 256, 512, 256, "uniform"),  # decode-like: a few rows over many experts
    (2, 256, 4096, 4, "uniform"),  # few rows, long K: the decode kernel splits K across a cluster
    (24, 136, 256, 600, "uniform"),  # more experts than the decode kernel stages
    (300, 3080, 256, 2, "uniform"),  # the shape rule's CTA pairs (>= 128 rows per expert, N >= 3072), N blocks odd
]
CASE_IDS = ["-".join(str(x) for x in c) for c in CASES]


@pytest.mark.parametrize("scale_format", ["fp32", "e8m0"])
@pytest.mark.parametrize("kind", list(FP8))
@pytest.mark.parametrize("s,n,k,e,route", CASES, ids=CASE_IDS)
def test_batched_matches_reference(expert_device, kind, scale_format, s, n, k, e, route):
    device = expert_device
    gen = generator("batched", kind, scale_format, s, n, k, e, route)
    a = activations(s, k, torch.bfloat16, gen)
    b, bs, bs64 = experts(e, n, k, kind, scale_format, gen)
    ids = routing(route, s, e, gen)
    poison_allocator(s * n, device)
    c = gemm.matmul_batched(a.to(device), b.to(device), bs.to(device), ids.to(device), BLOCK)
    assert c.dtype == torch.bfloat16 and c.device.type == device
    expert_of_row = torch.where((ids >= 0) & (ids < e), ids, torch.full_like(ids, -1))
    check(c, a, b, bs64, expert_of_row, device)
    if device == "cpu":
        assert_same_as_gemm(c, a, b, bs, expert_of_row)


@pytest.mark.parametrize("scale_format", ["fp32", "e8m0"])
@pytest.mark.parametrize("kind", list(FP8))
@pytest.mark.parametrize("s,n,k,e,route", CASES, ids=CASE_IDS)
def test_grouped_matches_reference(expert_device, kind, scale_format, s, n, k, e, route):
    device = expert_device
    gen = generator("grouped", kind, scale_format, s, n, k, e, route)
    a = activations(s, k, torch.bfloat16, gen)
    b, bs, bs64 = experts(e, n, k, kind, scale_format, gen)
    ids = routing(route, s, e, gen)
    # What transformers passes: float counts from histc on the CPU, int32 on a GPU; other dtypes too.
    tokens_dtype = {"cpu": torch.float32, "cuda": torch.int32}[device] if s % 2 else torch.int64
    perm, offsets, tokens, expert_of_row = sorted_problem(ids, e, device, tokens_dtype, strided=n % 2 == 0)
    a_sorted = a[perm]
    poison_allocator(s * n, device)
    c = gemm.matmul_grouped(a_sorted.to(device), b.to(device), bs.to(device), offsets, tokens, BLOCK)
    assert c.dtype == torch.bfloat16 and c.device.type == device
    check(c, a_sorted, b, bs64, expert_of_row, device)
    if device == "cpu":
        assert_same_as_gemm(c, a_sorted, b, bs, expert_of_row)


def test_every_index_dtype_and_stride(device):
    gen = generator("index dtypes")
    s, n, k, e = 45, 136, 260, 7
    a = activations(s, k, torch.float16, gen).to(device)
    b, bs, _ = (t.to(device) for t in experts(e, n, k, "e4m3fn", "fp32", gen))
    ids = routing("placeholders", s, e, gen).clamp(-100, 100)
    ids[0], ids[1] = e, -1
    base = gemm.matmul_batched(a, b, bs, ids.to(device), BLOCK)
    for dtype in INDEX_DTYPES:
        typed = ids if dtype != torch.uint8 else torch.where(ids < 0, torch.full_like(ids, 255), ids)
        strided = torch.zeros(3 * s, dtype=dtype, device=device)[::3].copy_(typed.to(dtype))
        got = gemm.matmul_batched(a, b, bs, strided, BLOCK)
        assert torch.equal(got, base), dtype
    assert torch.equal(base[:2].cpu(), torch.zeros(2, n, dtype=torch.float16))


def test_transformers_calling_convention(device):
    """Keyword arguments, a tuple block size and histc's counts, as transformers' FP8Experts passes them."""
    gen = generator("transformers")
    tokens_n, top_k, hidden, e, n = 24, 4, 256, 8, 384
    hidden_states = activations(tokens_n, hidden, torch.bfloat16, gen).to(device)
    b, bs, _ = (t.to(device) for t in experts(e, n, hidden, "e4m3fn", "fp32", gen))
    top_k_index = torch.stack([torch.randperm(e, generator=gen)[:top_k] for _ in range(tokens_n)]).to(device)

    selected = hidden_states.repeat_interleave(top_k, dim=0)
    batched = gemm.matmul_batched(selected, b, bs, block_size=(128, 128), expert_ids=top_k_index.reshape(-1))

    ids_sorted, perm = torch.sort(top_k_index.reshape(-1))
    histc_input = ids_sorted.float() if device == "cpu" else ids_sorted.int()
    tokens = torch.histc(histc_input, bins=e, min=0, max=e - 1)
    offsets = torch.cumsum(tokens, dim=0, dtype=torch.int32)
    grouped = gemm.matmul_grouped(hidden_states[perm // top_k], b, bs, offsets=offsets, tokens_per_expert=tokens,
                                  block_size=[128, 128])
    assert grouped.dtype == torch.bfloat16 and tuple(grouped.shape) == (tokens_n * top_k, n)
    # The same rows against the same experts, whichever entry point computed them.
    if device == "cpu":
        assert torch.equal(grouped, batched[perm])
    else:
        torch.testing.assert_close(grouped.float(), batched[perm].float(), rtol=2e-2, atol=1e-3)


def test_output_dtypes_and_strided_activations(device):
    gen = generator("dtypes")
    s, n, k, e = 30, 200, 300, 3
    b, bs, bs64 = experts(e, n, k, "e4m3fn", "fp32", gen)
    b, bs = b.to(device), bs.to(device)
    ids = routing("uniform", s, e, gen).to(device)
    # A as a transposed view of a (K, S) float32 tensor: neither row- nor column-contiguous rows.
    a = activations(k, s, torch.float32, gen).to(device).T
    c = gemm.matmul_batched(a, b, bs, ids, BLOCK, output_dtype=torch.bfloat16)
    check(c, a.cpu(), b.cpu(), bs64, ids.cpu(), device)
    assert gemm.matmul_batched(a, b, bs, ids, BLOCK).dtype == torch.float32  # default: A's dtype
    for dtype in (torch.float16, torch.float32):
        got = gemm.matmul_batched(a, b, bs, ids, BLOCK, output_dtype=dtype)
        assert got.dtype == dtype and torch.equal(got, c.to(dtype))
    perm, offsets, tokens, _ = sorted_problem(ids.cpu(), e, device, torch.int32, strided=False)
    g = gemm.matmul_grouped(a[perm.to(device)], b, bs, offsets, tokens, BLOCK, output_dtype=torch.float16)
    assert g.dtype == torch.float16 and tuple(g.shape) == (s, n)


@pytest.mark.parametrize("s,n,k,e", [(0, 200, 300, 3), (5, 0, 300, 3), (5, 200, 0, 3), (5, 200, 300, 0),
                                     (4, 130, 129, 1)])
def test_empty_and_degenerate(device, s, n, k, e):
    gen = generator("empty", s, n, k, e)
    a = activations(s, k, torch.bfloat16, gen).to(device) if k else torch.empty(s, 0, dtype=torch.bfloat16, device=device)
    b, bs, bs64 = (t.to(device) for t in experts(e, n, k, "e4m3fn", "fp32", gen))
    ids = torch.zeros(s, dtype=torch.int64, device=device)
    offsets = torch.full((e,), s, dtype=torch.int32, device=device)
    offsets[:-1] = 0  # every row in the last expert
    tokens = torch.zeros(e, dtype=torch.int32, device=device)
    if e:
        tokens[-1] = s
    for c in (gemm.matmul_batched(a, b, bs, ids, BLOCK, output_dtype=torch.float32),
              gemm.matmul_grouped(a, b, bs, offsets, tokens, BLOCK, output_dtype=torch.float32)):
        assert tuple(c.shape) == (s, n) and c.dtype == torch.float32
        if k == 0 or e == 0:  # empty sums, or every row a placeholder
            assert torch.equal(c.cpu(), torch.zeros(s, n))
    if s and n and k and e:
        check(c, a.cpu(), b.cpu(), bs64.cpu(), torch.full((s,), e - 1), device)


def test_rows_past_the_last_offset_are_zero(device):
    gen = generator("tail")
    s, n, k, e = 40, 150, 200, 4
    a = activations(s, k, torch.bfloat16, gen).to(device)
    b, bs, bs64 = experts(e, n, k, "e4m3fnuz", "e8m0", gen)
    offsets = torch.tensor([0, 7, 7, 25], dtype=torch.int32)  # expert 0 and 2 empty; rows 25.. of no expert
    tokens = torch.tensor([0.0, 7.0, 0.0, 18.0], dtype=torch.float64)
    poison_allocator(s * n, device)
    c = gemm.matmul_grouped(a, b.to(device), bs.to(device), offsets.to(device), tokens.to(device), BLOCK)
    expert_of_row = torch.full((s,), -1)
    expert_of_row[0:7], expert_of_row[7:25] = 1, 3
    check(c, a.cpu(), b, bs64, expert_of_row, device)


def test_cpu_result_does_not_depend_on_threads(restore_num_threads):
    gen = generator("threads")
    s, n, k, e = 200, 300, 400, 6
    a = activations(s, k, torch.bfloat16, gen)
    b, bs, _ = experts(e, n, k, "e4m3fn", "fp32", gen)
    ids = routing("skewed", s, e, gen)
    perm, offsets, tokens, _ = sorted_problem(ids, e, "cpu", torch.float32, strided=False)
    results = []
    for threads in (1, max(2, restore_num_threads)):
        torch.set_num_threads(threads)
        results.append((gemm.matmul_batched(a, b, bs, ids, BLOCK), gemm.matmul_grouped(a[perm], b, bs, offsets, tokens, BLOCK)))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


# ------------------------------------------------------------------------------------------------------
# UE8M0 scales (torch.float8_e8m0fnu): converted to float32 by a torch op on the scales' device


def test_e4m3fn_weights_halved_are_e4m3fnuz_weights_with_doubled_scales(device):
    """The once-per-checkpoint conversion the README gives for gfx942: exact for every byte (NaN stays NaN, -0
    becomes 0), and the expert GEMM on the converted weights within the quantization noise of the original."""
    every = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    halved = (every.float() / 2).to(torch.float8_e4m3fnuz)
    nan = torch.isnan(every.float())
    assert torch.equal(torch.isnan(halved.float()), nan)
    assert torch.equal(halved.float()[~nan] * 2, every.float()[~nan])
    gen = generator("fn to fnuz")
    b, bs, _ = experts(4, 256, 384, "e4m3fn", "fp32", gen)
    a = activations(40, 384, torch.bfloat16, gen)
    ids = routing("uniform", 40, 4, gen)
    b_fnuz = (b.float() / 2).to(torch.float8_e4m3fnuz)
    c = gemm.matmul_batched(a.to(device), b.to(device), bs.to(device), ids.to(device), BLOCK).double().cpu()
    c_fnuz = gemm.matmul_batched(a.to(device), b_fnuz.to(device), (bs * 2).to(device), ids.to(device), BLOCK)
    rel = (c - c_fnuz.double().cpu()).norm(dim=1) / c.norm(dim=1)
    assert bool((rel < 0.1).all()), f"largest relative row error {float(rel.max())} (seed {SEED})"


def test_e8m0_conversion_is_exact_for_every_code(device):
    codes = torch.arange(256, dtype=torch.uint8)
    got = codes.to(device).view(torch.float8_e8m0fnu).to(torch.float32).cpu()
    expected = np.ldexp(np.float64(1.0), np.arange(255) - 127).astype(np.float32)  # 2^-127 is a float32 subnormal
    assert got[0].item() == 2.0**-127 and got[0].item() != 0.0
    assert torch.equal(got[:255], torch.from_numpy(expected)) and torch.isnan(got[255])


def test_e8m0_scales_in_gemm_and_matmul_2d(device):
    gen = generator("e8m0 dense")
    m, n, k = 33, 200, 300
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    a_codes = torch.randint(110, 140, (m, groups(k)), generator=gen, dtype=torch.uint8)
    b_codes = torch.randint(110, 140, (groups(n), groups(k)), generator=gen, dtype=torch.uint8)
    a_scale = a_codes.view(torch.float8_e8m0fnu).to(device)
    b_scale = b_codes.view(torch.float8_e8m0fnu).to(device)
    a, b = a.to(device), b.to(device)
    a64, b64 = torch.exp2(a_codes.double() - 127), torch.exp2(b_codes.double() - 127)
    for a_s, b_s in ((a_scale, b_scale), (a_scale.float(), b_scale), (a_scale, b_scale.float())):
        out = gemm.gemm(a, b, a_s, b_s)
        if device == "cpu":
            assert_close_cpu(out, a, b, a64, b64, "gemm")
        else:
            assert_close_fp8_tensor_core(out, a, b, a64.to(device), b64.to(device))
        assert torch.equal(out, gemm.gemm(a, b, a_scale.float(), b_scale.float()))
    x = activations(m, k, torch.bfloat16, gen).to(device)
    y = gemm.matmul_2d(x, b, b_scale, BLOCK)
    assert torch.equal(y, gemm.matmul_2d(x, b, b_scale.float(), BLOCK))
    # A transposed (strided) e8m0 view is read as it is.
    assert torch.equal(gemm.gemm(a, b, a_scale, b_scale.T.contiguous().T), gemm.gemm(a, b, a_scale, b_scale))


# ------------------------------------------------------------------------------------------------------
# Torch surface: opcheck, meta, torch.compile


def _small(device, scale_format="fp32"):
    gen = generator("small", scale_format)
    s, n, k, e = 12, 130, 200, 3
    a = activations(s, k, torch.bfloat16, gen).to(device)
    b, bs, _ = experts(e, n, k, "e4m3fn", scale_format, gen)
    ids = routing("placeholders", s, e, gen).to(device)
    perm, offsets, tokens, _ = sorted_problem(ids.cpu(), e, device, torch.int32, strided=True)
    return a, b.to(device), bs.to(device), ids, a[perm.to(device)], offsets, tokens


def test_opcheck(device, monkeypatch):
    # opcheck's schema test compares the inputs before and after with torch.allclose, which has no fp8
    # kernel: compare fp8 and e8m0 tensors bitwise.
    allclose = torch.allclose

    def allclose_bitwise_for_8_bit(lhs, rhs, *args, **kwargs):
        if lhs.element_size() == 1 and lhs.is_floating_point():
            return lhs.dtype == rhs.dtype and torch.equal(lhs.view(torch.uint8), rhs.view(torch.uint8))
        return allclose(lhs, rhs, *args, **kwargs)

    monkeypatch.setattr(torch, "allclose", allclose_bitwise_for_8_bit)
    for scale_format in ("fp32", "e8m0"):
        a, b, bs, ids, a_sorted, offsets, tokens = _small(device, scale_format)
        for out_dtype in (None, torch.float32):
            torch.library.opcheck(gemm.ops.matmul_batched.default, (a, b, bs, ids, BLOCK, out_dtype))
            torch.library.opcheck(gemm.ops.matmul_grouped.default, (a_sorted, b, bs, offsets, tokens, BLOCK, out_dtype))


def test_meta_tensors_give_shapes():
    a = torch.empty(10, 300, device="meta", dtype=torch.float16)
    b = torch.empty(4, 576, 300, device="meta", dtype=torch.float8_e4m3fn)
    bs = torch.empty(4, 5, 3, device="meta", dtype=torch.float8_e8m0fnu)
    y = gemm.matmul_batched(a, b, bs, torch.empty(10, dtype=torch.int32, device="meta"), BLOCK)
    assert y.device.type == "meta" and tuple(y.shape) == (10, 576) and y.dtype == torch.float16
    offsets = torch.empty(4, dtype=torch.int32, device="meta")
    y = gemm.matmul_grouped(a, b, bs, offsets, offsets, BLOCK, output_dtype=torch.bfloat16)
    assert tuple(y.shape) == (10, 576) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()
    a, b, bs, ids, a_sorted, offsets, tokens = _small(device)

    @torch.compile(fullgraph=True, dynamic=dynamic, backend="eager")
    def experts_both(x, ids, x_sorted, offsets, tokens):
        return (gemm.matmul_batched(x, b, bs, ids, BLOCK),
                gemm.matmul_grouped(x_sorted, b, bs, offsets, tokens, BLOCK, output_dtype=torch.float32))

    y_batched, y_grouped = experts_both(a, ids, a_sorted, offsets, tokens)
    assert torch.equal(y_batched, gemm.matmul_batched(a, b, bs, ids, BLOCK))
    assert torch.equal(y_grouped, gemm.matmul_grouped(a_sorted, b, bs, offsets, tokens, BLOCK,
                                                      output_dtype=torch.float32))


# ------------------------------------------------------------------------------------------------------
# GPU only: no host synchronisation on the routing (CUDA graphs), clamped offsets


def _capture(fn):
    """fn() captured in a CUDA graph after a warm-up on a side stream; returns (graph, its output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


@pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0")
@pytest.mark.parametrize("kernel", ["decode", "tiles", "pairs"])
@pytest.mark.parametrize("scale_format", ["fp32", "e8m0"])
def test_cuda_graph_grouped_with_routing_changed_between_replays(scale_format, kernel, monkeypatch):
    monkeypatch.setenv("GEMM_CUDA_EXPERT_KERNEL", kernel)
    gen = generator("graph grouped", scale_format)
    s, n, k, e = 256, 384, 640, 8
    b, bs, bs64 = experts(e, n, k, "e4m3fn", scale_format, gen)
    b, bs = b.cuda(), bs.cuda()
    a = torch.zeros(s, k, dtype=torch.bfloat16, device="cuda")
    offsets = torch.zeros(e, dtype=torch.int32, device="cuda")
    tokens = torch.zeros(e, dtype=torch.int32, device="cuda")
    graph, out = _capture(lambda: gemm.matmul_grouped(a, b, bs, offsets, tokens, BLOCK))
    for i, route in enumerate(("uniform", "skewed", "one", "placeholders", "uniform")):
        ids = routing(route, s, e, gen)
        if i == 4:
            ids[s // 2:] = e  # half the rows past offsets[-1]
        perm, new_offsets, new_tokens, expert_of_row = sorted_problem(ids, e, "cuda", torch.int32, strided=False)
        new_a = activations(s, k, torch.bfloat16, gen)[perm]
        a.copy_(new_a)
        offsets.copy_(new_offsets)
        tokens.copy_(new_tokens)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, new_a, b.cpu(), bs64, expert_of_row, "cuda")


@pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0")
@pytest.mark.parametrize("kernel", ["decode", "tiles", "pairs"])
def test_cuda_graph_batched_with_routing_changed_between_replays(kernel, monkeypatch):
    monkeypatch.setenv("GEMM_CUDA_EXPERT_KERNEL", kernel)
    gen = generator("graph batched")
    s, n, k, e = 200, 256, 384, 6
    b, bs, bs64 = experts(e, n, k, "e4m3fn", "fp32", gen)
    b, bs = b.cuda(), bs.cuda()
    a = torch.zeros(s, k, dtype=torch.bfloat16, device="cuda")
    ids = torch.zeros(s, dtype=torch.int32, device="cuda")
    graph, out = _capture(lambda: gemm.matmul_batched(a, b, bs, ids, BLOCK))
    for route in ("uniform", "placeholders", "one", "skewed"):
        new_ids = routing(route, s, e, gen).clamp(-2**31, 2**31 - 1)
        new_a = activations(s, k, torch.bfloat16, gen)
        a.copy_(new_a)
        ids.copy_(new_ids.to(torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, new_a, b.cpu(), bs64, torch.where((new_ids >= 0) & (new_ids < e), new_ids, -1), "cuda")


@pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0")
@pytest.mark.parametrize("kernel", ["decode", "tiles", "pairs"])
def test_cuda_grouped_clamps_offsets_out_of_range(kernel, monkeypatch):
    monkeypatch.setenv("GEMM_CUDA_EXPERT_KERNEL", kernel)
    # The values are not checked on a GPU: expert e owns [end(e-1), end(e)), end(e) = min(max(offsets[e], end(e-1)), S).
    gen = generator("clamp")
    s, n, k, e = 40, 200, 300, 4
    a = activations(s, k, torch.bfloat16, gen)
    b, bs, bs64 = experts(e, n, k, "e4m3fn", "fp32", gen)
    offsets = torch.tensor([-5, 12, 30, 1000], dtype=torch.int32)
    expert_of_row = torch.full((s,), -1)
    expert_of_row[0:12], expert_of_row[12:30], expert_of_row[30:40] = 1, 2, 3
    c = gemm.matmul_grouped(a.cuda(), b.cuda(), bs.cuda(), offsets.cuda(), torch.zeros(e, dtype=torch.int32).cuda(),
                            BLOCK)
    torch.cuda.synchronize()
    check(c, a, b, bs64, expert_of_row, "cuda")
    # Decreasing offsets: the running maximum gives expert 0 rows [0, 30) and the others none; rows 30.. are zeros.
    c = gemm.matmul_grouped(a.cuda(), b.cuda(), bs.cuda(), torch.tensor([30, 10, 20, 5], dtype=torch.int32).cuda(),
                            torch.zeros(e, dtype=torch.int32).cuda(), BLOCK)
    torch.cuda.synchronize()
    expert_of_row = torch.full((s,), -1)
    expert_of_row[0:30] = 0
    check(c, a, b, bs64, expert_of_row, "cuda")
