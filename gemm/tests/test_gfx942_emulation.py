"""The gfx942 GEMM's own device code, executed on the CPU SIMT emulator.

The kernels of gemm/gemm/gemm_rocm_kernels.h and the pass plan of gemm_rocm_plan.h are compiled
by the host C++ compiler with -DFP8GEMM_SIMT_EMULATION (gemm/tests/emulation/gfx942_simt_emulation.h
supplies the architecture layer) into gemm/tests/emulation/gfx942_gemm_driver.cpp, and run as a
subprocess with a timeout. The MFMA lane layouts are the closed forms compiled into
gemm/tests/emulation/simt_mfma.h; AMD's matrix instruction calculator output, where it is available
beside the repository, is an extra cross-check. What this proves and what it cannot:
gemm/docs/emulation.md.

Needs g++ (or clang++) with C++20 and Linux; no torch extension build, no GPU.
"""
import re
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from host_cxx import host_cxx
# tests/reference.py (float64 formula of SPEC.md, challenge-style inputs); conftest puts it on the path.
from reference import make_inputs, reference_gemm

GEMM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMU_DIR = os.path.join(GEMM_DIR, "tests", "emulation")
INCLUDE_DIR = os.path.join(GEMM_DIR, "include")
KERNEL_DIR = os.path.join(GEMM_DIR, "gemm")
# Optional cross-check only: AMD's calculator output is not part of this kernel directory;
# FP8GEMM_AMD_MFMA_DIR names the folder that holds it (the repository's CI sets it where it has one).
# Without it those tests skip and everything else runs.
AMD_MFMA_DIR = os.environ.get("FP8GEMM_AMD_MFMA_DIR", "")
INSTRUCTIONS = {16: "v_mfma_f32_16x16x32_fp8_fp8", 32: "v_mfma_f32_32x32x16_fp8_fp8"}
RTOL, ATOL = 2e-2, 1e-3  # the challenge's tolerance (shared/gemm_shapes.json)
RUN_TIMEOUT_S = 300  # every subprocess wait is bounded ...
EMULATOR_TIMEOUT_S = 200  # ... and the emulator's own per-launch timeout fires first, with a report


CXX = host_cxx()
pytestmark = [
    pytest.mark.skipif(CXX is None, reason="no C++ compiler"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the SIMT emulator needs Linux"),
]

CXXFLAGS = ["-std=c++20", "-O2", "-g0", "-Wall", "-Wextra", "-Wno-psabi", "-Wno-unknown-pragmas",
            "-DFP8GEMM_SIMT_EMULATION", "-pthread"]


# Deliberately wrong (still one-to-one) lane tables for the negative tests (simt_mfma.h).
PERMUTATIONS = {"a-k": 1, "d-rows": 2, "a-lanes": 3, "b-lanes": 4}


def compile_program(source, out_path, extra_includes=(), extra_flags=(), permute=None):
    if permute:
        extra_flags = [*extra_flags, f"-DFP8GEMM_SIMT_MFMA_PERMUTE={PERMUTATIONS[permute]}"]
    # Kernel directories given in extra_includes come first, so a mutated copy shadows the original.
    cmd = [CXX, *CXXFLAGS, *extra_flags, *[f"-I{d}" for d in extra_includes], f"-I{EMU_DIR}", f"-I{INCLUDE_DIR}",
           os.path.join(EMU_DIR, source), "-o", out_path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"compile failed:\n{' '.join(cmd)}\n{r.stderr[-6000:]}"
    return out_path


def run(cmd, timeout=RUN_TIMEOUT_S, env_extra=None):
    env = dict(os.environ)
    env.setdefault("FP8GEMM_SIMT_THREADS", str(max(1, min(os.cpu_count() or 1, 4))))
    env.setdefault("FP8GEMM_SIMT_TIMEOUT_S", str(EMULATOR_TIMEOUT_S))
    if env_extra:
        env.update(env_extra)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gfx942_emulation")


@pytest.fixture(scope="session")
def selftest_bin(build_dir):
    return compile_program("simt_selftest.cpp", str(build_dir / "simt_selftest"), extra_flags=["-O1"])


@pytest.fixture(scope="session")
def gemm_bin(build_dir):
    return compile_program("gfx942_gemm_driver.cpp", str(build_dir / "gfx942_gemm_driver"),
                           extra_includes=[KERNEL_DIR])


def amd_calculator_json(bits):
    """AMD's matrix instruction calculator output for the instruction, or a skip with the reason."""
    path = os.path.join(AMD_MFMA_DIR, INSTRUCTIONS[bits] + ".json")
    if not AMD_MFMA_DIR or not os.path.isfile(path):
        pytest.skip(f"optional cross-check: AMD's calculator output {INSTRUCTIONS[bits]}.json not found "
                    f"(FP8GEMM_AMD_MFMA_DIR={AMD_MFMA_DIR!r}); the emulator uses the closed forms")
    with open(path) as f:
        return json.load(f)


# ------------------------------------------------------------------------------------------------
# The lane tables: closed forms <-> what the emulator compiled in (<-> AMD's calculator output).

def closed_form(bits, operand, lane, item):
    """The layouts in words, transcribed from the calculator's closed-form (-d) formulas
    independently of the C++ in simt_mfma.h."""
    m = bits  # rows of A = columns of B = the instruction's M = N
    if operand == "A":
        return {"row": lane % m, "k": 8 * (lane // m) + item}
    if operand == "B":
        return {"k": 8 * (lane // m) + item, "col": lane % m}
    if bits == 32:
        return {"row": 8 * (item // 4) + 4 * (lane // 32) + item % 4, "col": lane % 32}
    return {"row": 4 * (lane // 16) + item, "col": lane % 16}


def layout_doc(bits):
    """The instruction's layout from the closed forms, as (lane, item) -> matrix entry lists (the
    shape of AMD's calculator JSON, so the same code packs registers from either)."""
    m = bits
    k = 64 * 8 // m
    d_items = m * m // 64
    doc = {"M": m, "N": m, "K": k, "vgprs": {"D": d_items}, "A": [], "B": [], "D": []}
    for lane in range(64):
        for item in range(8):
            doc["A"].append({"lane": lane, "item": item, **closed_form(bits, "A", lane, item)})
            doc["B"].append({"lane": lane, "item": item, **closed_form(bits, "B", lane, item)})
        for item in range(d_items):
            doc["D"].append({"lane": lane, "item": item, **closed_form(bits, "D", lane, item)})
    return doc


def compiled_tables(selftest):
    r = run([selftest, "tables"])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_tables_equal(t, doc):
    d_items = t["d_items"]
    assert (t["M"], t["N"], t["K"], d_items) == (doc["M"], doc["N"], doc["K"], doc["vgprs"]["D"])
    for e in doc["A"]:
        i = e["lane"] * 8 + e["item"]
        assert (t["a_row"][i], t["a_k"][i]) == (e["row"], e["k"]), e
    for e in doc["B"]:
        i = e["lane"] * 8 + e["item"]
        assert (t["b_k"][i], t["b_col"][i]) == (e["k"], e["col"]), e
    for e in doc["D"]:
        i = e["lane"] * d_items + e["item"]
        assert (t["d_row"][i], t["d_col"][i]) == (e["row"], e["col"]), e
    assert len(doc["A"]) == len(doc["B"]) == 512 and len(doc["D"]) == 64 * d_items


def test_compiled_tables_match_closed_forms(selftest_bin):
    compiled = compiled_tables(selftest_bin)
    for bits, ins in INSTRUCTIONS.items():
        assert compiled[ins]["permuted"] == 0
        assert_tables_equal(compiled[ins], layout_doc(bits))


@pytest.mark.parametrize("bits", [16, 32])
def test_amd_calculator_json_matches_closed_forms(bits):
    """Optional cross-check: AMD's matrix instruction calculator output agrees with the closed forms
    entry by entry (and so with the tables the emulator compiles, by the test above)."""
    doc = amd_calculator_json(bits)
    assert doc["C_same_as_D"] is True and doc["instruction"] == INSTRUCTIONS[bits] and doc["wave_size"] == 64
    for operand in ("A", "B", "D"):
        entries = doc[operand]
        assert len({(e["lane"], e["item"]) for e in entries}) == len(entries)
        for e in entries:
            want = closed_form(bits, operand, e["lane"], e["item"])
            got = {key: e[key] for key in want}
            assert got == want, (operand, e)
        if operand in ("A", "B"):  # item i is byte i of the lane's 64-bit operand
            assert all(e["item"] == 4 * e["vgpr"] + e["bits"][1] // 8 for e in entries)
    assert (doc["M"], doc["N"], doc["K"]) == (bits, bits, 512 // bits)


@pytest.mark.parametrize("bits", [16, 32])
def test_compiled_tables_match_amd_calculator_json(selftest_bin, bits):
    """Optional cross-check: the emulator's compiled tables against the calculator output directly."""
    doc = amd_calculator_json(bits)
    assert_tables_equal(compiled_tables(selftest_bin)[INSTRUCTIONS[bits]], doc)


def test_emulator_fp8_decoding_matches_torch(selftest_bin, tmp_path):
    out = tmp_path / "fp8.bin"
    r = run([selftest_bin, "fp8", str(out)])
    assert r.returncode == 0, r.stderr
    emu = np.fromfile(out, dtype=np.float64)
    ref = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fnuz).to(torch.float64).numpy()
    assert np.isnan(emu[0x80]) and np.isnan(ref[0x80])
    mask = np.arange(256) != 0x80
    np.testing.assert_array_equal(emu[mask], ref[mask])
    assert emu[0x7F] == 240.0 and emu[0x01] == 2.0 ** -10


# ------------------------------------------------------------------------------------------------
# MFMA self-test: registers packed in Python from the layout, one wave on the emulator.

def pack_registers(doc, a_mat, b_mat, c_mat):
    """Per-lane operand registers from matrices, using only the (lane, item) lists of `doc`."""
    a_bytes = np.zeros((64, 8), np.uint8)
    b_bytes = np.zeros((64, 8), np.uint8)
    for e in doc["A"]:
        a_bytes[e["lane"], e["item"]] = a_mat[e["row"], e["k"]]
    for e in doc["B"]:
        b_bytes[e["lane"], e["item"]] = b_mat[e["k"], e["col"]]
    items = doc["vgprs"]["D"]
    c_regs = np.zeros((64, items), np.float32)
    for e in doc["D"]:
        c_regs[e["lane"], e["item"]] = c_mat[e["row"], e["col"]]
    return a_bytes.view(np.uint64).ravel(), b_bytes.view(np.uint64).ravel(), c_regs


def unpack_result(doc, d_regs):
    d = np.full((doc["M"], doc["N"]), np.nan, np.float32)
    for e in doc["D"]:
        d[e["row"], e["col"]] = d_regs[e["lane"], e["item"]]
    return d


def fnuz_to_f64(byte_array):
    t = torch.from_numpy(np.ascontiguousarray(byte_array)).view(torch.float8_e4m3fnuz)
    return t.to(torch.float64).numpy()


def random_fp8_bytes(rng, shape, dtype=torch.float8_e4m3fnuz):
    x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype)
    return x.view(torch.uint8).numpy().copy()


def run_mfma_selftest(binary, bits, tmp_path, seed, repeat=1, nan_at=None):
    doc = layout_doc(bits)
    rng = np.random.default_rng(seed)
    a = random_fp8_bytes(rng, (doc["M"], doc["K"]))
    b = random_fp8_bytes(rng, (doc["K"], doc["N"]))
    if nan_at is not None:
        a[nan_at] = 0x80
    c = rng.standard_normal((doc["M"], doc["N"])).astype(np.float32)
    a_regs, b_regs, c_regs = pack_registers(doc, a, b, c)
    a_regs.tofile(tmp_path / "a.bin")
    b_regs.tofile(tmp_path / "b.bin")
    c_regs.tofile(tmp_path / "c.bin")
    r = run([binary, "mfma", str(tmp_path), str(doc["vgprs"]["D"]), str(repeat)])
    assert r.returncode == 0, r.stderr
    d = unpack_result(doc, np.fromfile(tmp_path / "d.bin", np.float32).reshape(64, -1))
    prod = fnuz_to_f64(a) @ fnuz_to_f64(b)  # exact: fp8 products and their sums fit in float64
    ref = c.astype(np.float32)
    for _ in range(repeat):
        ref = (ref.astype(np.float64) + prod).astype(np.float32)
    return d, ref


@pytest.mark.parametrize("bits", [16, 32])
@pytest.mark.parametrize("repeat", [1, 3])
def test_mfma_selftest(selftest_bin, tmp_path, bits, repeat):
    d, ref = run_mfma_selftest(selftest_bin, bits, tmp_path, seed=bits * 10 + repeat, repeat=repeat)
    # One rounding to fp32 per instruction, like the reference: bit-exact.
    np.testing.assert_array_equal(d, ref)


@pytest.mark.parametrize("bits", [16, 32])
def test_mfma_selftest_nan_operand(selftest_bin, tmp_path, bits):
    d, ref = run_mfma_selftest(selftest_bin, bits, tmp_path, seed=7, nan_at=(3, 5))
    assert np.isnan(d[3]).all() and not np.isnan(np.delete(d, 3, axis=0)).any()
    np.testing.assert_array_equal(np.delete(d, 3, axis=0), np.delete(ref, 3, axis=0))


@pytest.fixture(scope="session", params=["a-k", "b-lanes", "d-rows"])
def permuted_selftest_bin(request, build_dir):
    return request.param, compile_program("simt_selftest.cpp", str(build_dir / f"simt_selftest_{request.param}"),
                                          extra_flags=["-O1"], permute=request.param)


@pytest.mark.parametrize("bits", [16, 32])
def test_permuted_lane_table_fails_mfma_selftest(permuted_selftest_bin, tmp_path, bits):
    """The self-test is not vacuous: a wrong (still one-to-one) lane table gives wrong D."""
    name, binary = permuted_selftest_bin
    assert compiled_tables(binary)[INSTRUCTIONS[bits]]["permuted"] == PERMUTATIONS[name]
    d, ref = run_mfma_selftest(binary, bits, tmp_path, seed=11)
    assert not np.array_equal(d, ref)


# ------------------------------------------------------------------------------------------------
# Execution-layer self-tests with small kernels of our own (LDS, barriers, MFMA, shfl).

@pytest.mark.parametrize("use32", [0, 1])
@pytest.mark.parametrize("m,n,k", [(64, 64, 32), (70, 100, 96), (130, 65, 40), (1, 200, 7)])
def test_tile_gemm_kernel(selftest_bin, tmp_path, use32, m, n, k):
    rng = np.random.default_rng(m * 1000 + n + k)
    a = random_fp8_bytes(rng, (m, k))
    b = random_fp8_bytes(rng, (n, k))
    a.tofile(tmp_path / "a.bin")
    b.tofile(tmp_path / "b.bin")
    r = run([selftest_bin, "tile-gemm", str(tmp_path), str(m), str(n), str(k), str(use32)])
    assert r.returncode == 0, r.stderr
    c = np.fromfile(tmp_path / "c.bin", np.float32).reshape(m, n)
    ref = fnuz_to_f64(a) @ fnuz_to_f64(b).T
    np.testing.assert_allclose(c, ref, rtol=1e-6, atol=1e-5)
    counts = dict(kv.split("=") for kv in r.stdout.split())
    assert int(counts["mfma32" if use32 else "mfma16"]) > 0


def test_lds_barrier_reduction_and_shfl(selftest_bin, tmp_path):
    blocks, per_block, threads = 5, 3000, 256
    rng = np.random.default_rng(3)
    x = rng.integers(-8, 9, size=(blocks, per_block)).astype(np.float32)  # integer sums: exact
    x.tofile(tmp_path / "x.bin")
    r = run([selftest_bin, "reduce", str(tmp_path), str(blocks), str(per_block), str(threads)])
    assert r.returncode == 0, r.stderr
    out = np.fromfile(tmp_path / "out.bin", np.float32).reshape(blocks, 2)
    np.testing.assert_array_equal(out[:, 0], x.sum(axis=1))
    # wave 0's lanes hold the partial sums of threads 0..63 (strided over the block)
    wave0 = np.array([x[:, t::threads].sum(axis=1) for t in range(64)]).sum(axis=0)
    np.testing.assert_array_equal(out[:, 1], wave0)


# Every failure ends the run with a report naming kernel, workgroup, wave and lane (or, for a
# deadlock, which threads wait where), never a hang. The fault kernels misbehave in workgroup 1.
FAULTS = {
    "oob-global": ("outside every registered buffer", "wave 1, lane 5"),
    "oob-lds": ("out of bounds (LDS size 512 bytes)", "wave 1, lane 7"),
    "barrier-deadlock": ("deadlock", "threads 96..127 (waves 1..1): returned"),
    "mfma-diverge-site": ("wave diverged around a wave-wide operation", "wave 1, lane 32"),
    "mfma-diverge-skip": ("wave 1 diverged around mfma_16x16x32_fp8", "lanes 63 (waiting at barrier"),
    "lds-race": ("LDS race", "lane 1"),
    "global-race": ("global write race", "also wrote in this launch"),
    "readonly-store": ("read-only buffer 'in'", "wave 0, lane 3"),
    "uninit-lds": ("no thread of this workgroup has written", "lane 63"),
    "misaligned": ("misaligned", "lane 0"),
    "spin-timeout": ("timeout", "workgroup ("),
    "raw-segv": ("SIGSEGV", "wave 1, lane 1 (thread 65)"),
    "stack-overflow": ("fiber stack overflow", "wave 1, lane 2 (thread 66)"),
    "divergent-barrier": ("divergent barriers", "wave 1, lane 0"),
    "spin-lds-timeout": ("timeout", "wave 1, lane 6 (thread 70)"),
    # The atomic hand-off between workgroups (workgroups 0, 1, 2 in that order: 2 is the last and
    # reads the others' parts) with one step of the protocol left out.
    "handoff-no-release": ("with no release fence / atomic / acquire fence hand-off", "workgroup (2,0,0)"),
    "handoff-no-acquire": ("with no release fence / atomic / acquire fence hand-off", "workgroup (2,0,0)"),
    "handoff-no-barrier": ("with no release fence / atomic / acquire fence hand-off", "workgroup (2,0,0)"),
    "handoff-plain-ticket": ("plain and atomic accesses to the same bytes", "workgroup (0,0,0), wave 0, lane 1"),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_is_reported_with_location(selftest_bin, name):
    r = run([selftest_bin, "fault", name], timeout=120, env_extra={"FP8GEMM_SIMT_TIMEOUT_S": "3"})
    what, where = FAULTS[name]
    assert r.returncode != 0, f"{name}: no failure reported\n{r.stdout}"
    assert f"kernel 'fault_{name}'" in r.stderr, r.stderr
    assert what in r.stderr and where in r.stderr, r.stderr
    if name not in ("global-race", "misaligned", "lds-race", "uninit-lds") and not name.startswith("handoff-"):
        assert "workgroup (1,0,0)" in r.stderr, r.stderr


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1], None])
def test_workgroup_handoff_through_an_atomic_ticket(selftest_bin, order):
    """Four workgroups write, release and take a ticket; the last acquires and sums all four parts.
    Run one after another in each given order (the last in the order sums), or concurrently."""
    env = {"FP8GEMM_SIMT_THREADS": "1" if order else "4"}
    r = run([selftest_bin, "handoff", "4", *map(str, order or [])], env_extra=env)
    assert r.returncode == 0, r.stderr
    sums, tickets = r.stdout.splitlines()
    assert [float(x) for x in sums.split()] == [float(6000 + 4 * t) for t in range(256)]
    assert sorted(map(int, tickets.split())) == [0, 1, 2, 3]
    if order:
        assert list(map(int, tickets.split())) == order


# ------------------------------------------------------------------------------------------------
# The gfx942 GEMM itself.

def write_tensor(d, name, t, offset=0):
    """The storage bytes from a strided view's first element to the end of its storage (padding
    past the view included) + its strides (the driver rebuilds the same view)."""
    storage_elems = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    assert storage_elems >= 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    base = torch.as_strided(t, (storage_elems,), (1,), t.storage_offset())
    raw = base.contiguous().view(torch.uint8).numpy() if t.dtype.itemsize == 1 else base.contiguous().numpy()
    raw.tofile(os.path.join(d, f"{name}.bin"))
    st0, st1 = t.stride()
    return {f"{name}_storage": storage_elems, f"{name}_offset": offset, f"{name}_stride0": st0, f"{name}_stride1": st1}


NAN_BYTE = {torch.float8_e4m3fnuz: 0x80, torch.float8_e4m3fn: 0x7F}


def pad_k(x, k_pad):
    """The same logical (rows, K) operand in a buffer that also holds k_pad NaN bytes past K in every
    row (K-major) or k_pad NaN k rows after the last one (MN-major): a kernel that reads past K
    gets NaN into its sums."""
    rows, k = x.shape
    nan = NAN_BYTE[x.dtype]
    if x.stride(1) == 1:  # K-major: wider rows
        full = torch.full((rows, k + k_pad), nan, dtype=torch.uint8)
        full[:, :k] = x.view(torch.uint8)
        return full.view(x.dtype)[:, :k]
    full = torch.full((k + k_pad, rows), nan, dtype=torch.uint8)  # MN-major: more k rows
    full[:k] = x.T.view(torch.uint8)
    return full.view(x.dtype).T[:, :k]


def write_problem(binary_dir, m, n, k, dtype=torch.float8_e4m3fnuz, layout="mn_major", seed=0, out_layout="row",
                  offsets=(0, 0), out_storage_delta=0, mutate=None, config=None, k_pad=0, extra=None):
    """Writes DIR/problem.txt and the inputs; returns (inputs, output strides)."""
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, layout, seed)
    if mutate is not None:
        mutate(a, b, a_scale, b_scale)
    if k_pad:
        a, b = pad_k(a, k_pad), pad_k(b, k_pad)
    d = str(binary_dir)
    kv = {"m": m, "n": n, "k": k, "format": 0 if dtype == torch.float8_e4m3fnuz else 1}
    kv.update(write_tensor(d, "a", a, offsets[0]))
    kv.update(write_tensor(d, "b", b, offsets[1]))
    kv.update(write_tensor(d, "a_scale", a_scale))
    kv.update(write_tensor(d, "b_scale", b_scale))
    out_strides = (n, 1) if out_layout == "row" else (1, m)
    kv.update({"out_storage": m * n + out_storage_delta, "out_offset": 0, "out_stride0": out_strides[0],
               "out_stride1": out_strides[1]})
    if config is not None:  # replaces the dispatch's choice: (instantiation, split-K) or (instantiation, "W", W, Wsk)
        kv["kernel"] = KERNEL_NAMES.index(config[0])
        if config[1] == "W":
            kv.update({"workgroups": config[2], "sk_workgroups": config[3]})
        else:
            kv["split_k"] = config[1]
    kv.update(extra or {})  # e.g. the GEMM pass's workgroup order (wg_rotate / wg_shuffle)
    with open(os.path.join(d, "problem.txt"), "w") as f:
        f.writelines(f"{key} {value}\n" for key, value in kv.items())
    return (a, b, a_scale, b_scale), out_strides


def run_gemm(binary, tmp_path, m, n, k, dtype=torch.float8_e4m3fnuz, layout="mn_major", seed=0, out_layout="row",
             offsets=(0, 0), out_storage_delta=0, expect_rc=0, env_extra=None, mutate=None, config=None, k_pad=0,
             extra=None):
    """Runs one problem through the emulated plan. Returns (out, float64 reference, plan/counter
    JSON), or the CompletedProcess when expect_rc is None (or non-zero, after checking it)."""
    (a, b, a_scale, b_scale), out_strides = write_problem(
        tmp_path, m, n, k, dtype, layout, seed, out_layout, offsets, out_storage_delta, mutate, config, k_pad, extra)
    d = str(tmp_path)
    r = run([binary, d], env_extra=env_extra)
    if expect_rc is None:
        return r
    if expect_rc != 0:
        assert r.returncode == expect_rc, f"rc {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
        return r
    assert r.returncode == 0, f"emulated gemm failed (rc {r.returncode}):\n{r.stderr[-4000:]}"
    info = json.loads(r.stdout.strip().splitlines()[-1])
    raw = torch.from_numpy(np.fromfile(os.path.join(d, "out.bin"), np.uint16).view(np.int16)).view(torch.bfloat16)
    out = torch.as_strided(raw, (m, n), out_strides)
    return out, reference_gemm(a, b, a_scale, b_scale), info


def check_gemm(out, ref, info, m, n, k):
    got = out.to(torch.float64)
    assert not torch.isnan(got).any(), f"{int(torch.isnan(got).sum())} NaN outputs (poison left, or bytes past K read)"
    ref_bf16 = ref.to(torch.bfloat16).to(torch.float64)
    # The challenge's check: bf16 output against the bf16-rounded float64 reference.
    torch.testing.assert_close(got, ref_bf16, rtol=RTOL, atol=ATOL)
    # Tighter: fp32 accumulation can move a result by at most about one bf16 rounding step.
    err = (got - ref).abs()
    assert bool((err <= ref.abs() * 2.0 ** -7 + 1e-3).all()), f"max err {float(err.max())}"
    # Every output of every padded tile was computed by MFMAs over every 128-wide K block.
    tiles = -(-m // info["block_m"]) * info["block_m"] * (-(-n // info["block_n"])) * info["block_n"]
    macs = info["mfma16"] * 16 * 16 * 32 + info["mfma32"] * 32 * 32 * 16
    assert macs == tiles * (-(-k // 128)) * 128, info
    assert (info["mfma16"] > 0) == (info["mfma"] == 16) and (info["mfma32"] > 0) == (info["mfma"] == 32)


# Every compiled instantiation, in GemmKernelId order (test_kernel_names_match_the_driver).
KERNEL_NAMES = ["t64x64_w2x2_m16", "t128x64_w2x1x2_m32", "t128x128_w2x2_m32", "t256x128_w4x2_m32"]
DTYPES = {"fnuz": torch.float8_e4m3fnuz, "fn": torch.float8_e4m3fn}


def case(m, n, k, dtype="fnuz", layout="mn_major", config=None, k_pad=0, out_layout="row", offsets=(0, 0), seed=None):
    return dict(m=m, n=n, k=k, dtype=dtype, layout=layout, config=config, k_pad=k_pad, out_layout=out_layout,
                offsets=offsets, seed=m * 7 + n * 3 + k if seed is None else seed)


def case_id(c):
    cfg = ""
    if c["config"]:
        cfg = f"-{c['config'][0]}-" + (f"w{c['config'][2]}-{c['config'][3]}" if c["config"][1] == "W" else f"s{c['config'][1]}")
    pad = f"-pad{c['k_pad']}" if c["k_pad"] else ""
    return f"{c['m']}x{c['n']}x{c['k']}-{c['dtype']}-{c['layout']}{cfg}{pad}-{c['out_layout']}"


def run_case(binary, tmp_path, c, **kw):
    return run_gemm(binary, tmp_path, c["m"], c["n"], c["k"], DTYPES[c["dtype"]], c["layout"], seed=c["seed"],
                    out_layout=c["out_layout"], offsets=c["offsets"], config=c["config"], k_pad=c["k_pad"], **kw)


# ---- the dispatch's own choices -------------------------------------------------------------------
GENERIC_CASES = [
    # Which kernel each shape gets is the dispatch's business; the coverage test checks that these
    # cases and the configuration cases below together execute every loop variant.
    case(64, 64, 128),  # the challenge's first test shape
    case(96, 200, 320, layout="k_major"),  # N tail 200 = 128 + 72, K tail 64
    case(200, 72, 200, dtype="fn"),  # K % 16 != 0, M/N not multiples of 16, e4m3fn
    case(128, 192, 1100),  # split-K, K tail
    case(130, 96, 2048, dtype="fn", layout="k_major"),  # split-K, e4m3fn, M tail
    case(96, 160, 384, dtype="fn"),  # e4m3fn challenge layout: 16-byte transposing pack
    case(33, 257, 256, layout="k_major"),  # M <= 64, N = 2*128 + 1
    case(1, 1, 1, layout="k_major"),
    case(4096, 2320, 128),  # large M: the 8-wave kernel, N tail 16
]


@pytest.mark.parametrize("c", GENERIC_CASES, ids=case_id)
def test_gemm_generic_path(gemm_bin, tmp_path, c):
    out, ref, info = run_case(gemm_bin, tmp_path, c)
    assert info["tuned"] is False
    check_handoff(info)
    check_gemm(out, ref, info, c["m"], c["n"], c["k"])


def check_handoff(info):
    """Shared stream-K tiles: the tickets were zeroed by the pass right before the GEMM pass, every
    shared tile's ticket was taken once by each of its workgroups, and the last of them wrapped it
    back to zero (no ticket word is left non-zero after the call)."""
    gemm = info["passes"][-1]
    if gemm["shared_tiles"]:
        assert info["passes"][-2]["kernel"] == "zero" and info["passes"][-2]["bytes"] == 4 * gemm["sk_tiles"], info
        assert info["tickets"] and all(len(t) >= 2 and len(set(t)) == len(t) for t in info["tickets"]), info
        assert info["atomics"] == sum(len(t) for t in info["tickets"]), info
        assert info["tickets_left"] == 0, info
    else:
        assert "zero" not in [p["kernel"] for p in info["passes"]] and info["atomics"] == 0, info


def test_gemm_column_major_output_and_unaligned_inputs(gemm_bin, tmp_path):
    # a/b 1 byte past an aligned address: the plan cannot read in place nor use vector packs.
    out, ref, info = run_gemm(gemm_bin, tmp_path, 80, 136, 384, torch.float8_e4m3fnuz, "k_major", seed=5,
                              out_layout="col", offsets=(1, 3))
    assert info["pack_a"] and info["pack_b"]
    assert {p["mode"] for p in info["passes"] if p["kernel"] == "pack_body"} == {"gather"}
    check_gemm(out, ref, info, 80, 136, 384)


def _random_cases(count, seed):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        m, n = int(rng.integers(1, 300)), int(rng.integers(1, 300))
        k = int(rng.integers(1, 1300))
        cases.append(case(m, n, k, ["fnuz", "fn"][rng.integers(2)], ["mn_major", "k_major"][rng.integers(2)],
                          seed=int(rng.integers(1 << 30))))
    return cases


# Random odd shapes (their plans count in the coverage check below), NaN propagation and the other
# behaviours every backend shares run on this emulator through test_gemm.py's "gfx942-emulation"
# backend (backends.run_emulated).
RANDOM_CASES = _random_cases(6, seed=2026)


TUNED_CASES = [
    # The cheapest challenge shapes of the tuned table: one workgroup per tile; every tile shared
    # (4 workgroups each); stream-K tiles (80 over 240 workgroups) then one whole tile each.
    case(1024, 7168, 256, seed=1),
    case(1024, 512, 7168, layout="k_major", seed=1),
    case(1024, 3072, 1536, seed=1),
]


@pytest.mark.parametrize("c", TUNED_CASES, ids=case_id)
def test_gemm_tuned_path(gemm_bin, tmp_path, c):
    out, ref, info = run_case(gemm_bin, tmp_path, c)
    assert info["tuned"] is True
    check_handoff(info)
    check_gemm(out, ref, info, c["m"], c["n"], c["k"])


# ---- every instantiation in every loop variant and epilogue --------------------------------------
# Two or more K blocks per workgroup (the loop's second trip is where pipelining and barriers
# matter), K tails of 16 and 112 in operand buffers padded with NaN bytes past K (a kernel that
# reads past the tail gets NaN into its sums), M/N tails, more than one tile in M and N.
TAIL16, TAIL112 = 2 * 128 + 16, 2 * 128 + 112
CONFIG_SHAPES = {"t64x64_w2x2_m16": (80, 144), "t128x64_w2x1x2_m32": (160, 96), "t128x128_w2x2_m32": (144, 160),
                 "t256x128_w4x2_m32": (272, 144)}
# Stream-K with whole tiles after it: 5 workgroups; the tiles past the last whole wave of 5 (2, 3,
# 3 and 4 of them) are dealt in runs of 2..4 K blocks that cross tile boundaries.
STREAM_SHAPES = {"t64x64_w2x2_m16": (208, 144), "t128x64_w2x1x2_m32": (416, 96), "t128x128_w2x2_m32": (400, 160),
                 "t256x128_w4x2_m32": (528, 272)}


def _config_cases():
    cases = []
    for i, (name, (m, n)) in enumerate(CONFIG_SHAPES.items()):
        k_tail, mn_tail = (TAIL16, TAIL112) if i % 2 == 0 else (TAIL112, TAIL16)
        cases += [
            case(m, n, k_tail, layout="k_major", config=(name, 1), k_pad=32),
            case(m, n, mn_tail, layout="mn_major", config=(name, 1), k_pad=32),
            # split-K: 5 K blocks in 2 runs (2 and 3 trips), finished in the kernel
            case(m, n, 4 * 128 + 16, layout=("mn_major", "k_major")[i % 2], config=(name, 2), k_pad=32),
            # stream-K runs across tiles, then whole tiles
            case(*STREAM_SHAPES[name], 4 * 128 + 16, layout=("k_major", "mn_major")[i % 2], config=(name, "W", 5, 0),
                 k_pad=32),
            # per-element bf16 stores (column-major output)
            case(m, n, TAIL16, layout=("k_major", "mn_major")[i % 2], config=(name, 1), out_layout="col"),
        ]
    return cases


CONFIG_CASES = _config_cases()


@pytest.mark.parametrize("c", CONFIG_CASES, ids=case_id)
def test_gemm_every_configuration(gemm_bin, tmp_path, c):
    out, ref, info = run_case(gemm_bin, tmp_path, c)
    assert info["kernel"] == c["config"][0] and not info["pack_a"] and not info["pack_b"], info
    check_handoff(info)
    check_gemm(out, ref, info, c["m"], c["n"], c["k"])


ALL_GEMM_CASES = GENERIC_CASES + RANDOM_CASES + TUNED_CASES + CONFIG_CASES


def plan_of(binary, d, c):
    write_problem(d, c["m"], c["n"], c["k"], DTYPES[c["dtype"]], c["layout"], c["seed"], c["out_layout"], c["offsets"],
                  config=c["config"], k_pad=c["k_pad"])
    r = run([binary, "--plan", str(d)])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_kernel_names_match_the_driver(gemm_bin):
    assert json.loads(run([gemm_bin, "--kernels"]).stdout) == KERNEL_NAMES


def test_every_loop_variant_and_epilogue_is_executed(gemm_bin, tmp_path):
    """Through the plans the driver builds for this file's GEMM cases: every instantiation runs its
    K-major and its MN-major main loop for at least two K blocks, and each of them with K tails of 16
    and 112 in NaN-padded buffers; every instantiation writes through each epilogue (bf16 vector,
    bf16 per element), hands shared tiles off (split-K, and stream-K runs that cross tiles followed
    by whole tiles); every pack mode and the zero pass run."""
    seen = set()
    for i, c in enumerate(ALL_GEMM_CASES):
        d = tmp_path / str(i)
        d.mkdir()
        for p in plan_of(gemm_bin, d, c)["passes"]:
            if p["kernel"] in KERNEL_NAMES:
                if p["longest_tile_run"] >= 2:
                    seen.add(("loop", p["kernel"], p["loop"]))
                    if c["k_pad"] and c["k"] % 128 in (16, 112):
                        seen.add(("tail", p["loop"], c["k"] % 128))
                        seen.add(("tail", p["kernel"], c["k"] % 128))
                seen.add(("epilogue", p["kernel"], p["epilogue"]))
                if p["shared_tiles"]:
                    seen.add(("hand-off", p["kernel"]))
                    if p["runs_span_tiles"] and p["sk_tiles"] < p["tiles"]:
                        seen.add(("stream-K runs across tiles, then whole tiles", p["kernel"]))
            elif p["kernel"] == "pack_body":
                seen.add(("pack", p["mode"]))
            else:
                seen.add(("pass", p["kernel"]))
    want = {("loop", k, loop) for k in KERNEL_NAMES for loop in ("k_major", "mn_major")}
    want |= {("tail", x, t) for x in KERNEL_NAMES + ["k_major", "mn_major"] for t in (16, 112)}
    want |= {("epilogue", k, e) for k in KERNEL_NAMES for e in ("vector", "strided")}
    want |= {(what, k) for k in KERNEL_NAMES for what in ("hand-off", "stream-K runs across tiles, then whole tiles")}
    want |= {("pack", m) for m in ("mn_vector", "k_vector", "gather")} | {("pass", "zero")}
    missing = want - seen
    assert not missing, f"never executed: {sorted(missing)}"


def test_gemm_result_independent_of_worker_threads(gemm_bin, tmp_path):
    """Workgroups run concurrently on a thread pool; the bits must not depend on how many."""
    outs = []
    for threads in ("1", "3"):
        case = tmp_path / threads
        case.mkdir()
        out, _, _ = run_gemm(gemm_bin, case, 130, 96, 2048, seed=8, env_extra={"FP8GEMM_SIMT_THREADS": threads})
        outs.append(out.view(torch.int16).clone())
    assert torch.equal(outs[0], outs[1])


ORDER_CASES = [
    # Every tile shared: 4 tiles of 5 K blocks in 7 runs of 2-3 (one tile has 3 workgroups), K-major.
    case(160, 96, 4 * 128 + 16, layout="k_major", config=("t128x64_w2x1x2_m32", "W", 7, 0), k_pad=32),
    # 4 stream-K tiles over 5 workgroups, then 5 whole tiles; MN-major, 8 waves with the K-share sum.
    case(528, 272, 4 * 128 + 16, config=("t256x128_w4x2_m32", "W", 5, 0), k_pad=32),
]


@pytest.mark.parametrize("c", ORDER_CASES, ids=case_id)
def test_stream_k_call_again_on_the_same_workspace_needs_no_zeroing(gemm_bin, tmp_path, c):
    """The tickets are zero after a call, so a second call on the same workspace without the zero
    pass (in another workgroup order, into a poisoned output) gives the same bits."""
    out, ref, info = run_case(gemm_bin, tmp_path, c, extra={"repeat": 1, "wg_shuffle": 3})
    assert info["passes"][-1]["shared_tiles"] and info["tickets_left"] == 0, info
    assert info["repeat_identical"] == 1, info
    # The counters cover both calls, each the same MFMAs.
    assert info["mfma16"] % 2 == 0 and info["mfma32"] % 2 == 0, info
    check_gemm(out, ref, dict(info, mfma16=info["mfma16"] // 2, mfma32=info["mfma32"] // 2), c["m"], c["n"], c["k"])


@pytest.mark.parametrize("c", ORDER_CASES, ids=case_id)
def test_stream_k_hand_off_is_right_in_every_arrival_order(gemm_bin, tmp_path, c):
    """With one worker thread the emulator runs workgroups one after another in the order it is
    given, and that order decides which workgroup of a shared tile takes the last ticket and sums the
    others' slots. Every rotation of the start order, two shuffles and a run on four threads: every
    result is right and all are bit-identical (the sum's order does not depend on who arrives last),
    and over these runs every workgroup of every shared tile took the last ticket at least once (the
    tickets as the emulator saw them taken)."""
    workgroups = c["config"][2]
    runs = [({"wg_rotate": r}, "1") for r in range(workgroups)] + [({"wg_shuffle": s}, "1") for s in (1, 2)]
    runs.append(({}, "4"))
    first, contributors, last = None, None, None
    for i, (order, threads) in enumerate(runs):
        d = tmp_path / str(i)
        d.mkdir()
        out, ref, info = run_case(gemm_bin, d, c, extra=order, env_extra={"FP8GEMM_SIMT_THREADS": threads})
        check_handoff(info)
        check_gemm(out, ref, info, c["m"], c["n"], c["k"])
        bits = out.view(torch.int16).clone()
        if first is None:
            first, contributors, last = bits, [sorted(t) for t in info["tickets"]], [set() for _ in info["tickets"]]
        assert torch.equal(bits, first), f"result bits depend on the arrival order ({order})"
        assert [sorted(t) for t in info["tickets"]] == contributors
        for seen, t in zip(last, info["tickets"]):
            seen.add(t[-1])
    assert contributors and all(seen == set(cs) for seen, cs in zip(last, contributors)), (contributors, last)
    assert max(len(cs) for cs in contributors) >= (3 if c["m"] == 160 else 2)


def test_gemm_out_of_bounds_store_in_real_kernel_is_reported(gemm_bin, tmp_path):
    """Bounds checking reaches the real kernel: an output buffer one element short is caught at the
    store that overruns it (last row, last column), with its location."""
    r = run_gemm(gemm_bin, tmp_path, 64, 64, 128, out_storage_delta=-1, expect_rc=2)
    # The epilogue's store width is the kernel's choice (2-byte bf16 or a packed vector); any width counts.
    assert "kernel 't64x64_w2x2_m16'" in r.stderr and re.search(r"global store of \d+ bytes", r.stderr), r.stderr
    assert "outside every registered buffer" in r.stderr and "buffer 'out'" in r.stderr, r.stderr
    assert "workgroup (0,0,0), wave 3, lane 63" in r.stderr, r.stderr  # row 63, col 63: wave (1,1), lane 63


def test_gemm_with_permuted_lane_table_fails(build_dir, tmp_path):
    """The GEMM check depends on the MFMA layout: the same kernel against a wrong A table fails."""
    binary = compile_program("gfx942_gemm_driver.cpp", str(build_dir / "gfx942_gemm_driver_permuted"),
                             extra_includes=[KERNEL_DIR], extra_flags=["-O1"], permute="a-k")
    out, ref, info = run_gemm(binary, tmp_path, 64, 64, 128, seed=3)
    with pytest.raises(AssertionError):
        check_gemm(out, ref, info, 64, 64, 128)


UBSAN_CASES = [(96, 200, 320, "k_major"), (130, 96, 2048, "mn_major")]


@pytest.fixture(scope="session")
def gemm_ubsan_bin(build_dir):
    return compile_program("gfx942_gemm_driver.cpp", str(build_dir / "gfx942_gemm_driver_ubsan"),
                           extra_includes=[KERNEL_DIR],
                           extra_flags=["-O1", "-fsanitize=undefined", "-fno-sanitize-recover=all"])


@pytest.mark.parametrize("m,n,k,layout", UBSAN_CASES)
def test_gemm_kernel_code_has_no_undefined_behaviour(gemm_ubsan_bin, tmp_path, m, n, k, layout):
    """Index arithmetic of the kernel bodies under UBSan (signed overflow, shifts, bad casts)."""
    out, ref, info = run_gemm(gemm_ubsan_bin, tmp_path, m, n, k, torch.float8_e4m3fn, layout, seed=k)
    check_gemm(out, ref, info, m, n, k)


# ---- mutation test: realistic one-line bugs in a copy of the kernel must fail the suite ------------
# Each mutant replaces one line of gemm_rocm_kernels.h (the original must occur exactly once) in a
# copy of gemm/gemm/; the emulated driver is rebuilt against the copy and a few targeted cases of
# this suite are run. A mutant is caught when a case fails its check or the emulator reports a fault.
def _cfg_key(c):
    kind = "/stream" if c["config"][1] == "W" else "/split" if c["config"][1] > 1 else ""
    return c["config"][0] + "/" + c["layout"] + kind + ("/col" if c["out_layout"] == "col" else "")


_CFG = {_cfg_key(c): c for c in CONFIG_CASES}
_CFG["pack/gather"] = case(72, 72, 256, config=("t64x64_w2x2_m16", 1))  # MN-major, M % 16 != 0: packed
MUTANTS = {
    # K tails: one chunk / one k row past K is read (the padding holds NaN).
    "k-major tail bound": ("const bool k_ok = kofs < k_left;", "const bool k_ok = kofs <= k_left;",
                           ["t128x128_w2x2_m32/k_major", "t128x64_w2x1x2_m32/k_major"]),
    "mn-major tail bound": ("range_last = clamp_bytes(static_cast<int64_t>(k_valid - k_last) * ld);",
                            "range_last = clamp_bytes(static_cast<int64_t>(k_valid - k_last + 1) * ld);",
                            ["t128x128_w2x2_m32/mn_major", "t64x64_w2x2_m16/mn_major"]),
    # The per-step buffer base: not advanced (every step reads the first K block again); the range of
    # the last K block used for every block.
    "buffer base step": ("cur = arch::buffer_advance(cur, step);", "cur = arch::buffer_advance(cur, 0);",
                         ["t128x64_w2x1x2_m32/mn_major", "t128x128_w2x2_m32/k_major"]),
    "last-block range": ("arch::buffer_with_range(cur, last ? range_last : range_full);",
                         "arch::buffer_with_range(cur, range_last);",
                         ["t128x128_w2x2_m32/mn_major", "t64x64_w2x2_m16/mn_major"]),
    # Row step of the K-major copy hard-coded for 256 threads.
    "k-major row step": ("static constexpr int kRowStep = kThreads / 8;", "static constexpr int kRowStep = 32;",
                         ["t256x128_w4x2_m32/k_major"]),
    # Swizzle key of the MN-major LDS writes.
    "mn-major swizzle": ("arch::lds_store(reinterpret_cast<uint32_t*>(tile + r * kBlockK + (chunk ^ (r % 8)) * 16 + in_chunk), y[j]);",
                         "arch::lds_store(reinterpret_cast<uint32_t*>(tile + r * kBlockK + (chunk ^ (r % 4)) * 16 + in_chunk), y[j]);",
                         ["t128x128_w2x2_m32/mn_major"]),
    # Scale indices: the MFMA tile row of a_scale, the K block of a_scale, the N block of b_scale.
    "a_scale row": ("const int r = m_lane + i * kMfma < m_end ? m_lane + i * kMfma : m_end - 1;",
                    "const int r = m_lane + i < m_end ? m_lane + i : m_end - 1;", ["t128x128_w2x2_m32/mn_major"]),
    "a_scale K block": ("a_scale_stage[i] = arch::global_load(a_scale_src[i] + static_cast<int64_t>(kb) * gs.a_scale_stride_kb);",
                        "a_scale_stage[i] = arch::global_load(a_scale_src[i] + static_cast<int64_t>(kb_begin) * gs.a_scale_stride_kb);",
                        ["t128x64_w2x1x2_m32/mn_major"]),
    "b_scale N block": ("const float* const b_scale_col = b_scale_base + static_cast<int64_t>(n0 / 128) * gs.b_scale_stride_nb;",
                        "const float* const b_scale_col = b_scale_base + static_cast<int64_t>(n0 / 64) * gs.b_scale_stride_nb;",
                        ["t128x64_w2x1x2_m32/k_major"]),
    # Stream-K hand-off: the run's last K block dropped; the ticket count one short (the one before
    # the last finishes early); the first contributor's K blocks left out of the sum; the next
    # contributor's partial slot read; the last contributor left out of the sum; the release or the
    # acquire fence missing; whole tiles dealt with the wrong stride.
    "stream-K run end": ("kb_last = static_cast<int>(e) - sk_last * kbs;", "kb_last = static_cast<int>(e) - sk_last * kbs - 1;",
                         ["t128x128_w2x2_m32/mn_major/split", "t128x64_w2x1x2_m32/mn_major/stream"]),
    "ticket count": ("finish = arch::lds_load(ticket) == static_cast<uint32_t>(c_hi - c_lo);",
                     "finish = arch::lds_load(ticket) == static_cast<uint32_t>(c_hi - c_lo - 1);",
                     ["t128x64_w2x1x2_m32/k_major/split", "t64x64_w2x2_m16/k_major/stream"]),
    "first contributor": ("const int c_lo = static_cast<int>(stream_owner<uint32_t>(sk_it0, sk_iters, ge.sk_workgroups));",
                          "const int c_lo = static_cast<int>(stream_owner<uint32_t>(sk_it0 + 1, sk_iters, ge.sk_workgroups));",
                          ["t128x128_w2x2_m32/mn_major/split", "t256x128_w4x2_m32/mn_major/stream"]),
    "partial slot read": ("const float* const src = slot_of(c) + (i * kSubN + j) * kQuads * 256;",
                          "const float* const src = slot_of(c + 1) + (i * kSubN + j) * kQuads * 256;",
                          ["t128x64_w2x1x2_m32/mn_major/stream", "t128x64_w2x1x2_m32/k_major/split"]),
    "contributor loop": ("for (int c = c_lo; c <= c_hi; ++c) {", "for (int c = c_lo; c < c_hi; ++c) {",
                         ["t128x128_w2x2_m32/mn_major/split", "t64x64_w2x2_m16/k_major/stream"]),
    "release fence": ("arch::fence_release_agent();  // the slot is visible at agent scope before the ticket is taken",
                      "/* removed */",
                      ["t128x64_w2x1x2_m32/k_major/split", "t128x128_w2x2_m32/k_major/stream"]),
    "acquire fence": ("arch::fence_acquire_agent();  // the other slots, released before their tickets", "/* removed */",
                      ["t128x64_w2x1x2_m32/k_major/split", "t128x128_w2x2_m32/k_major/stream"]),
    "whole-tile stride": ("int tile = v + (seg - n_sk) * wgs, sk = -1, kb_begin = 0, kb_end = kbs;",
                          "int tile = v + (seg - n_sk) * (wgs - 1), sk = -1, kb_begin = 0, kb_end = kbs;",
                          ["t64x64_w2x2_m16/k_major/stream", "t256x128_w4x2_m32/mn_major/stream"]),
}


def _barrier_sites(src):
    call = "arch::barrier();"
    sites, pos = [], src.find(call)
    while pos >= 0:
        sites.append(pos)
        pos = src.find(call, pos + 1)
    return sites


def _mutants():
    """(name, mutated gemm_rocm_kernels.h, case keys): the named one-line bugs, and every
    arch::barrier() of the kernel removed in turn (each on a case of every instantiation that has
    the barrier on its path)."""
    with open(os.path.join(KERNEL_DIR, "gemm_rocm_kernels.h")) as f:
        src = f.read()
    out = []
    for name, (old, new, keys) in MUTANTS.items():
        assert src.count(old) == 1, f"mutant {name!r}: the original line occurs {src.count(old)} times"
        assert all(key in _CFG for key in keys), (name, keys)
        out.append((name, src.replace(old, new), keys))
    for pos in _barrier_sites(src):
        line = src.count("\n", 0, pos) + 1
        keys = ["t128x64_w2x1x2_m32/k_major", "t128x128_w2x2_m32/mn_major", "pack/gather",
                "t128x64_w2x1x2_m32/mn_major/stream", "t256x128_w4x2_m32/mn_major/stream"]
        out.append((f"barrier at line {line} removed", src[:pos] + "(void)0; /* removed */" + src[pos + len("arch::barrier();"):],
                    keys))
    return out


def _caught(binary, case_dir, c):
    r = run_case(binary, case_dir, c, expect_rc=None)
    # 1 is the driver refusing its input (e.g. built without the case's kernel): the harness's fault.
    assert r.returncode != 1, f"the mutant driver could not run the case: {r.stderr[-500:]}"
    if r.returncode != 0:
        return f"rc {r.returncode}: {r.stderr.strip().splitlines()[-1][:200] if r.stderr.strip() else ''}"
    info = json.loads(r.stdout.strip().splitlines()[-1])
    raw = torch.from_numpy(np.fromfile(os.path.join(case_dir, "out.bin"), np.uint16).view(np.int16)).view(torch.bfloat16)
    out = torch.as_strided(raw, (c["m"], c["n"]), (c["n"], 1) if c["out_layout"] == "row" else (1, c["m"]))
    (a, b, a_scale, b_scale), _ = write_problem(case_dir, c["m"], c["n"], c["k"], DTYPES[c["dtype"]], c["layout"],
                                                c["seed"], c["out_layout"], c["offsets"], config=c["config"],
                                                k_pad=c["k_pad"])
    try:
        check_gemm(out, reference_gemm(a, b, a_scale, b_scale), info, c["m"], c["n"], c["k"])
    except AssertionError as e:
        return "check failed: " + str(e).splitlines()[0][:200]
    return None


def test_every_mutant_of_the_kernel_is_caught(build_dir, tmp_path):
    mutants = _mutants()
    assert len(mutants) >= len(MUTANTS) + 2

    def build(i):
        d = build_dir / f"mutant_{i}"
        if d.exists():
            shutil.rmtree(d)
        shutil.copytree(KERNEL_DIR, d)
        (d / "gemm_rocm_kernels.h").write_text(mutants[i][1])
        # Only the instantiations its cases use (faster builds).
        mask = 0
        for key in mutants[i][2]:
            mask |= 1 << KERNEL_NAMES.index(_CFG[key]["config"][0])
        return compile_program("gfx942_gemm_driver.cpp", str(d / "driver"), extra_includes=[str(d)],
                               extra_flags=["-O1", f"-DFP8GEMM_EMU_KERNELS={mask}"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, 4))) as pool:
        binaries = list(pool.map(build, range(len(mutants))))
    survivors = []
    for i, ((name, _, keys), binary) in enumerate(zip(mutants, binaries)):
        reasons = []
        for j, key in enumerate(keys):
            case_dir = tmp_path / f"m{i}_{j}"
            case_dir.mkdir()
            reason = _caught(binary, case_dir, _CFG[key])
            if reason:
                reasons.append(f"{key}: {reason}")
                break
        if not reasons:
            survivors.append(name)
    assert not survivors, f"mutants not caught by their cases: {survivors}"
