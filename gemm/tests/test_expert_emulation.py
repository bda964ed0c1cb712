"""The gfx942 MoE expert GEMMs' own device code (the routing passes of gemm/gemm/expert_gemm_rocm_kernels.h and the
expert mode of the main GEMM pass in gemm/gemm/gemm_rocm_kernels.h), executed lane by lane on the CPU SIMT emulator
(gemm/docs/emulation.md) through the plan the HIP launcher runs (gemm/gemm/expert_gemm_rocm_plan.h), against the
float64 reference on fresh random routings.

gemm/tests/emulation/gfx942_expert_driver.cpp compiles the bodies with the host compiler (-DFP8GEMM_SIMT_EMULATION)
and runs every pass over the bytes of the tensors' storages with their strides; the emulator checks every global
access against the buffers (bounds, races between workgroups, plain and atomic accesses mixed). The output and the
workspace start poisoned, so a row the call forgets to write, or a workspace byte read before it is written, shows.
Needs g++ (or clang++) with C++20 and Linux; no torch extension build, no GPU.
"""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

from emulation_build import CXX, CXXFLAGS, EMU_DIR, GEMM_DIR, SKIP_WITHOUT_HOST_COMPILER, build_driver
from reference import reference_gemm

RUN_TIMEOUT_S = 300
RTOL, ATOL = 2e-2, 1e-3  # the challenge's tolerance, as the dense GEMM's emulation tests
FP8 = {"e4m3fnuz": torch.float8_e4m3fnuz, "e4m3fn": torch.float8_e4m3fn}
FORMAT = {"e4m3fnuz": 0, "e4m3fn": 1}
IDS_DTYPE = {torch.int8: 0, torch.uint8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4}

pytestmark = SKIP_WITHOUT_HOST_COMPILER


@pytest.fixture(scope="session")
def driver(tmp_path_factory):
    return build_driver(tmp_path_factory.mktemp("expert_emulation"), "gfx942_expert_driver", timeout=900)


def write_tensor(d, name, x, pad=0):
    """x's storage from its first element on into DIR/<name>.bin; `pad` poisoned elements before it."""
    flat = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage())[x.storage_offset():]
    flat.contiguous().view(torch.uint8).numpy().tofile(os.path.join(d, name + ".bin"))
    kv = {f"{name}_storage": flat.numel(), f"{name}_offset": pad}
    kv.update({f"{name}_stride{i}": s for i, s in enumerate(x.stride())})
    return kv


def fp8(shape, kind, gen):
    return (torch.randn(shape, generator=gen) * 2).to(torch.bfloat16).to(FP8[kind])


def emulate(driver, tmp_path, a, a_scale, b, b_scale, kind, ids=None, offsets=None, out_pad=0):
    s, k = a.shape
    e, n, _ = b.shape
    d = tmp_path / f"run_{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    kv = {"s": s, "n": n, "k": k, "experts": e, "format": FORMAT[kind], "routing": 0 if ids is not None else 1}
    kv.update(write_tensor(str(d), "a", a.view(torch.uint8), pad=16))
    kv.update(write_tensor(str(d), "a_scale", a_scale, pad=1))
    kv.update(write_tensor(str(d), "b", b.view(torch.uint8), pad=32))
    kv.update(write_tensor(str(d), "b_scale", b_scale))
    ld = n + out_pad
    kv.update({"out_storage": (s - 1) * ld + n, "out_offset": 2, "out_stride0": ld})
    if ids is not None:
        kv["ids_dtype"] = IDS_DTYPE[ids.dtype]
        kv.update(write_tensor(str(d), "ids", ids))
    else:
        kv.update(write_tensor(str(d), "offsets", offsets))
    (d / "problem.txt").write_text("".join(f"{key} {value}\n" for key, value in kv.items()))
    env = dict(os.environ)
    env.setdefault("FP8GEMM_SIMT_THREADS", str(max(1, min(os.cpu_count() or 1, 4))))
    r = subprocess.run([driver, str(d)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    assert r.returncode == 0, f"driver failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    raw = torch.from_numpy(np.fromfile(d / "out.bin", np.uint16).view(np.int16)).view(torch.bfloat16)
    out = torch.as_strided(raw, (s, n), (ld, 1))
    # The padding between output rows is never written (still the poison).
    if out_pad:
        gaps = torch.as_strided(raw.view(torch.int16), (s - 1, out_pad), (ld, 1), n)
        assert bool((gaps == -1).all()), "bytes between output rows were written"
    return out, json.loads(r.stdout.strip().splitlines()[-1])


def segments_of(offsets, e, s):
    """The clamped segments the docs promise: end_e = max(end_{e-1}, min(max(offsets[e], 0), s))."""
    starts, ends, end = [], [], 0
    for i in range(e):
        start = end
        end = max(end, min(max(int(offsets[i]), 0), s))
        starts.append(start)
        ends.append(end)
    return starts, ends


def expert_of_rows(s, e, ids=None, offsets=None):
    """Each row's expert, -1 for a row of none."""
    if ids is not None:
        rid = ids.to(torch.int64)
        return torch.where((rid >= 0) & (rid < e), rid, torch.full_like(rid, -1))
    starts, ends = segments_of(offsets, e, s)
    rows = torch.full((s,), -1, dtype=torch.int64)
    for i in range(e):
        rows[starts[i]:ends[i]] = i
    return rows


def check(driver, tmp_path, s, n, k, e, kind, seed, ids=None, offsets=None, a_pad=0, b_layout="contiguous",
          out_pad=0, scale_layout="row"):
    gen = torch.Generator().manual_seed(seed)
    kb, nb = -(-k // 128), -(-n // 128)
    a = fp8((s, k + a_pad), kind, gen)[:, :k]
    if scale_layout == "row":
        a_scale = torch.randn(s, kb, generator=gen)
    else:  # the binding's: K-block-major with a padded leading dimension
        a_scale = torch.randn(kb, s + 3, generator=gen)[:, :s].T
    if b_layout == "contiguous":
        b = fp8((e, n, k), kind, gen)
    elif b_layout == "expert_gap":  # experts not evenly packed: one pack (or read) per expert
        b = fp8((e, n + 1, k), kind, gen)[:, :n]
    else:  # "n_major": each expert's (N, K) transposed in memory
        b = fp8((e, k, n), kind, gen).transpose(1, 2)
    b_scale = torch.randn(e, nb, kb, generator=gen)
    out, info = emulate(driver, tmp_path, a, a_scale, b, b_scale, kind, ids=ids, offsets=offsets, out_pad=out_pad)
    rows = expert_of_rows(s, e, ids, offsets)
    got = out.to(torch.float64)
    assert not torch.isnan(got).any(), f"{int(torch.isnan(got).sum())} NaN outputs (poison left)"
    ref = torch.zeros(s, n, dtype=torch.float64)
    for i in range(e):
        sel = torch.nonzero(rows == i).flatten()
        if sel.numel():
            ref[sel] = reference_gemm(a[sel], b[i], a_scale[sel], b_scale[i])
    none = rows < 0
    assert bool((got[none] == 0).all()), "rows of no expert must be zeros"
    torch.testing.assert_close(got, ref.to(torch.bfloat16).to(torch.float64), rtol=RTOL, atol=ATOL)
    err = (got - ref).abs()
    assert bool((err <= ref.abs() * 2.0 ** -7 + 1e-3).all()), f"max err {float(err.max())}"
    # Exactly the experts' M blocks were multiplied, over every N tile and K block.
    bm, bn = info["block_m"], info["block_n"]
    blocks = sum(-(-int((rows == i).sum()) // bm) for i in range(e))
    macs = info["mfma16"] * 16 * 16 * 32 + info["mfma32"] * 32 * 32 * 16
    assert macs == blocks * bm * (-(-n // bn)) * bn * kb * 128, (info, blocks)
    return info


def random_ids(s, e, gen, dtype=torch.int64, skew=False, placeholders=0.0):
    if skew:  # most rows on a few experts
        w = torch.rand(e, generator=gen) ** 6 + 1e-3
        ids = torch.multinomial(w, s, replacement=True, generator=gen)
    else:
        ids = torch.randint(0, e, (s,), generator=gen)
    if placeholders:
        bad = torch.rand(s, generator=gen) < placeholders
        lo, hi = (0, 255) if dtype == torch.uint8 else (-128, 127) if dtype == torch.int8 else (-(2**15), 2**15 - 1)
        junk = torch.randint(lo, hi + 1, (s,), generator=gen)
        junk = torch.where((junk >= 0) & (junk < e), junk + e if dtype != torch.int8 or e <= 63 else -1 - junk, junk)
        ids = torch.where(bad, junk, ids)
    return ids.to(dtype)


def offsets_from_counts(counts):
    return torch.cumsum(torch.as_tensor(counts, dtype=torch.int64), 0).to(torch.int32)


# ---- matmul_batched ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FP8)
def test_batched_uniform_and_skewed(driver, tmp_path, kind):
    gen = torch.Generator().manual_seed(11)
    # 64-row tiles (s <= 64 E) with odd K and N; then 128-row tiles (s > 64 E), skewed.
    info = check(driver, tmp_path, 70, 136, 208, 4, kind, seed=1, ids=random_ids(70, 4, gen))
    assert info["block_m"] == 64 and [p["kernel"] for p in info["passes"]] == (
        ["zero", "batched_count", "batched_segments", "batched_gather"] + (["pack"] if kind == "e4m3fn" else []) + ["tiles"])
    info = check(driver, tmp_path, 150, 72, 130, 2, kind, seed=2, ids=random_ids(150, 2, gen, skew=True))
    assert info["block_m"] == 128


@pytest.mark.parametrize("dtype", list(IDS_DTYPE))
def test_batched_id_dtypes_strides_and_placeholders(driver, tmp_path, dtype):
    gen = torch.Generator().manual_seed(20 + IDS_DTYPE[dtype])
    s, e = 45, 5
    ids = random_ids(2 * s, e, gen, dtype, placeholders=0.3)[::2]  # strided view, about 30 % outside [0, E)
    assert ids.stride(0) == 2
    check(driver, tmp_path, s, 40, 96, e, "e4m3fnuz", seed=3 + IDS_DTYPE[dtype], ids=ids, out_pad=3)


def test_batched_empty_experts_one_expert_all_rows_and_no_rows(driver, tmp_path):
    gen = torch.Generator().manual_seed(5)
    # Every row on expert 3 of 7 (six experts without rows).
    check(driver, tmp_path, 33, 24, 128, 7, "e4m3fn", seed=4, ids=torch.full((33,), 3, dtype=torch.int32))
    # No row on any expert: all zeros, and no tile multiplies anything.
    info = check(driver, tmp_path, 9, 16, 64, 3, "e4m3fnuz", seed=5, ids=torch.full((9,), -1, dtype=torch.int16))
    assert info["mfma16"] == info["mfma32"] == 0
    # A single row and a single expert.
    check(driver, tmp_path, 1, 8, 16, 1, "e4m3fnuz", seed=6, ids=torch.zeros(1, dtype=torch.int64))
    # More experts than one workgroup's scan (300 > 256), most of them empty.
    check(driver, tmp_path, 20, 16, 32, 300, "e4m3fnuz", seed=7, ids=random_ids(20, 300, gen, torch.int16))


def test_batched_operand_layouts(driver, tmp_path):
    gen = torch.Generator().manual_seed(8)
    ids = random_ids(40, 3, gen, torch.int32, placeholders=0.1)
    # Unaligned a rows (byte gathers into the sorted copy); b experts not evenly packed; the binding's a_scale.
    info = check(driver, tmp_path, 40, 48, 144, 3, "e4m3fnuz", seed=9, ids=ids, a_pad=5, b_layout="expert_gap",
                 scale_layout="binding")
    assert not info["pack_b"], info  # each expert's b is read in place
    info = check(driver, tmp_path, 40, 48, 100, 3, "e4m3fnuz", seed=10, ids=ids, b_layout="expert_gap")
    assert info["pack_b"] and info["passes"][-2]["repeat"] == 3, info  # odd K: one pack per expert
    info = check(driver, tmp_path, 40, 48, 144, 3, "e4m3fn", seed=11, ids=ids, b_layout="n_major")
    assert info["pack_b"] and info["passes"][-2]["repeat"] == 3, info


# ---- matmul_grouped ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FP8)
def test_grouped_uniform_skewed_and_empty(driver, tmp_path, kind):
    gen = torch.Generator().manual_seed(30)
    counts = torch.randint(0, 30, (5,), generator=gen)
    counts[2] = 0  # an expert without rows
    s = int(counts.sum()) + 7  # rows past the last offset: zeros
    info = check(driver, tmp_path, s, 100, 272, 5, kind, seed=12, offsets=offsets_from_counts(counts))
    assert info["pack_a"] == (kind == "e4m3fn"), info  # e4m3fnuz rows of 16-byte multiples are read in place
    want = ["pack", "grouped_segments", "pack", "tiles"] if kind == "e4m3fn" else ["grouped_segments", "tiles"]
    assert [p["kernel"] for p in info["passes"]] == want, info
    # One expert holds every row (skewed to the limit), 128-row tiles.
    check(driver, tmp_path, 200, 24, 64, 1, kind, seed=13, offsets=torch.tensor([200], dtype=torch.int32))
    check(driver, tmp_path, 140, 24, 96, 4, kind, seed=14, offsets=offsets_from_counts([0, 0, 140, 0]))


def test_grouped_bad_offsets_are_clamped(driver, tmp_path):
    s = 50
    # Non-monotone, negative, past S: the clamped running maximum decides each expert's rows.
    offsets = torch.tensor([12, 5, -3, 30, 1000, 40], dtype=torch.int32)
    check(driver, tmp_path, s, 40, 80, 6, "e4m3fnuz", seed=15, offsets=offsets)
    offsets = torch.tensor([-7, -1], dtype=torch.int32)  # no row on any expert
    info = check(driver, tmp_path, 10, 16, 32, 2, "e4m3fn", seed=16, offsets=offsets)
    assert info["mfma16"] == info["mfma32"] == 0


def test_grouped_strided_offsets_and_layouts(driver, tmp_path):
    counts = [9, 0, 17, 4]
    offsets = torch.stack([offsets_from_counts(counts), torch.zeros(4, dtype=torch.int32)], 1)[:, 0]
    assert offsets.stride(0) == 2
    info = check(driver, tmp_path, 33, 56, 150, 4, "e4m3fnuz", seed=17, offsets=offsets, a_pad=3, out_pad=5,
                 b_layout="expert_gap", scale_layout="binding")
    assert info["pack_a"], info  # odd K: a through the pack pass
    check(driver, tmp_path, 33, 56, 128, 4, "e4m3fnuz", seed=18, offsets=offsets, b_layout="n_major")


def test_more_experts_than_one_scan_and_random_routings(driver, tmp_path):
    gen = torch.Generator().manual_seed(40)
    for trial in range(3):
        e = int(torch.randint(1, 9, (1,), generator=gen))
        s = int(torch.randint(1, 90, (1,), generator=gen))
        n = int(torch.randint(1, 150, (1,), generator=gen))
        k = int(torch.randint(1, 300, (1,), generator=gen))
        kind = ("e4m3fnuz", "e4m3fn")[trial % 2]
        counts = torch.multinomial(torch.ones(e), s, replacement=True, generator=gen).bincount(minlength=e)
        check(driver, tmp_path, s, n, k, e, kind, seed=50 + trial, offsets=offsets_from_counts(counts))
        check(driver, tmp_path, s, n, k, e, kind, seed=60 + trial, ids=random_ids(s, e, gen, placeholders=0.1))
    counts = torch.zeros(260, dtype=torch.int64)
    counts[torch.randint(0, 260, (40,), generator=gen)] += 1
    check(driver, tmp_path, 45, 16, 32, 260, "e4m3fnuz", seed=70, offsets=offsets_from_counts(counts))


# ---- the tests can fail: one-line bugs in the expert code, each caught ----------------------------

def _case_batched(drv, tmp_path):
    gen = torch.Generator().manual_seed(80)
    check(drv, tmp_path, 70, 40, 96, 4, "e4m3fnuz", seed=81, ids=random_ids(70, 4, gen, torch.int32, placeholders=0.2))


def _case_grouped(drv, tmp_path):
    offsets = torch.tensor([12, 5, -3, 30, 1000, 40], dtype=torch.int32)
    check(drv, tmp_path, 50, 40, 80, 6, "e4m3fnuz", seed=82, offsets=offsets)


def _case_grouped_tail(drv, tmp_path):  # rows 41..49 past the last end
    check(drv, tmp_path, 50, 40, 80, 3, "e4m3fn", seed=83, offsets=torch.tensor([7, 30, 41], dtype=torch.int32))


# (file, original text, mutant text, cases): each original occurs once in its file.
EXPERT_MUTANTS = {
    "offsets not clamped to S": ("expert_gemm_rocm_kernels.h", "imin(imax(raw_end(e), 0), r.s) : 0;",
                                 "imax(raw_end(e), 0) : 0;", [_case_grouped]),
    "rows past the last end not zeroed": ("expert_gemm_rocm_kernels.h", "zero_rows(r, last_end + arch::block_id_x(),",
                                          "zero_rows(r, last_end + 1 + arch::block_id_x(),", [_case_grouped_tail]),
    "negative ids counted": ("expert_gemm_rocm_kernels.h", "const int rank = e >= 0 && e < r.experts ?",
                             "const int rank = e < r.experts ?", [_case_batched]),
    "rows of no expert not zeroed": ("expert_gemm_rocm_kernels.h",
                                     "for (int64_t c = lane; c < r.n; c += 64) arch::global_store(r.out",
                                     "for (int64_t c = lane; c < 0; c += 64) arch::global_store(r.out", [_case_batched]),
    "block prefix search": ("gemm_rocm_kernels.h", "if (arch::global_load(prefix + mid) <= block)",
                            "if (arch::global_load(prefix + mid) < block)", [_case_batched, _case_grouped]),
    "stores past the segment": ("gemm_rocm_kernels.h", "m_end = arch::global_load(x.segments + x.experts + lo);",
                                "m_end = gs.m;", [_case_grouped, _case_batched]),
    "b of expert 0": ("gemm_rocm_kernels.h", "b_base += static_cast<int64_t>(lo) * x.b_stride_e;", "(void)0;",
                      [_case_batched]),
}


@pytest.mark.parametrize("name", sorted(EXPERT_MUTANTS))
def test_expert_mutant_is_caught(tmp_path_factory, tmp_path, name):
    file, old, new, cases = EXPERT_MUTANTS[name]
    d = tmp_path_factory.mktemp("expert_mutant")
    kernel_dir = d / "gemm"
    shutil.copytree(os.path.join(GEMM_DIR, "gemm"), kernel_dir)
    src = (kernel_dir / file).read_text()
    assert src.count(old) == 1, f"{name}: the original text occurs {src.count(old)} times"
    (kernel_dir / file).write_text(src.replace(old, new))
    out = str(d / "driver")
    cmd = [CXX, *[f for f in CXXFLAGS if f != "-O2"], "-O1", f"-I{kernel_dir}", f"-I{EMU_DIR}",
           f"-I{os.path.join(GEMM_DIR, 'include')}", os.path.join(EMU_DIR, "gfx942_expert_driver.cpp"), "-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"mutant compile failed:\n{r.stderr[-3000:]}"
    for case in cases:
        with pytest.raises(AssertionError):
            case(out, tmp_path)
