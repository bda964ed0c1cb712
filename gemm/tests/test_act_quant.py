"""fp8_act_quant, matmul_2d and the Fp8BlockLinear layer on every device this build has (CPU here;
CUDA on an sm_90 GPU, skipped without one).

The quantization is checked bit for bit against the NumPy reference (act_quant_reference.py, written
from the definition), which is itself checked against torch's own fp8 conversion; matmul_2d against a
float64 reference of quantize-then-GEMM (reference.py). The gfx942 kernel runs the same cases in the
CPU emulation (test_act_quant_emulation.py); bad input is test_act_quant_errors.py.
"""
import math

import numpy as np
import pytest
import torch

import gemm
from act_quant_reference import FP8_MAX, act_quant_ref, encode, fp8_values, special_values
from gemm.layers import Fp8BlockLinear
from reference import assert_close_fp8_tensor_core, reference_gemm

FP8 = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}
KIND_OF = {v: k for k, v in FP8.items()}
ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0"))
DEVICES = ["cpu", CUDA]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def groups(k):
    return -(-k // 128)


def activations(shape, dtype, seed, device="cpu"):
    """Normal values times a power of two drawn per (row, 128-column group), so groups have very different
    scales (within the dtype's range); about 1 in 50 values is tiny against its group's amax, which
    gives fp8 subnormal codes and zeros."""
    gen = torch.Generator().manual_seed(seed)
    *lead, k = shape
    rows = math.prod(lead)
    span = 10 if dtype == torch.float16 else 40
    exps = torch.randint(-span, span + 1, (rows, groups(k)), generator=gen).repeat_interleave(128, 1)[:, :k]
    x = torch.randn(rows, k, generator=gen) * torch.exp2(exps.float())
    tiny = torch.rand(rows, k, generator=gen) < 0.02
    x = torch.where(tiny, x * 2.0**-12, x)
    return x.to(dtype).reshape(shape).to(device)


def expected_scale_strides(lead, k):
    rows = math.prod(lead)
    strides, step = [], 1
    for size in reversed(lead):
        strides.append(step)
        step *= size
    return tuple(reversed(strides)) + ((rows + 3) // 4 * 4,)


def check_quantized(x, q, scale, kind, static_scale=None):
    """q and scale bit for bit against the NumPy reference, plus the documented layout."""
    k = x.shape[-1]
    lead = tuple(x.shape[:-1])
    assert q.dtype == FP8[kind] and tuple(q.shape) == tuple(x.shape) and q.is_contiguous()
    assert q.device == x.device and scale.device == x.device
    assert scale.dtype == torch.float32 and tuple(scale.shape) == lead + (groups(k),)
    assert scale.stride() == expected_scale_strides(lead, k), scale.stride()
    q_ref, s_ref = act_quant_ref(x.detach().cpu().float().reshape(-1, k).numpy(), kind, static_scale)
    got_q = q.cpu().view(torch.uint8).reshape(-1, k).numpy()
    got_s = scale.cpu().reshape(-1, groups(k)).numpy()
    bad = np.argwhere(got_q != q_ref)
    if bad.size:
        r, c = bad[0]
        xv = x.detach().cpu().float().reshape(-1, k)[r, c].item()
        raise AssertionError(f"{len(bad)} fp8 codes differ from the reference; first at row {r}, column {c}: x = "
                             f"{xv!r}, scale = {got_s[r, c // 128]!r}, got {got_q[r, c]:#04x}, want {q_ref[r, c]:#04x}")
    bits_got, bits_ref = got_s.view(np.uint32), s_ref.view(np.uint32)
    bad = np.argwhere(bits_got != bits_ref)
    assert not bad.size, f"{len(bad)} scales differ; first {bad[0]}: got {got_s[tuple(bad[0])]!r}, want {s_ref[tuple(bad[0])]!r}"


# ------------------------------------------------------------------------------------------------------
# The reference itself


@pytest.mark.parametrize("kind", FP8)
def test_reference_tables_and_rounding_agree_with_torch(kind):
    # The value table is torch's decoding of the codes 0..127.
    torch_values = torch.arange(128, dtype=torch.uint8).view(FP8[kind]).double().numpy()
    np.testing.assert_array_equal(fp8_values(kind), torch_values)
    # Rounding: every midpoint between neighbouring fp8 values, its float32 neighbours, the values
    # themselves, subnormal steps and beyond the range, both signs, against torch's cast of the clamped value.
    finite = np.sort(np.unique(np.abs(torch_values[~np.isnan(torch_values)])))
    mid = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)
    v = np.concatenate([finite.astype(np.float32), mid, np.nextafter(mid, np.float32(0)),
                        np.nextafter(mid, np.float32(np.inf)), np.float32([1e-30, 2.0**-12, 1e3, 3e38])])
    v = np.concatenate([v, -v])
    got = encode(v, np.signbit(v), kind)
    clamped = torch.from_numpy(np.clip(v, -FP8_MAX[kind], FP8_MAX[kind]))
    want = clamped.to(FP8[kind]).view(torch.uint8).numpy()  # fnuz: torch also writes -0 as 0x00
    np.testing.assert_array_equal(got, want)


def test_reference_special_values():
    nan, inf = np.float32(np.nan), np.float32(np.inf)
    x = np.zeros((5, 130), np.float32)
    x[0, :128] = 1.0
    x[0, 5] = nan
    x[1, :128] = 2.0
    x[1, 7], x[1, 8] = inf, -inf
    x[2, :] = 0.0
    x[2, 3] = -0.0
    x[3, 128:] = [-5.0, 5.0]
    x[4, :] = -1.0
    for kind in FP8:
        q, s = act_quant_ref(x, kind)
        assert np.isnan(s[0, 0]) and s[0, 0].view(np.uint32) == 0x7FC00000
        want_nan = 0x80 if kind == "e4m3fnuz" else 0x7F
        assert (q[0, :128] == want_nan).all()
        assert s[1, 0] == inf
        assert q[1, 0] == 0 and q[1, 7] == want_nan and q[1, 8] == (0x80 if kind == "e4m3fnuz" else 0xFF)
        assert s[2, 0] == np.float32(1e-12) and s[2, 1] == np.float32(1e-12)
        assert q[2, 3] == (0x00 if kind == "e4m3fnuz" else 0x80) and (np.delete(q[2], 3) == 0).all()
        top = 0x7F if kind == "e4m3fnuz" else 0x7E  # the largest finite code
        assert s[3, 1] == np.float32(5.0) / np.float32(FP8_MAX[kind]) and list(q[3, 128:]) == [0x80 | top, top]
        assert (q[4] == 0x80 | top).all()


# ------------------------------------------------------------------------------------------------------
# fp8_act_quant


@pytest.mark.parametrize("kind", FP8)
@pytest.mark.parametrize("k", [1, 100, 127, 128, 129, 300, 7000])
def test_matches_reference(device, kind, k):
    for i, dtype in enumerate(ACT_DTYPES):
        x = activations((7, k), dtype, seed=k * 3 + i, device=device)
        q, scale = gemm.fp8_act_quant(x, 128, FP8[kind])
        check_quantized(x, q, scale, kind)


def _layouts(k, dtype, seed, device):
    """Views with the same logical shape family and other strides."""
    base = activations((3 * 5, k + 9), dtype, seed, device)
    yield "transposed", activations((k, 13), dtype, seed + 1, device).T
    yield "sliced (unaligned, padded rows)", base[:, 3 : k + 3]
    yield "every other row", base[::2, :k]
    yield "column stride 2", activations((6, 2 * k), dtype, seed + 2, device)[:, ::2]
    # Leading dimensions that no single stride describes (2 dims), and more than the kernels take in place.
    yield "3-D, batch-major view", activations((5, 2, k), dtype, seed + 3, device).transpose(0, 1)
    yield "6-D permuted", activations((2, 3, 2, 3, 2, k), dtype, seed + 4, device).permute(4, 3, 2, 1, 0, 5)
    yield "expanded rows", activations((4, 1, k), dtype, seed + 5, device).expand(4, 3, k)
    yield "1-D", activations((k,), dtype, seed + 6, device)


@pytest.mark.parametrize("k", [1, 129, 300])
def test_strided_inputs(device, k):
    for i, dtype in enumerate(ACT_DTYPES):
        for name, x in _layouts(k, dtype, seed=10 * k + i, device=device):
            kind = "e4m3fnuz" if i % 2 else "e4m3fn"
            q, scale = gemm.fp8_act_quant(x, dtype=FP8[kind])
            try:
                check_quantized(x, q, scale, kind)
            except AssertionError as e:
                raise AssertionError(f"{name}, {dtype}, {kind}: {e}") from None


@pytest.mark.parametrize("kind", FP8)
def test_special_values(device, kind):
    for dtype in ACT_DTYPES:
        x = special_values(dtype, device)
        q, scale = gemm.fp8_act_quant(x, dtype=FP8[kind])
        check_quantized(x, q, scale, kind)
        s = scale.cpu()
        assert s[0, 0].isnan() and s[1, 0].isinf() and s[1, 1].isinf() and s[2, 0] == s[2, 1] == np.float32(1e-12)


@pytest.mark.parametrize("kind", FP8)
def test_static_activation_scale(device, kind):
    x = activations((9, 300), torch.bfloat16, seed=3, device=device)
    x[0, 0] = float("nan")
    x[1, 1] = float("inf")
    cases = [0.5, 3.7, 1e-30, 0.0, -2.0, float("inf"), 1e30]
    for value in cases:
        as_tensor = torch.tensor([value], dtype=torch.float32, device=device)
        want = np.float32(value)
        for scale_arg in (value, as_tensor, as_tensor.reshape(1, 1), as_tensor.reshape(())):
            q, scale = gemm.fp8_act_quant(x, 128, FP8[kind], activation_scale=scale_arg)
            check_quantized(x, q, scale, kind, static_scale=want)


@pytest.mark.parametrize("kind", FP8)
def test_rounding_ties_and_subnormals(device, kind):
    # A power-of-two static scale keeps x / scale exact: x holds every midpoint between neighbouring fp8
    # values (round half to even), its float32 neighbours, every fp8 value and values past the range.
    values = fp8_values(kind)
    finite = np.sort(values[~np.isnan(values)])
    mid = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)
    v = np.concatenate([finite.astype(np.float32), mid, np.nextafter(mid, np.float32(0)),
                        np.nextafter(mid, np.float32(np.inf)), np.float32([500.0, 1e-20, 2.0**-11, 3 * 2.0**-12])])
    v = np.concatenate([v, -v])
    k = len(v)
    for scale in (1.0, 0.25):
        x = torch.from_numpy(v * np.float32(scale)).reshape(1, k).to(device)
        q, s = gemm.fp8_act_quant(x, dtype=FP8[kind], activation_scale=scale)
        check_quantized(x, q, s, kind, static_scale=np.float32(scale))


def test_result_does_not_depend_on_threads(restore_num_threads):
    x = activations((1000, 300), torch.bfloat16, seed=8)
    results = []
    for threads in (1, 3):
        torch.set_num_threads(threads)
        results.append(gemm.fp8_act_quant(x))
    assert torch.equal(results[0][0].view(torch.uint8), results[1][0].view(torch.uint8))
    assert torch.equal(results[0][1], results[1][1])
    check_quantized(x, *results[0], "e4m3fn")


@pytest.mark.parametrize("shape", [(0, 300), (5, 0), (2, 0, 7), (0,)])
def test_empty(device, shape):
    x = torch.empty(shape, dtype=torch.bfloat16, device=device)
    q, scale = gemm.fp8_act_quant(x)
    assert tuple(q.shape) == shape and tuple(scale.shape) == tuple(shape[:-1]) + (groups(shape[-1]),)


def test_scales_feed_the_gemm_as_they_come(device):
    # The documented use: the 2-D views of q and scale go straight into gemm.gemm.
    x = activations((2, 5, 300), torch.bfloat16, seed=4, device=device)
    w = torch.randn(200, 300, device=device).to(torch.float8_e4m3fn)
    ws = torch.rand(2, 3, device=device) + 0.5
    q, scale = gemm.fp8_act_quant(x)
    q2, s2 = q.view(-1, 300), scale.reshape(-1, 3)
    assert s2.stride() == (1, 12) and s2.data_ptr() == scale.data_ptr()
    y = gemm.gemm(q2, w, s2, ws)
    assert_close_fp8_tensor_core(y, q2, w, s2, ws)


# ------------------------------------------------------------------------------------------------------
# matmul_2d


def matmul_reference(a, b, b_scale, static_scale=None):
    """float64 reference of quantize-then-GEMM: the NumPy quantization, then reference.py's formula."""
    k = a.shape[-1]
    kind = KIND_OF[b.dtype]
    q, s = act_quant_ref(a.detach().cpu().float().reshape(-1, k).numpy(), kind, static_scale)
    q = torch.from_numpy(q).view(b.dtype)
    s = torch.from_numpy(s)
    return q, s, reference_gemm(q, b.cpu(), s, b_scale.cpu()).reshape(*a.shape[:-1], b.shape[0])


def assert_close_to_reference(y, q, b, s, b_scale, device):
    out = y.reshape(-1, b.shape[0]).to(torch.bfloat16)
    if device == "cpu":  # the exact CPU GEMM: one bf16 rounding of an fp32 sum
        assert_close_fp8_tensor_core(out, q, b.cpu(), s, b_scale.cpu())
    else:
        assert_close_fp8_tensor_core(out.cpu(), q, b.cpu(), s, b_scale.cpu())


@pytest.mark.parametrize("kind", FP8)
@pytest.mark.parametrize("m,n,k", [(1, 576, 7168), (5, 200, 300), (33, 130, 129), (4, 1, 1), (70, 256, 1000)])
def test_matmul_2d_matches_reference(device, kind, m, n, k):
    gen = torch.Generator().manual_seed(m + n + k)
    b = torch.randn(n, k, generator=gen).to(FP8[kind]).to(device)
    b_scale = (torch.rand(groups(n), groups(k), generator=gen) + 0.5).to(device)
    for dtype in ACT_DTYPES:
        a = activations((m, k), dtype, seed=m * k, device=device)
        y = gemm.matmul_2d(a, b, b_scale, [128, 128], output_dtype=torch.bfloat16)
        assert y.dtype == torch.bfloat16 and tuple(y.shape) == (m, n) and y.device == a.device
        q, s, _ = matmul_reference(a, b, b_scale)
        assert_close_to_reference(y, q, b, s, b_scale, device)
        # The same bits as the two public calls in a row; by default in A's dtype.
        q2, s2 = gemm.fp8_act_quant(a, dtype=b.dtype)
        assert torch.equal(y, gemm.gemm(q2.view(m, k), b, s2.reshape(m, -1), b_scale))
        y_default = gemm.matmul_2d(a, b, b_scale, [128, 128])
        assert y_default.dtype == dtype and torch.equal(y_default, y.to(dtype))


def test_matmul_2d_shapes_layouts_and_dtypes(device):
    gen = torch.Generator().manual_seed(11)
    n, k = 300, 520
    # B and Bs as transposed views of their physical (K, N) / (ceil(K/128), ceil(N/128)) tensors.
    b = torch.randn(k, n, generator=gen).to(torch.float8_e4m3fn).to(device).T
    b_scale = (torch.rand(groups(k), groups(n), generator=gen) + 0.5).to(device).T
    a = activations((3, 4, k + 5), torch.float32, seed=12, device=device)[:, :, 2 : k + 2].transpose(0, 1)
    base = gemm.matmul_2d(a, b, b_scale, (128, 128), output_dtype=torch.bfloat16)
    assert tuple(base.shape) == (4, 3, n) and base.dtype == torch.bfloat16
    q, s, _ = matmul_reference(a, b, b_scale)
    assert_close_to_reference(base, q, b, s, b_scale, device)
    for dtype in (torch.float16, torch.float32):
        y = gemm.matmul_2d(a, b, b_scale, [128, 128], output_dtype=dtype)
        assert y.dtype == dtype and torch.equal(y, base.to(dtype))
    assert gemm.matmul_2d(a, b, b_scale, [128, 128]).dtype == torch.float32  # default: A's dtype


@pytest.mark.parametrize("kind", FP8)
def test_matmul_2d_static_activation_scale(device, kind):
    gen = torch.Generator().manual_seed(5)
    n, k = 130, 300
    b = torch.randn(n, k, generator=gen).to(FP8[kind]).to(device)
    b_scale = (torch.rand(groups(n), groups(k), generator=gen) + 0.5).to(device)
    a = (torch.randn(6, k, generator=gen) * 3).to(torch.bfloat16).to(device)
    for scale_arg in (0.05, torch.tensor(0.05, device=device)):
        y = gemm.matmul_2d(a, b, b_scale, [128, 128], activation_scale=scale_arg)
        q, s, _ = matmul_reference(a, b, b_scale, static_scale=np.float32(0.05))
        assert_close_to_reference(y, q, b, s, b_scale, device)


@pytest.mark.parametrize("m,n,k", [(0, 200, 300), (5, 0, 300), (5, 200, 0)])
def test_matmul_2d_empty(device, m, n, k):
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    b = torch.zeros(n, k, device=device).to(torch.float8_e4m3fn)
    b_scale = torch.ones(groups(n), groups(k), device=device)
    y = gemm.matmul_2d(a, b, b_scale, [128, 128], output_dtype=torch.float32)
    assert tuple(y.shape) == (m, n) and y.dtype == torch.float32
    assert torch.equal(y.cpu(), torch.zeros(m, n))


# ------------------------------------------------------------------------------------------------------
# Torch surface: opcheck, meta, torch.compile


def _fp8_aware_allclose(monkeypatch):
    # opcheck compares outputs with torch.allclose, which has no fp8 kernel: compare fp8 bitwise.
    allclose = torch.allclose

    def allclose_fp8_aware(lhs, rhs, *args, **kwargs):
        if lhs.dtype in FP8.values() or rhs.dtype in FP8.values():
            return lhs.dtype == rhs.dtype and torch.equal(lhs.view(torch.uint8), rhs.view(torch.uint8))
        return allclose(lhs, rhs, *args, **kwargs)

    monkeypatch.setattr(torch, "allclose", allclose_fp8_aware)


def test_opcheck(device, monkeypatch):
    _fp8_aware_allclose(monkeypatch)
    one = torch.tensor([0.5], device=device)
    for shape, kind, static in (((2, 3, 300), "e4m3fn", None), ((5, 129), "e4m3fnuz", one), ((1,), "e4m3fn", None)):
        x = activations(shape, torch.bfloat16, seed=1, device=device)
        torch.library.opcheck(gemm.ops.fp8_act_quant.default, (x, 128, FP8[kind], static, None))
    x = activations((4, 200), torch.float16, seed=2, device=device)
    torch.library.opcheck(gemm.ops.fp8_act_quant.default, (x, 128, FP8["e4m3fn"], None, 0.25))
    b = torch.randn(130, 200, device=device).to(torch.float8_e4m3fn)
    b_scale = torch.rand(2, 2, device=device) + 0.5
    for args in ((x, b, b_scale, [128, 128], None, None, None), (x, b, b_scale, [128, 128], torch.float32, one, None)):
        torch.library.opcheck(gemm.ops.matmul_2d.default, args)


def test_meta_tensors_give_shapes_and_strides():
    x = torch.empty(3, 5, 300, device="meta", dtype=torch.bfloat16)
    q, scale = gemm.fp8_act_quant(x, dtype=torch.float8_e4m3fnuz)
    assert q.device.type == "meta" and q.dtype == torch.float8_e4m3fnuz and tuple(q.shape) == (3, 5, 300)
    assert tuple(scale.shape) == (3, 5, 3) and scale.stride() == (5, 1, 16)
    b = torch.empty(576, 300, device="meta", dtype=torch.float8_e4m3fn)
    y = gemm.matmul_2d(x, b, torch.empty(5, 3, device="meta"), [128, 128], output_dtype=torch.float16)
    assert y.device.type == "meta" and tuple(y.shape) == (3, 5, 576) and y.dtype == torch.float16


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()
    b = torch.randn(200, 300, device=device).to(torch.float8_e4m3fn)
    b_scale = torch.rand(2, 3, device=device) + 0.5

    @torch.compile(fullgraph=True, dynamic=dynamic)
    def both(x):
        q, s = gemm.fp8_act_quant(x)
        return q, s, gemm.matmul_2d(x, b, b_scale, [128, 128])

    for shape in ((4, 300), (2, 7, 300)):
        x = activations(shape, torch.bfloat16, seed=shape[0], device=device)
        q, s, y = both(x)
        q_e, s_e = gemm.fp8_act_quant(x)
        assert torch.equal(q.view(torch.uint8), q_e.view(torch.uint8)) and torch.equal(s, s_e)
        assert s.stride() == s_e.stride()
        assert torch.equal(y, gemm.matmul_2d(x, b, b_scale, [128, 128]))


# ------------------------------------------------------------------------------------------------------
# gemm.layers.Fp8BlockLinear, the kernelize layer


class _Host(torch.nn.Module):
    """What kernelize hands the layer's forward: a module with transformers' FP8Linear attributes."""

    def __init__(self, n, k, dtype, bias, device, seed, block_size=(128, 128)):
        super().__init__()
        gen = torch.Generator(device=device).manual_seed(seed)
        self.weight = torch.randn(n, k, generator=gen, device=device).to(dtype)
        self.weight_scale_inv = torch.rand(groups(n), groups(k), generator=gen, device=device) + 0.5
        self.bias = torch.randn(n, generator=gen, device=device) if bias else None
        self.block_size = block_size

    def forward(self, x):
        return Fp8BlockLinear.forward(self, x)


@pytest.mark.parametrize("k", [300, 129, 1000, 128, 1])
def test_fp8_block_linear(k, device):
    dtype = torch.float8_e4m3fn if k % 2 else torch.float8_e4m3fnuz
    host = _Host(256, k, dtype, bias=True, device=device, seed=k)
    x = activations((2, 3, k), torch.bfloat16, seed=k, device=device)
    y = host(x)
    assert y.dtype == x.dtype and tuple(y.shape) == (2, 3, 256)
    want = (gemm.matmul_2d(x, host.weight, host.weight_scale_inv, [128, 128]) + host.bias).to(x.dtype)
    assert torch.equal(y, want)
    q, s, ref = matmul_reference(x, host.weight, host.weight_scale_inv)
    torch.testing.assert_close(y.double().cpu(), ref + host.bias.cpu().double(), rtol=2e-2, atol=1e-2)


def test_fp8_block_linear_static_scheme_and_missing_block_size(device):
    host = _Host(128, 256, torch.float8_e4m3fn, bias=False, device=device, seed=0)
    del host.block_size  # a host without the attribute is taken as (128, 128)
    host.activation_scheme = "static"
    host.activation_scale = torch.tensor(0.02, device=device)
    x = activations((5, 256), torch.bfloat16, seed=1, device=device)
    want = gemm.matmul_2d(x, host.weight, host.weight_scale_inv, [128, 128], activation_scale=host.activation_scale)
    assert torch.equal(host(x), want)


def test_fp8_block_linear_non_fp8_weight_is_a_plain_linear():
    host = _Host(64, 32, torch.bfloat16, bias=True, device="cpu", seed=0)
    host.bias = host.bias.to(torch.bfloat16)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    assert torch.equal(host(x), torch.nn.functional.linear(x, host.weight, host.bias))


@pytest.mark.parametrize("k,dynamic", [(300, False), (7000, False), (300, True)])
def test_fp8_block_linear_compiles_like_eager(k, dynamic, device):
    # K % 128 != 0: the last activation group is partial. Compiled and eager must agree bit for bit, with
    # static shapes (a fresh compilation) and with dynamic ones.
    torch._dynamo.reset()
    host = _Host(256, k, torch.float8_e4m3fn, bias=True, device=device, seed=k)
    compiled = torch.compile(host, fullgraph=True, dynamic=dynamic)
    for shape in ((4, 3, k), (1, k), (16, k)):
        x = torch.randn(*shape, device=device)
        got = compiled(x)
        assert not got.isnan().any()
        assert torch.equal(got, host(x))


def test_fp8_block_linear_rejects_wrong_features_and_block_size():
    host = _Host(128, 256, torch.float8_e4m3fn, bias=False, device="cpu", seed=0)
    with pytest.raises(RuntimeError, match=r"Fp8BlockLinear: input must have 256 features in its last dimension, "
                                           r"got shape \[2, 255\]"):
        host(torch.randn(2, 255))
    host.block_size = (64, 64)
    with pytest.raises(RuntimeError, match=r"matmul_2d: block_size must be \[128, 128\] .* got \[64, 64\]"):
        host(torch.randn(2, 256))


# ------------------------------------------------------------------------------------------------------
# CUDA only (skipped without an sm_90 GPU)


@pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0")
@pytest.mark.parametrize("kind", FP8)
def test_cuda_matches_cpu_on_large_inputs(kind):
    for dtype in ACT_DTYPES:
        x = activations((4096, 7168), dtype, seed=1)
        q, s = gemm.fp8_act_quant(x.cuda(), dtype=FP8[kind])
        q_cpu, s_cpu = gemm.fp8_act_quant(x, dtype=FP8[kind])
        assert torch.equal(q.cpu().view(torch.uint8), q_cpu.view(torch.uint8)) and torch.equal(s.cpu(), s_cpu)


@pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0")
@pytest.mark.parametrize("kind", FP8)
def test_cuda_large_inputs_with_special_groups_and_row_strides(kind):
    # More (row, group) items than the CUDA launcher's grid takes in one step, so that threads of its kernel
    # for K-contiguous aligned rows load their next step while they quantize one, with an odd row count,
    # NaN / inf / zero / huge groups scattered over rows and groups, and rows that are not adjacent in
    # memory (aligned and unaligned row strides).
    gen = torch.Generator().manual_seed(5)
    for i, dtype in enumerate(ACT_DTYPES):
        base = activations((2 * 301, 16384 + 64), dtype, seed=40 + i)
        special = special_values(dtype)[:, :256]  # two whole groups a row
        for j in range(special.shape[0]):
            for _ in range(4):
                r = int(torch.randint(0, base.shape[0], (1,), generator=gen))
                g = int(torch.randint(0, 16384 // 128 - 1, (1,), generator=gen))
                base[r, g * 128 : g * 128 + 256] = special[j]
        base = base.cuda()
        views = {"contiguous": base[:301, :16384].contiguous(), "every other row": base[::2, :16384],
                 "16-byte aligned row stride": base[:301, :16384], "row stride off by one": base.view(-1)[1:].as_strided(
                     (301, 16384), (16384 + 65, 1))}
        for name, x in views.items():
            q, scale = gemm.fp8_act_quant(x, dtype=FP8[kind])
            try:
                check_quantized(x, q, scale, kind)
            except AssertionError as e:
                raise AssertionError(f"{name}, {dtype}: {e}") from None


@pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0")
@pytest.mark.parametrize("m", [1, 3, 16, 64, 130, 512])
@pytest.mark.parametrize("n,k", [(1536, 7168), (576, 7168), (7168, 2048), (4096, 128)])
def test_cuda_matmul_2d_deepseek_shapes(m, n, k, monkeypatch):
    # The GEMM starts as a programmatic dependent of the quantization (any M, M % 4 != 0 and one K block
    # included); with GEMM_CUDA_PDL=0 it waits for it. Both give the reference's result and the same bits.
    gen = torch.Generator().manual_seed(m)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn).cuda()
    b_scale = (torch.rand(groups(n), groups(k), generator=gen) + 0.5).cuda()
    a = activations((m, k), torch.bfloat16, seed=m, device="cuda")
    y = gemm.matmul_2d(a, b, b_scale, [128, 128])
    q, s, _ = matmul_reference(a, b, b_scale)
    assert_close_fp8_tensor_core(y.cpu(), q, b.cpu(), s, b_scale.cpu())
    monkeypatch.setenv("GEMM_CUDA_PDL", "0")
    assert torch.equal(gemm.matmul_2d(a, b, b_scale, [128, 128]), y)


@pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0")
@pytest.mark.parametrize("config", ["tile128x128,streamk,1,8", "tile128x128,splitk,4,8", "tile64x128,streamk,1,8"])
def test_cuda_matmul_2d_split_tiles_flags_cleared_by_the_quantization(config, monkeypatch):
    # Tiles split by K hand partial sums over through flags in the GEMM's workspace that must be zero when
    # the GEMM kernel starts; under matmul_2d the quantization kernel clears them. Freshly allocated
    # workspace memory is poisoned first (a freed block of all-ones bytes the caching allocator hands out
    # again), and graph replays reuse the flags the previous replay raised: both fail where they are not
    # cleared. Every result matches the reference and the bits of the launch that waits for the quantization.
    monkeypatch.setenv("GEMM_CUDA_CONFIG", config)
    m, n, k = 301, 1536, 7168
    gen = torch.Generator().manual_seed(11)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn).cuda()
    b_scale = (torch.rand(groups(n), groups(k), generator=gen) + 0.5).cuda()
    inputs = [activations((m, k), torch.bfloat16, seed=60 + i, device="cuda") for i in range(4)]
    wants = []
    for a in inputs:
        monkeypatch.setenv("GEMM_CUDA_PDL", "0")
        wants.append(gemm.matmul_2d(a, b, b_scale, [128, 128]))
        monkeypatch.delenv("GEMM_CUDA_PDL")
    q, s, _ = matmul_reference(inputs[0], b, b_scale)
    assert_close_fp8_tensor_core(wants[0].cpu(), q, b.cpu(), s, b_scale.cpu())
    for a, want in zip(inputs, wants):
        torch.full((64 << 20,), 0xFF, dtype=torch.uint8, device="cuda")  # freed at once: a poisoned block
        assert torch.equal(gemm.matmul_2d(a, b, b_scale, [128, 128]), want)
    static = inputs[0].clone()
    gemm.matmul_2d(static, b, b_scale, [128, 128])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = gemm.matmul_2d(static, b, b_scale, [128, 128])
    for _ in range(3):
        for a, want in zip(inputs, wants):
            static.copy_(a)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(y, want)


@pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0")
def test_cuda_matmul_2d_in_a_graph_on_a_side_stream():
    b = torch.randn(7168, 2048, device="cuda").to(torch.float8_e4m3fn)
    b_scale = torch.rand(56, 16, device="cuda") + 0.5
    a = activations((64, 2048), torch.bfloat16, seed=3, device="cuda")
    want = gemm.matmul_2d(a, b, b_scale, [128, 128])
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        gemm.matmul_2d(a, b, b_scale, [128, 128])  # warm-up on the capture stream
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            y = gemm.matmul_2d(a, b, b_scale, [128, 128])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, want)
