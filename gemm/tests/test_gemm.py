"""What every backend must do, checked on each of them (backends.py): cpu, cuda, cuda-exact, gfx942-emulation.

Each test takes a backend name; a backend runs the cases its size budget admits and skips where it cannot
run here (no sm_90 GPU, no compiler). Properties of one backend only live in test_gemm_cpu.py,
test_gemm_cuda.py and test_gfx942_emulation.py; the op's Python/torch surface (allocation, empty problems,
fake implementation, torch.compile, layers) in test_gemm_api.py; bad input in test_gemm_errors.py.
"""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from backends import BACKENDS, backend_params, use_backend
from reference import FP8_DTYPES, LAYOUTS, make_inputs, poisoned_out, reference_gemm

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz

# AMD challenge: the 11 correctness shapes (gpu-mode amd-fp8-mm task.yml) and the 18 timed ones.
TEST_SHAPES = [(64, 64, 128), (64, 1536, 7168), (64, 3072, 1536), (64, 576, 7168), (96, 7168, 256),
               (96, 7168, 2048), (96, 4608, 7168), (128, 7168, 2304), (128, 512, 7168), (512, 4096, 512),
               (512, 1536, 7168)]
BENCH_SHAPES = [(m, n, k) for m in (1024, 6144)
                for (n, k) in ((1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048), (4608, 7168),
                               (7168, 2304), (512, 7168), (4096, 512))]
# Both memory layouts and both fp8 kinds: the challenge's MN-major e4m3fnuz, DeepSeek's K-major e4m3fn
# and the two crossings.
KINDS = [("mn_major", FNUZ), ("mn_major", FN), ("k_major", FN), ("k_major", FNUZ)]
KIND_IDS = ["challenge-fnuz", "mn-fn", "kmajor-fn", "kmajor-fnuz"]
NATIVE_KINDS = [("mn_major", FNUZ), ("k_major", FN)]  # the two ways the data comes in practice
# K not a multiple of 128 or of 512, tiny and odd M, and shapes whose K or N break 16-byte row alignment.
ODD_SHAPES = [(m, 576, k) for m in (1, 7, 127) for k in (208, 256, 640, 2304)] + [
    (1, 1, 1), (3, 5, 7), (130, 100, 100), (65, 136, 264), (257, 129, 1000), (33, 7168, 256),
    (96, 200, 320), (200, 72, 200), (33, 257, 256)]


def _id(shape):
    return "x".join(map(str, shape))


def run_case(backend, a, b, a_scale, b_scale, outliers=False):
    out = poisoned_out(a.shape[0], b.shape[0], device=backend.device)
    backend.run(a, b, a_scale, b_scale, out)
    backend.check(out, a, b, a_scale, b_scale, outliers=outliers)
    return out


CHALLENGE_CASES = [(*shape, layout, dtype) for shape in TEST_SHAPES + BENCH_SHAPES for layout, dtype in KINDS]
CHALLENGE_IDS = [f"{_id(shape)}-{kind}" for shape in TEST_SHAPES + BENCH_SHAPES for kind in KIND_IDS]


def _challenge_admits(name, case):
    m, n, k, layout, dtype = case
    if name == "cpu":  # the float64 reference dominates: the test shapes, crossed kinds where they are cheap
        return (m, n, k) in TEST_SHAPES and ((layout, dtype) in NATIVE_KINDS or m * n * k <= 1e9)
    if name == "gfx942-emulation":  # 64x64x128 and 96x7168x256: one pass each, no split-K
        return m * n * k <= 2e8
    return m * n * k <= BACKENDS[name].max_macs


@pytest.mark.parametrize("backend_name,m,n,k,layout,dtype",
                         backend_params(CHALLENGE_CASES, ids=CHALLENGE_IDS, admit=_challenge_admits))
def test_challenge_shapes(backend_name, m, n, k, layout, dtype, monkeypatch):
    backend = use_backend(backend_name, monkeypatch)
    run_case(backend, *make_inputs(m, n, k, dtype, layout, seed=m + n + k, device=backend.device))


@pytest.mark.parametrize("layout,dtype", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("backend_name,m,n,k", backend_params(ODD_SHAPES, ids=[_id(s) for s in ODD_SHAPES]))
def test_odd_shapes(backend_name, m, n, k, layout, dtype, monkeypatch):
    backend = use_backend(backend_name, monkeypatch)
    run_case(backend, *make_inputs(m, n, k, dtype, layout, seed=3, device=backend.device))


@pytest.mark.parametrize("backend_name", list(BACKENDS))
@given(
    m=st.integers(1, 300),
    n=st.integers(1, 300),
    k=st.integers(1, 1300),
    layout=st.sampled_from(LAYOUTS),
    dtype=st.sampled_from(FP8_DTYPES),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_shapes(backend_name, m, n, k, layout, dtype, seed):
    with pytest.MonkeyPatch.context() as monkeypatch:
        backend = use_backend(backend_name, monkeypatch)
        run_case(backend, *make_inputs(m, n, k, dtype, layout, seed, device=backend.device))


@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=["fnuz", "fn"])
@pytest.mark.parametrize("backend_name", list(BACKENDS))
def test_every_fp8_code_decodes_like_torch(backend_name, dtype, monkeypatch):
    # Row i of a holds fp8 code i at k = 0 and b is 1.0 there: out[i, 0] is exactly decode(i) (bf16 holds
    # every e4m3 value). NaN codes must come out NaN.
    backend = use_backend(backend_name, monkeypatch)
    codes = torch.arange(256, dtype=torch.uint8)
    raw = torch.zeros(256, 3, dtype=torch.uint8)
    raw[:, 0] = codes
    a = raw.view(dtype).to(backend.device)
    b = torch.ones(1, 3).to(dtype).to(backend.device)
    out = poisoned_out(256, 1, device=backend.device)
    backend.run(a, b, torch.ones(256, 1, device=backend.device), torch.ones(1, 1, device=backend.device), out)
    expected = codes.view(dtype).to(torch.float32).to(torch.bfloat16)
    torch.testing.assert_close(out[:, 0].cpu(), expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=["fnuz", "fn"])
@pytest.mark.parametrize("backend_name", list(BACKENDS))
def test_exact_when_no_fp32_rounding_happens(backend_name, dtype, layout, monkeypatch):
    # Small fp8 values (multiples of 1/4 up to 16) and power-of-two scales keep every partial sum and every
    # scaled accumulation exactly representable in fp32, so out must equal the float64 result rounded once
    # to bf16, bit for bit, on the backends that sum exact products in fp32.
    backend = use_backend(backend_name, monkeypatch)
    if not backend.exact:
        pytest.skip("the fp8 tensor-core path rounds partial sums to ~13 fraction bits")
    m, n, k = 37, 300, 1000
    gen = torch.Generator().manual_seed(7)
    values = torch.tensor([0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16], dtype=torch.float32)
    values = torch.cat([values, -values])

    def draw(*shape):
        return values[torch.randint(len(values), shape, generator=gen)]

    a, b = draw(m, k).to(dtype), draw(n, k).to(dtype)
    if layout == "mn_major":
        a, b = a.T.contiguous().T, b.T.contiguous().T
    a_scale = torch.exp2(torch.randint(-2, 3, (m, 8), generator=gen).float())
    b_scale = -torch.exp2(torch.randint(-2, 3, (3, 8), generator=gen).float())
    expected = reference_gemm(a, b, a_scale, b_scale).to(torch.float32).to(torch.bfloat16)
    dev = backend.device
    out = poisoned_out(m, n, device=dev)
    backend.run(a.to(dev), b.to(dev), a_scale.to(dev), b_scale.to(dev), out)
    assert torch.equal(out.cpu(), expected)


def _nan_code(dtype):
    return 0x80 if dtype == FNUZ else 0x7F


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=["fnuz", "fn"])
@pytest.mark.parametrize("backend_name,m,n,k", backend_params([(9, 260, 300), (128, 576, 2304)]))
def test_nan_and_inf_propagate(backend_name, m, n, k, dtype, layout, monkeypatch):
    """A NaN fp8 code poisons its row (of a) or column (of b), a NaN b_scale its 128 columns, an infinite
    a_scale gives +-inf (or NaN where that block's partial sum is 0); everything else stays finite."""
    backend = use_backend(backend_name, monkeypatch)
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, layout, seed=8)
    a_raw = (a if a.is_contiguous() else a.T).view(torch.uint8)  # MN-major operands transpose a contiguous one
    b_raw = (b if b.is_contiguous() else b.T).view(torch.uint8)
    at = (lambda i, j: (i, j)) if a.is_contiguous() else (lambda i, j: (j, i))
    bt = (lambda i, j: (i, j)) if b.is_contiguous() else (lambda i, j: (j, i))
    a_raw[at(2, 150)] = _nan_code(dtype)  # row 2 all NaN
    b_raw[bt(7, 0)] = _nan_code(dtype)  # column 7 all NaN
    a_scale[4, 1] = float("inf")  # row 4: +-inf (or NaN where that block's partial is 0)
    b_scale[1, 0] = float("nan")  # columns 128..255 all NaN
    ref = reference_gemm(a, b, a_scale, b_scale)
    assert ref[2].isnan().all() and ref[:, 7].isnan().all() and ref[:, 128:256].isnan().all()
    assert ref[4].isinf().any() and torch.isfinite(ref[5:, 256:]).all()
    dev = backend.device
    run_case(backend, a.to(dev), b.to(dev), a_scale.to(dev), b_scale.to(dev))


@pytest.mark.parametrize("special", ["max", "nan", "max_and_nan"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=["fnuz", "fn"])
@pytest.mark.parametrize("backend_name,m,n,k", backend_params([(7, 512, 640), (128, 576, 2304), (256, 1536, 7168)]))
def test_special_fp8_values(backend_name, m, n, k, dtype, layout, special, monkeypatch):
    """The largest fp8 magnitudes (e4m3fnuz +-240 is 0x7f/0xff, which e4m3fn reads as NaN; e4m3fn +-448)
    and NaN codes planted at random in both operands."""
    backend = use_backend(backend_name, monkeypatch)
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, layout, seed=21)
    gen = torch.Generator().manual_seed(5)
    max_codes = [0x7F, 0xFF] if dtype == FNUZ else [0x7E, 0xFE]

    def plant(t, codes, count):
        raw = (t if t.is_contiguous() else t.T).view(torch.uint8).reshape(-1)
        where = torch.randint(0, raw.numel(), (count,), generator=gen)
        raw[where] = torch.tensor(codes, dtype=torch.uint8)[torch.randint(0, len(codes), (count,), generator=gen)]

    if "max" in special:
        plant(a, max_codes, max(1, a.numel() // 1000))
        plant(b, max_codes, max(1, b.numel() // 1000))
    if "nan" in special:
        plant(a, [_nan_code(dtype)] if dtype == FNUZ else [0x7F, 0xFF], 2)
        assert a.float().isnan().any()
    dev = backend.device
    run_case(backend, a.to(dev), b.to(dev), a_scale.to(dev), b_scale.to(dev), outliers="max" in special)


def _strided_copy(values, device, step=1, offset=0, rows_step=1):
    """``values`` (rows, K) copied into a view that reads every ``step``-th column of a wider NaN-filled
    buffer on ``device``, starting ``offset`` bytes in (unaligned when odd), rows ``rows_step`` apart."""
    rows, k = values.shape
    base = torch.full((rows * rows_step, offset + step * k), _nan_code(values.dtype), dtype=torch.uint8,
                      device=device).view(values.dtype)
    view = base[::rows_step, offset::step][:, :k]
    view.view(torch.uint8).copy_(values.view(torch.uint8))
    return view


# out as a view into a larger NaN canvas: (canvas shape, the view of a canvas-shaped tensor).
OUT_KINDS = {
    "contiguous": (lambda m, n: (m, n), lambda t, m, n: t),
    "padded_rows": (lambda m, n: (m, n + 3), lambda t, m, n: t[:, :n]),  # rows not 16-byte aligned
    "window": (lambda m, n: (m + 4, 2 * n + 6), lambda t, m, n: t[2 : 2 + m, 3 : 3 + 2 * n : 2]),  # column stride 2
    "transposed": (lambda m, n: (n, m), lambda t, m, n: t.T),  # column-major
}


@pytest.mark.parametrize("out_kind", list(OUT_KINDS))
@pytest.mark.parametrize("backend_name,m,n,k", backend_params([(7, 576, 640), (45, 150, 260), (130, 100, 100),
                                                              (1024, 1536, 7168)]))
def test_strided_inputs_and_poisoned_out(backend_name, m, n, k, out_kind, monkeypatch):
    """Operands read through odd strides and unaligned addresses, out a view into a NaN canvas: every
    element of out is written (the check fails on NaN) and nothing else in the canvas changes."""
    backend = use_backend(backend_name, monkeypatch)
    dev = backend.device
    a, b, a_scale, b_scale = make_inputs(m, n, k, FN, "k_major", seed=m + n, device=dev)
    a_view = _strided_copy(a, dev, step=2, offset=1)  # every other column, 1 byte past the buffer start
    b_view = _strided_copy(b, dev, offset=3, rows_step=3)  # every third row, 3 bytes in
    a_scale_mn = a_scale.T.contiguous().T
    canvas_shape, view_of = OUT_KINDS[out_kind]
    canvas = torch.full(canvas_shape(m, n), float("nan"), dtype=torch.bfloat16, device=dev)
    out = view_of(canvas, m, n)
    backend.run(a_view, b_view, a_scale_mn, b_scale, out)
    backend.check(out, a, b, a_scale, b_scale)
    outside = torch.ones(canvas.shape, dtype=torch.bool, device=dev)
    view_of(outside, m, n).fill_(False)
    assert canvas[outside].isnan().all(), "an element outside out changed"


@pytest.mark.parametrize("backend_name,m,n,k", backend_params([(20, 140, 300), (200, 700, 1000)]))
def test_zero_strides_and_scale_layouts(backend_name, m, n, k, monkeypatch):
    """Read-only arguments may be broadcast (stride 0) and scales may have any strides: an expanded a and
    a_scale, a b_scale broadcast along K, an N-major b_scale and an a_scale read every other column."""
    backend = use_backend(backend_name, monkeypatch)
    dev = backend.device
    a, b, a_scale, b_scale = make_inputs(m, n, k, FN, "k_major", seed=4, device=dev)
    kb, nb = a_scale.shape[1], b_scale.shape[0]
    a_scale_wide = torch.randn(m, 2 * kb, device=dev)
    a_scale_wide[:, ::2] = a_scale
    run_case(backend, a[:1].expand(m, k), b, a_scale[:1].expand(m, kb), b_scale[:, :1].expand(nb, kb))
    run_case(backend, a, b, a_scale_wide[:, ::2], b_scale.T.contiguous().T)


# ------------------------------------------------------------------------------------------------------
# The guaranteed numerical range (README, "Numerical range"): every nonzero scale magnitude in
# [2^-62, 2^62] and, per output, the sum of the terms' magnitudes sum_kb |a_scale * b_scale| * sum_k |a*b|
# at most 2^126. The edges of that range, with data whose block sums fp32 holds exactly (so every backend,
# the fp8 tensor-core path included, must give the float64 result rounded once to bf16, or within one bf16
# step where a scale is not a power of two).

def _edge_inputs(m, n, k, values, a_scale_mag, b_scale_mag, seed, signed_scales=True):
    gen = torch.Generator().manual_seed(seed)
    kb, nb = (k + 127) // 128, (n + 127) // 128
    vals = torch.tensor(values, dtype=torch.float32)
    a = vals[torch.randint(len(vals), (m, k), generator=gen)]
    b = vals[torch.randint(len(vals), (n, k), generator=gen)]

    def scales(shape, mag):
        sign = torch.randint(0, 2, shape, generator=gen).float() * 2 - 1 if signed_scales else torch.ones(shape)
        return sign * mag

    return a, b, scales((m, kb), a_scale_mag), scales((nb, kb), b_scale_mag)


EDGES = {
    # Scales at the top of the range (2^62 * 2^62 = 2^124) on data of 2^-3: terms up to 2^125 in one block.
    "largest-scales": dict(k=128, values=[0.125, -0.125, 0.0], a_scale_mag=2.0 ** 62, b_scale_mag=2.0 ** 62),
    # Scales at the bottom (2^-124) on data whose block sums are 32..128: results 2^-119..2^-117, normal.
    "smallest-scales": dict(k=128, values=[0.5, 1.0], a_scale_mag=2.0 ** -62, b_scale_mag=2.0 ** -62,
                            signed_scales=False),
    # Two blocks of terms up to 2^125: sums up to 2^126, the largest the range admits.
    "largest-sum": dict(k=256, values=[0.5, 1.0], a_scale_mag=2.0 ** 59, b_scale_mag=2.0 ** 59,
                        signed_scales=False),
    # Not powers of two: the scale product rounds once more (within one bf16 step of the formula).
    "large-arbitrary-scales": dict(k=128, values=[0.125, -0.125, 0.0], a_scale_mag=3.9e18, b_scale_mag=4.4e18),
    "small-arbitrary-scales": dict(k=128, values=[0.5, 1.0], a_scale_mag=2.3e-19, b_scale_mag=2.9e-19,
                                   signed_scales=False),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=["fnuz", "fn"])
@pytest.mark.parametrize("edge", list(EDGES))
@pytest.mark.parametrize("backend_name", list(BACKENDS))
def test_numerical_range_edges(backend_name, edge, dtype, layout, monkeypatch):
    backend = use_backend(backend_name, monkeypatch)
    m, n = 48, 256
    spec = dict(EDGES[edge])
    k = spec.pop("k")
    a, b, a_scale, b_scale = _edge_inputs(m, n, k, seed=len(edge), **spec)
    a, b = a.to(dtype), b.to(dtype)
    if layout == "mn_major":
        a, b = a.T.contiguous().T, b.T.contiguous().T
    # The inputs are at the edge and inside: every scale in [2^-62, 2^62], the sum of |terms| <= 2^126.
    for s in (a_scale, b_scale):
        assert bool(((s.abs() >= 2.0 ** -62) & (s.abs() <= 2.0 ** 62)).all())
    mass = reference_gemm(a.float().abs(), b.float().abs(), a_scale.abs(), b_scale.abs())
    assert float(mass.max()) <= 2.0 ** 126
    ref = reference_gemm(a, b, a_scale, b_scale)
    dev = backend.device
    out = poisoned_out(m, n, device=dev)
    backend.run(a.to(dev), b.to(dev), a_scale.to(dev), b_scale.to(dev), out)
    got = out.cpu().to(torch.float64)
    assert torch.isfinite(got).all()
    if "arbitrary" in edge:
        # The fp32 scale product and fp32 result each round once more than the formula: one bf16 step.
        torch.testing.assert_close(got, ref, rtol=2.0 ** -7, atol=0)
    else:
        assert torch.equal(got, ref.to(torch.float32).to(torch.bfloat16).to(torch.float64))
