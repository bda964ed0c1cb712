"""The decode kernel of the sm_90a backend (gemm_cuda/sm90_decode.cu: M <= 64) against the float64 reference.

Calls with M <= 64 take it by default unless the generic rules send them to 64-row tiles (long weights read
over the whole K); GEMM_CUDA_CONFIG="decode,splitk,<CTAs per tile>,<rows per CTA>" forces a plan (DECODE_AUTO:
the decode kernel with its cost model's plan), so each (token tile, rows per CTA, K split) is run on odd N, K
tails, both layouts, both fp8 kinds and strided scales and outputs. Skips cleanly without a CUDA device of
compute capability 9.0.
"""
import pytest
import torch

from reference import make_inputs, poisoned_out, reference_gemm_on_device
from test_gemm_cuda import FN, FNUZ, _sm90_available, _shape_id, check

pytestmark = pytest.mark.skipif(not _sm90_available(), reason="needs a CUDA device of compute capability 9.0")

if _sm90_available():
    import gemm

# M across the four token tiles (8, 16, 32, 64) and their edges.
DECODE_M = [1, 2, 4, 7, 8, 9, 16, 17, 32, 33, 63, 64]
# (N, K): N not a multiple of 64 or 128, K tails (K % 128 != 0, K % 16 != 0: the padded path), one K block.
DECODE_NK = [(576, 7168), (100, 1000), (257, 208), (1536, 2304), (130, 16), (7168, 128), (4100, 7000)]
LAYOUTS = [("k_major", FN), ("mn_major", FNUZ), ("k_major", FNUZ), ("mn_major", FN)]
# The decode kernel with the plan its cost model picks (a split outside 1-8, rows other than 64 / 128).
DECODE_AUTO = "decode,splitk,9,1"


def run_decode(m, n, k, dtype, layout, seed, out_kind="contiguous", scale_kind="as_drawn"):
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, layout, seed, device="cuda")
    if scale_kind == "strided":  # a_scale K-major with a stride of 2, b_scale N-major
        big = torch.full((m, 2 * a_scale.shape[1]), float("nan"), device="cuda")
        big[:, ::2] = a_scale
        a_scale = big[:, ::2]
        b_scale = b_scale.t().contiguous().t()
    if out_kind == "contiguous":
        out = poisoned_out(m, n, device="cuda")
    elif out_kind == "transposed":  # out (m, n) with strides (1, m): the decode kernel writes any strides
        out = torch.full((n, m), float("nan"), dtype=torch.bfloat16, device="cuda").t()
    else:  # rows not 16-byte aligned
        out = torch.full((m, n + 3), float("nan"), dtype=torch.bfloat16, device="cuda")[:, :n]
    assert gemm.gemm(a, b, a_scale, b_scale, out=out) is out
    torch.cuda.synchronize()
    check(out, a, b, a_scale, b_scale, exact=False)


@pytest.mark.parametrize("nk", DECODE_NK, ids=_shape_id)
@pytest.mark.parametrize("m", DECODE_M)
def test_decode_default_plan(m, nk, monkeypatch):
    monkeypatch.delenv("GEMM_CUDA_CONFIG", raising=False)
    i = DECODE_M.index(m) + DECODE_NK.index(nk)
    layout, dtype = LAYOUTS[i % len(LAYOUTS)]
    run_decode(m, *nk, dtype, layout, seed=i, out_kind=("contiguous", "transposed", "strided")[i % 3],
               scale_kind=("as_drawn", "strided")[i % 2])


@pytest.mark.parametrize("split", [1, 2, 3, 8])
@pytest.mark.parametrize("rows", [64, 128])
@pytest.mark.parametrize("m", [1, 9, 17, 33, 64])
@pytest.mark.parametrize("nk", [(257, 1000), (576, 7168), (130, 16)], ids=_shape_id)
def test_decode_forced_plans(nk, m, rows, split, monkeypatch):
    """Each (token tile, rows per CTA, CTAs per tile) on edge tiles; a split larger than the K blocks
    leaves CTAs without K blocks (they contribute zeros to the cluster sum)."""
    monkeypatch.setenv("GEMM_CUDA_CONFIG", f"decode,splitk,{split},{rows}")
    i = m + rows + split + nk[0]
    layout, dtype = LAYOUTS[i % len(LAYOUTS)]
    run_decode(m, *nk, dtype, layout, seed=i, out_kind=("contiguous", "transposed")[i % 2])


def _stages(m, rows):
    """The decode kernel's ring depth (sm90_decode.cu, Cfg::kStages) for m activation rows and a tile of
    `rows` weight rows: about 96 KB of stages with two CTAs per SM, 200 KB with one, at most 8."""
    bt = 8 if m <= 8 else 16 if m <= 16 else 32 if m <= 32 else 64
    tma = (rows + bt) * 128
    memory = 200 * 1024 if bt * rows // 64 >= 128 else 96 * 1024
    return min(8, memory // tma)


@pytest.mark.parametrize("m", [1, 17, 33, 64])
def test_decode_split_last_stage_is_stage_zero(m, monkeypatch):
    """Two math warpgroups (128 weight rows) with a K split whose last block lands in stage 0, the memory the
    split's partial tile is written to: every warpgroup must have finished reading it first. A long K per
    CTA lets the warpgroups drift apart."""
    kb_per = 1 + 3 * _stages(m, 128)
    monkeypatch.setenv("GEMM_CUDA_CONFIG", "decode,splitk,2,128")
    for seed in range(3):
        run_decode(m, 4096, 2 * 128 * kb_per, FN, "k_major", seed=seed)


@pytest.mark.parametrize("rows", [64, 128])
@pytest.mark.parametrize("m", [1, 17, 64])
def test_decode_persistent_rounds(m, rows, monkeypatch):
    """Unsplit tiles beyond one per CTA slot: the launch takes as few CTAs as keep the busiest one's count
    (N 34000: 266 tiles of 128 rows or 532 of 64 against 132 or 264 slots, so two or three tiles a CTA, the
    last round not full), and every tile is computed exactly once (poisoned output)."""
    monkeypatch.setenv("GEMM_CUDA_CONFIG", f"decode,splitk,1,{rows}")
    run_decode(m, 34000, 1000, FN, "k_major", seed=m + rows)


@pytest.mark.parametrize("plan", ["dispatch", "decode"])
@pytest.mark.parametrize("m", [1, 16, 64])
@pytest.mark.parametrize("nk", [(1536, 7168), (24576, 1536), (32768, 512), (7168, 2048), (4096, 7168)], ids=_shape_id)
def test_decode_deepseek_shapes(m, nk, plan, monkeypatch):
    """What the dispatch picks (the decode kernel or 64-row tiles), and the decode kernel's own plan."""
    if plan == "decode":
        monkeypatch.setenv("GEMM_CUDA_CONFIG", DECODE_AUTO)
    else:
        monkeypatch.delenv("GEMM_CUDA_CONFIG", raising=False)
    run_decode(m, *nk, FN, "k_major", seed=m + nk[0])


@pytest.mark.parametrize("special", ["fn_nan", "fnuz_nan", "fnuz_pm240"])
@pytest.mark.parametrize("m", [1, 16, 64])
def test_decode_special_values(m, special):
    """NaN codes in the weight reach exactly the reference's NaN outputs; e4m3fnuz +-240 (not representable
    once reinterpreted as e4m3fn) takes the exact fallback after the decode kernel."""
    n, k = 700, 1000
    dtype = FN if special.startswith("fn_") else FNUZ
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, "k_major", seed=41, device="cuda")
    raw = b.view(torch.uint8)
    if special == "fnuz_pm240":
        raw[3, 5], raw[400, 999] = 0x7F, 0xFF
    else:
        raw[7, 3] = 0x80 if dtype == FNUZ else 0x7F
    out = poisoned_out(m, n, device="cuda")
    gemm.gemm(a, b, a_scale, b_scale, out=out)
    torch.cuda.synchronize()
    if special != "fnuz_pm240":
        assert torch.isnan(reference_gemm_on_device(a, b, a_scale, b_scale)).any()
    check(out, a, b, a_scale, b_scale, exact=False)


def test_decode_is_deterministic(monkeypatch):
    """The K-split partial sums are added in a fixed order: repeated calls give the same bits."""
    monkeypatch.setenv("GEMM_CUDA_CONFIG", "decode,splitk,4,128")
    a, b, a_scale, b_scale = make_inputs(16, 7168, 7168, FN, "k_major", seed=5, device="cuda")
    first = gemm.gemm(a, b, a_scale, b_scale)
    for _ in range(3):
        assert torch.equal(gemm.gemm(a, b, a_scale, b_scale), first)


def test_decode_cuda_graph_replay(monkeypatch):
    monkeypatch.setenv("GEMM_CUDA_CONFIG", DECODE_AUTO)
    m, n, k = 4, 4096, 7168
    a, b, a_scale, b_scale = make_inputs(m, n, k, FN, "k_major", seed=51, device="cuda")
    out = poisoned_out(m, n, device="cuda")
    gemm.gemm(a, b, a_scale, b_scale, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemm.gemm(a, b, a_scale, b_scale, out=out)
    new = make_inputs(m, n, k, FN, "k_major", seed=52, device="cuda")
    a.view(torch.uint8).copy_(new[0].view(torch.uint8))
    b.view(torch.uint8).copy_(new[1].view(torch.uint8))
    a_scale.copy_(new[2])
    b_scale.copy_(new[3])
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check(out, a, b, a_scale, b_scale, exact=False)
