"""gfx942 (MI300X) backend checks that run on a CPU-only machine.

* Dispatch and pass plan (host g++ build of gemm/gemm/gemm_rocm_config.h + gemm_rocm_plan.h):
  the 18 benchmark shapes hit their tuned entries, nearby shapes take the generic path, keys are
  unique, plans for each input layout / format / bad argument are what the launcher expects.
* ISA (clang-19 build of every .hip for gfx942 through ci/check_hip.sh, under C++17 and C++20):
  every instantiation of the dispatch table is compiled, uses the fp8 MFMA it was configured for,
  no scratch or spills, LDS <= 64 KiB, VGPR+AGPR within the budget of its workgroup size.
* The activation quantization (act_quant_launcher.hip): one instantiation per input dtype, no scratch or
  spills, 16-byte loads and 8-byte stores on its fast path, a 4-step bpermute amax reduction and IEEE
  (correctly rounded) divisions.
* The MoE expert GEMMs (expert_launcher.hip): the two tile instantiations of the expert plan, each with its
  fp8 MFMA, one K-major main loop, no scratch or spills, the dense kernel's LDS and occupancy budgets, no
  stream-K atomics and padded MFMA results; the routing and pack kernels without scratch; nothing else.
* Cost model (rocm_cost.py): per-step budgets of every main loop read from the assembly (exact
  LDS fragment bytes, no LDS address read twice, no bpermutes, no per-lane branches, buffer loads,
  VALU time under MFMA time, no scalar load or 64-bit multiply, one wave's critical path within its
  budget); the tuned table is the model's choice for each of the 18 shapes; the estimate improves
  on the replaced kernels' by >= 25 %; the resource, per-step cost and per-shape tables in
  gemm/docs/rocm_gfx942.md are what the current compiler output gives.
* Instruction order: every compiled stream-K hand-off releases the slots (buffer_wbl2, vmcnt(0))
  before the barrier in front of the ticket and acquires (buffer_inv) before the slot loads; every
  VALU read of an MFMA result is padded; a kernel built without its release (or acquire) fence,
  and the assembly with its s_nops deleted, fail these checks.

Nothing here executes gfx942 code (no MI300X exists on our machines).
The ISA tests skip when clang-19 is not installed, unless FP8GEMM_REQUIRE_HIP=1 (set it in CI)
turns the missing toolchain into a failure.
"""

import os
import re
import shutil
import subprocess

import pytest

import rocm_asm
import rocm_cost

REQUIRE_HIP = os.environ.get("FP8GEMM_REQUIRE_HIP", "0") == "1"


@pytest.fixture(scope="module")
def dispatch_tool(tmp_path_factory):
    if shutil.which(os.environ.get("CXX_HOST", "g++")) is None:
        pytest.fail("g++ is needed to build the host dispatch checks")
    return rocm_asm.compile_dispatch_tool(tmp_path_factory.mktemp("rocm_dispatch"))


STANDARDS = ["c++17", "c++20"]  # kernel-builder: C++17 below torch 2.12, C++20 from it


def _build(tmp_path_factory, std):
    missing = rocm_asm.hip_toolchain_missing()
    if missing:
        if REQUIRE_HIP:
            pytest.fail(f"FP8GEMM_REQUIRE_HIP=1 but {missing}")
        pytest.skip(missing)
    files = rocm_asm.build_assembly(tmp_path_factory.mktemp(f"gfx942_asm_{std}"), std=std)
    assert "gemm_launcher" in files, f"no assembly for gemm_launcher.hip: {files}"
    return {unit: path.read_text() for unit, path in files.items()}


@pytest.fixture(scope="module")
def asm_text_cxx17(tmp_path_factory):
    return _build(tmp_path_factory, "c++17")


@pytest.fixture(scope="module")
def asm_text_cxx20(tmp_path_factory):
    return _build(tmp_path_factory, "c++20")


@pytest.fixture(scope="module", params=STANDARDS)
def asm_text(request):
    """The gfx942 assembly of every translation unit, under each C++ standard."""
    return request.getfixturevalue("asm_text_" + request.param.replace("+", "x"))


@pytest.fixture(scope="module")
def launcher_asm(asm_text):
    return rocm_asm.parse_assembly(asm_text["gemm_launcher"])


@pytest.fixture(scope="module")
def loop_counts(asm_text):
    return rocm_cost.main_loop_counts(asm_text["gemm_launcher"])


@pytest.fixture(scope="module")
def kernels(dispatch_tool):
    table = rocm_asm.kernel_table(dispatch_tool)
    assert table, "empty kGemmKernels"
    return table


# ---- dispatch ---------------------------------------------------------------------------------


def test_dispatch_self_checks(dispatch_tool):
    proc = subprocess.run([str(dispatch_tool), "check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("0 failures")


def test_every_benchmark_shape_hits_its_tuned_entry(dispatch_tool, kernels):
    sel = rocm_asm.select(dispatch_tool, rocm_asm.BENCHMARK_SHAPES)
    assert [(s["m"], s["n"], s["k"]) for s in sel] == rocm_asm.BENCHMARK_SHAPES
    ids = {k["id"] for k in kernels}
    for s in sel:
        assert s["tuned"], f"benchmark shape {s} fell to the generic path"
        assert s["kernel"] in ids and s["workgroups"] >= 0 and 0 <= s["sk_workgroups"] <= s["workgroups"], s


NEAR_MISSES = [
    (1040, 1536, 7168),  # aliased with M=1024 under the Hub's m/32 packing
    (1025, 1536, 7168), (1023, 1536, 7168), (1024, 1537, 7168), (1024, 1536, 7169),
    (1024, 8192, 7168),  # N >= 8192 overflowed the Hub's 8-bit field
    (1024, 1536 + 8192 * 32, 7168),
    (6144, 576, 7296), (6160, 576, 7168), (6144, 640, 7168), (1024, 7168, 384),
    (7168, 1024, 256), (1536, 1024, 7168),  # M and N swapped
    (64, 64, 128), (96, 7168, 256), (128, 512, 7168),  # challenge test shapes: generic path
    (1, 1, 1), (2**21, 1, 1), (2**21 - 1, 2**21 - 1, 2**21 - 1),
]


def test_nearby_and_other_shapes_take_the_generic_path(dispatch_tool):
    for s in rocm_asm.select(dispatch_tool, NEAR_MISSES):
        assert not s["tuned"], f"{s} must not match a tuned entry"
        assert 0 <= s["kernel"] and s["workgroups"] >= 0 and s["sk_workgroups"] == 0, s


def test_small_mn_long_k_generic_shapes_use_split_k(dispatch_tool):
    (s,) = rocm_asm.select(dispatch_tool, [(64, 1536, 7168)])
    assert s["workgroups"] > 0, s  # tiles x split
    (s,) = rocm_asm.select(dispatch_tool, [(6144, 7168, 4096)])
    assert s["workgroups"] == 0, s  # one workgroup per tile


# ---- numerics shared by the device code (fp8_numerics.h), against torch's own conversions ------


def test_fp8_conversion_and_bf16_rounding_match_torch(dispatch_tool):
    import numpy as np
    import torch

    rng = np.random.default_rng(1234)
    f32 = rng.standard_normal(20000).astype(np.float32) * np.float32(2.0) ** rng.integers(-140, 128, 20000)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4028235e38, 1e-45, -1e-45], np.float32)
    bits = np.concatenate([f32, specials]).view(np.uint32)
    # Exact ties and their neighbours (round to nearest even must pick the even side).
    ties = (rng.integers(0, 2**16, 2000, dtype=np.uint32) << np.uint32(16)) | np.uint32(0x8000)
    bits = np.concatenate([bits, ties, ties - 1, ties + 1])
    stdin = "\n".join(f"{b:08x}" for b in bits)
    proc = subprocess.run([str(dispatch_tool), "numerics"], input=stdin, capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    fp8_rows, bf16_rows = lines[:256], lines[256:]

    all_bytes = torch.arange(256, dtype=torch.uint8)
    fn_val = all_bytes.view(torch.float8_e4m3fn).to(torch.float64)
    fnuz_val = all_bytes.view(torch.float8_e4m3fnuz).to(torch.float64)
    for row in fp8_rows:
        b, conv, dec_fnuz, dec_fn = row.split()
        b, conv = int(b), int(conv)
        # The emulator's / host decoders agree with torch bit for bit.
        for got, want in ((float.fromhex(dec_fnuz) if "nan" not in dec_fnuz else float("nan"), fnuz_val[b].item()),
                          (float.fromhex(dec_fn) if "nan" not in dec_fn else float("nan"), fn_val[b].item())):
            assert (np.isnan(got) and np.isnan(want)) or got == want, (b, got, want)
        # fn value == 2 x fnuz value of the converted byte, exactly; NaN stays NaN; -0 -> +0.
        want_fn, got_half = fn_val[b].item(), fnuz_val[conv].item()
        if np.isnan(want_fn):
            assert conv == 0x80, (b, conv)
        else:
            assert 2.0 * got_half == want_fn, (b, conv, want_fn, got_half)
            assert conv != 0x80, b
    changed = {int(r.split()[0]) for r in fp8_rows if r.split()[0] != r.split()[1]}
    assert changed == {0x7F, 0x80, 0xFF}, sorted(changed)

    want = torch.from_numpy(bits.view(np.float32).copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got = np.array([int(x, 16) for x in bf16_rows], dtype=np.uint16)
    assert got.shape == want.shape
    nan = np.isnan(bits.view(np.float32))
    assert np.all(np.isnan(got[nan].astype(np.uint32).__lshift__(16).view(np.float32)))
    mismatch = np.nonzero((got != want) & ~nan)[0]
    assert mismatch.size == 0, [(hex(bits[i]), hex(got[i]), hex(want[i])) for i in mismatch[:5]]


# ---- gfx942 ISA -------------------------------------------------------------------------------


def _gemm_instantiations(launcher_asm):
    return {rocm_asm.gemm_symbol_id(sym): k for sym, k in launcher_asm.items() if rocm_asm.gemm_symbol_id(sym) is not None}


def test_every_dispatch_instantiation_is_compiled(launcher_asm, kernels, dispatch_tool):
    compiled = _gemm_instantiations(launcher_asm)
    assert set(compiled) == {k["id"] for k in kernels}, (sorted(compiled), kernels)
    used = {s["kernel"] for s in rocm_asm.select(dispatch_tool, rocm_asm.BENCHMARK_SHAPES + NEAR_MISSES)}
    assert used <= set(compiled)
    assert any("pack_kernel" in sym for sym in launcher_asm), "pack_kernel missing from the gfx942 assembly"


def _expected_mfma(kd):
    mfma = kd["mfma"]
    k_per_instr = 16 if mfma == 32 else 32
    return f"v_mfma_f32_{mfma}x{mfma}x{k_per_instr}_fp8_fp8", rocm_asm.mfma_per_step(kd)


@pytest.mark.parametrize("kernel_index", range(4))
def test_gemm_instantiation_isa(launcher_asm, kernels, kernel_index):
    if kernel_index >= len(kernels):
        pytest.skip("fewer instantiations")
    kd = kernels[kernel_index]
    ka = _gemm_instantiations(launcher_asm)[kd["id"]]
    meta = ka.meta
    want_mfma, per_k_block = _expected_mfma(kd)
    mfmas = {m: c for m, c in ka.instructions.items() if m.startswith("v_mfma")}
    # The fp8 MFMA it was configured for, and only that one; one 128-K step is unrolled once.
    assert set(mfmas) == {want_mfma}, (kd["name"], mfmas)
    # Two main loops (K-major and MN-major operands), each one 128-K step per trip.
    assert mfmas[want_mfma] % per_k_block == 0 and mfmas[want_mfma] >= 2 * per_k_block, (kd["name"], mfmas, per_k_block)
    # No scratch: no private segment, no spills, no scratch/buffer-to-scratch instructions.
    assert int(meta[".private_segment_fixed_size"]) == 0, meta
    assert int(meta[".vgpr_spill_count"]) == 0 and int(meta[".sgpr_spill_count"]) == 0, meta
    assert ka.count("scratch_") == 0 and ka.count("buffer_store") == 0, ka.instructions
    assert meta.get(".uses_dynamic_stack", "false") == "false"
    # LDS: static + the dynamic bytes the launcher asks for.
    lds = int(meta[".group_segment_fixed_size"]) + kd["lds_bytes"]
    assert lds <= 65536, (kd["name"], lds)
    # Registers: the whole workgroup must fit on one CU (waves spread over 4 SIMDs).
    assert int(meta[".max_flat_workgroup_size"]) == kd["threads"]
    assert ka.vgpr_total <= rocm_asm.vgpr_budget(kd["threads"]), (kd["name"], ka.vgpr_total)
    assert ka.vgpr_total <= 256, (kd["name"], ka.vgpr_total)  # every instantiation: two waves per SIMD or more
    # ... and reach the occupancy the configuration was designed for (LDS and registers together).
    occ = rocm_asm.waves_per_simd(ka.vgpr_total, lds, kd["threads"])
    assert occ["waves_per_simd"] >= kd["waves_per_simd"], (kd["name"], occ, kd["waves_per_simd"])
    assert int(meta[".agpr_count"]) <= ka.vgpr_total <= 512
    # 102 addressable SGPRs (.sgpr_count also counts VCC, FLAT_SCRATCH and XNACK_MASK).
    assert int(meta[".amdhsa_next_free_sgpr"]) <= 102 and int(meta[".sgpr_count"]) <= 108, meta
    # The argument is re-read from the kernel argument segment inside the tile loop
    # (arch::kernel_arg): it must be the only one, by value at offset 0.
    args = re.findall(r"- \.offset:\s+(\d+)\s+\.size:\s+(\d+)\s+\.value_kind:\s+(\w+)", ka.meta_text)
    assert args == [("0", str(kd["args_bytes"]), "by_value")], args
    assert int(meta[".kernarg_segment_size"]) == kd["args_bytes"], meta
    # Memory path: 16-byte buffer loads, 16-byte LDS traffic, address spaces resolved (no flat_*).
    # (Operands come through buffer loads: the main-loop budget below allows no other 16-byte load.
    # The 16-byte global loads outside them read the partial slots of shared tiles.)
    assert ka.count("buffer_load_dwordx4") > 0 and ka.count("global_load_dwordx4") > 0, ka.instructions
    assert ka.count("ds_read_b128") > 0 and ka.count("ds_write_b128") > 0, ka.instructions
    assert ka.count("global_store_dwordx2") > 0, ka.instructions  # four bf16 columns per store
    assert ka.count("global_store_dwordx4") > 0, ka.instructions  # four fp32 sums per partial-slot store
    # Stream-K hand-off: one ticket per shared tile (wrapping atomic increment with return), the slots released
    # and acquired at agent scope (L2 write-back / invalidate: the XCDs' L2s are not coherent).
    assert ka.count("global_atomic_inc") > 0, ka.instructions
    assert ka.count("buffer_wbl2") > 0 and ka.count("buffer_inv") > 0, ka.instructions
    assert ka.count("flat_") == 0, ka.instructions
    assert ka.count("s_barrier") >= 2


def test_helper_kernels_have_no_scratch(launcher_asm):
    for sym, ka in launcher_asm.items():
        if "pack_kernel" in sym:
            assert int(ka.meta[".private_segment_fixed_size"]) == 0, sym
            assert int(ka.meta[".vgpr_spill_count"]) == 0, sym
            assert ka.count("scratch_") == 0 and ka.count("flat_") == 0, (sym, ka.instructions)


def test_no_unexpected_kernels(launcher_asm):
    for sym in launcher_asm:
        assert rocm_asm.gemm_symbol_id(sym) is not None or "pack_kernel" in sym, sym


# ---- MoE expert GEMMs (expert_launcher.hip) --------------------------------------------------------

EXPERT_TILE_IDS = {0, 2}  # the instantiations make_expert_plan picks from (expert_gemm_rocm_plan.h)
EXPERT_ROUTE_KERNELS = ("grouped_segments_kernel", "batched_count_kernel", "batched_segments_kernel",
                        "batched_gather_kernel", "expert_pack_kernel")


@pytest.fixture(scope="module")
def expert_asm(asm_text):
    assert "expert_launcher" in asm_text, f"no assembly for expert_launcher.hip: {sorted(asm_text)}"
    return rocm_asm.parse_assembly(asm_text["expert_launcher"])


def _expert_tile_id(symbol):
    m = re.search(r"expert_tile_kernelILNS0_12GemmKernelIdE(\d+)E", symbol)
    return int(m.group(1)) if m else None


def test_expert_kernels_compiled_and_nothing_else(expert_asm):
    tiles = {_expert_tile_id(sym) for sym in expert_asm} - {None}
    assert tiles == EXPERT_TILE_IDS, sorted(expert_asm)
    for name in EXPERT_ROUTE_KERNELS:
        assert sum(name in sym for sym in expert_asm) == 1, (name, sorted(expert_asm))
    assert len(expert_asm) == len(EXPERT_TILE_IDS) + len(EXPERT_ROUTE_KERNELS), sorted(expert_asm)


def test_expert_tile_isa(expert_asm, kernels):
    by_id = {kd["id"]: kd for kd in kernels}
    for sym, ka in expert_asm.items():
        kid = _expert_tile_id(sym)
        if kid is None:
            continue
        kd, meta = by_id[kid], ka.meta
        want_mfma, per_k_block = _expected_mfma(kd)
        mfmas = {m: c for m, c in ka.instructions.items() if m.startswith("v_mfma")}
        # The configured fp8 MFMA only, one K-major main loop (the expert plan packs the other layouts).
        assert set(mfmas) == {want_mfma} and mfmas[want_mfma] == per_k_block, (kd["name"], mfmas)
        assert int(meta[".private_segment_fixed_size"]) == 0, meta
        assert int(meta[".vgpr_spill_count"]) == 0 and int(meta[".sgpr_spill_count"]) == 0, meta
        assert ka.count("scratch_") == 0 and ka.count("buffer_store") == 0 and ka.count("flat_") == 0, ka.instructions
        assert meta.get(".uses_dynamic_stack", "false") == "false"
        lds = int(meta[".group_segment_fixed_size"]) + kd["lds_bytes"]
        assert lds <= 65536, (kd["name"], lds)
        assert int(meta[".max_flat_workgroup_size"]) == kd["threads"]
        occ = rocm_asm.waves_per_simd(ka.vgpr_total, lds, kd["threads"])
        assert occ["waves_per_simd"] >= kd["waves_per_simd"], (kd["name"], occ, kd["waves_per_simd"])
        assert int(meta[".amdhsa_next_free_sgpr"]) <= 102 and int(meta[".sgpr_count"]) <= 108, meta
        # Operands through 16-byte buffer loads and LDS; no stream-K hand-off in expert mode.
        assert ka.count("buffer_load_dwordx4") > 0 and ka.count("ds_read_b128") > 0, ka.instructions
        assert ka.count("global_atomic") == 0 and ka.count("buffer_wbl2") == 0, ka.instructions
        assert ka.count("global_store_dwordx2") > 0, ka.instructions  # four bf16 columns per store


def test_expert_routing_kernels_have_no_scratch(expert_asm):
    for sym, ka in expert_asm.items():
        if _expert_tile_id(sym) is not None:
            continue
        meta = ka.meta
        assert int(meta[".private_segment_fixed_size"]) == 0, sym
        assert int(meta[".vgpr_spill_count"]) == 0 and int(meta[".sgpr_spill_count"]) == 0, sym
        assert ka.count("scratch_") == 0 and ka.count("flat_") == 0, (sym, ka.instructions)
        assert int(meta[".sgpr_count"]) <= 108, (sym, meta)
    count = next(ka for sym, ka in expert_asm.items() if "batched_count_kernel" in sym)
    assert count.count("global_atomic_add") == 1, count.instructions  # one counter increment per row


def test_expert_mfma_result_padding(asm_text):
    gaps = rocm_asm.mfma_valu_gaps(asm_text["expert_launcher"])
    assert len({g[0] for g in gaps}) == len(EXPERT_TILE_IDS), gaps[:4]
    short = [g for g in gaps if g[2] < g[3]]
    assert not short, short[:5]


# ---- activation quantization (act_quant_launcher.hip) ---------------------------------------------

# ActDtype: 0 fp32, 1 bf16, 2 fp16 (include/act_quant.h)
ACT_QUANT_ELEMENT_LOAD = {0: "global_load_dword", 1: "global_load_ushort", 2: "global_load_ushort"}


@pytest.fixture(scope="module")
def act_quant_asm(asm_text):
    assert "act_quant_launcher" in asm_text, f"no assembly for act_quant_launcher.hip: {sorted(asm_text)}"
    return rocm_asm.parse_assembly(asm_text["act_quant_launcher"])


def test_act_quant_isa(act_quant_asm):
    by_dtype = {rocm_asm.act_quant_symbol_dtype(sym): ka for sym, ka in act_quant_asm.items()}
    assert set(by_dtype) == {0, 1, 2}, sorted(act_quant_asm)
    for dtype, ka in by_dtype.items():
        meta, where = ka.meta, (dtype, ka.instructions)
        # No scratch: no private segment, no spills of either register kind, no scratch or flat accesses.
        assert int(meta[".private_segment_fixed_size"]) == 0, meta
        assert int(meta[".vgpr_spill_count"]) == 0 and int(meta[".sgpr_spill_count"]) == 0, meta
        assert meta.get(".uses_dynamic_stack", "false") == "false"
        assert ka.count("scratch_") == 0 and ka.count("flat_") == 0 and ka.count("buffer_store") == 0, where
        # No LDS; 256 work-items; registers for 8 waves per SIMD (VGPR) and no more SGPRs than a wave has.
        assert int(meta[".group_segment_fixed_size"]) == 0 and int(meta[".max_flat_workgroup_size"]) == 256, meta
        assert ka.vgpr_total <= 64, (dtype, ka.vgpr_total)
        assert int(meta[".sgpr_count"]) <= 102, meta
        # Fast path: each lane's 8 elements in one 16-byte load (two for fp32), its 8 codes in one 8-byte
        # store; the element path: 8 element loads and byte stores; the scale: one dword store.
        assert ka.count("global_load_dwordx4") == (2 if dtype == 0 else 1), where
        assert ka.instructions.get(ACT_QUANT_ELEMENT_LOAD[dtype], 0) == 8, where
        assert ka.count("global_store_dwordx2") == 1 and ka.count("global_store_byte") == 8, where
        assert ka.instructions.get("global_store_dword", 0) == 1, where
        # The group's amax over 16 lanes: four bpermutes, no LDS otherwise, no barrier.
        assert ka.count("ds_bpermute_b32") == 4 and ka.count("ds_") == 4 and ka.count("s_barrier") == 0, where
        # IEEE division, correctly rounded (scale division + 8 elements): the div_scale/fmas/fixup sequence.
        assert ka.instructions.get("v_div_fixup_f32", 0) == 9 and ka.instructions.get("v_div_fmas_f32", 0) == 9, where


# ---- cost model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel_index", range(4))
def test_main_loop_budgets(loop_counts, kernels, kernel_index):
    """Per 128-K step and wave, in both main loops, from the assembly."""
    if kernel_index >= len(kernels):
        pytest.skip("fewer instantiations")
    kd = kernels[kernel_index]
    wave_m, wave_n = kd["block_m"] // kd["waves_m"], kd["block_n"] // kd["waves_n"]
    for layout, c in loop_counts[kd["id"]].items():
        where = (kd["name"], layout)
        assert c.mfma == rocm_asm.mfma_per_step(kd), where
        # Exactly the wave's fragments: its A and B rows over its K share, each byte once.
        assert c.lds_read_bytes == (wave_m + wave_n) * 128 // kd["waves_k"], (where, c.lds_read_bytes)
        assert c.lds_duplicate_reads == 0 and c.bpermutes == 0, (where, c)
        # Its share of the tile copy.
        assert c.lds_write_bytes == (kd["block_m"] + kd["block_n"]) * 128 * 64 // kd["threads"], (where, c)
        # Bounds by buffer ranges, not branches; operands through 16/8-byte buffer loads; a_scale
        # per lane (one dword per MFMA tile row), b_scale one dword (every lane the same address).
        assert c.divergent_branches == 0, (where, c)
        assert set(c.vector_loads) <= {"buffer_load_dwordx4", "buffer_load_dwordx2", "global_load_dword"}, (where, c)
        assert c.vector_loads.get("global_load_dword", 0) == wave_m // kd["mfma"] + 1, (where, c)
        assert c.barriers == 2, (where, c)
        # The VALU work of a step fits under its MFMA time.
        assert c.valu_cycles <= c.mfma_cycles, (where, c.valu, c.mfma_cycles)
        # From the cost model: no scalar load in the step (b_scale is a vector load, so the lgkmcnt
        # wait before the first MFMA waits for LDS only), no per-step 64-bit multiplies (the buffer
        # base moves by an add), the scalar pipe at most half as busy as the MFMA pipe, and one wave's
        # critical path (issue + exposed latency) within 1.25 x the MFMA time of the waves per SIMD
        # the configuration is built for.
        assert c.scalar_loads == 0 and c.scalar_muls == 0, (where, c)
        assert c.salu * rocm_cost.SALU_CYCLES * 2 <= c.mfma_cycles, (where, c.salu)
        path = rocm_cost.step_critical_path(c)
        assert path <= 1.25 * kd["waves_per_simd"] * c.mfma_cycles, (where, path, c.mfma_cycles)


def _model_inputs(text):
    asm = rocm_asm.parse_assembly(text)
    counts = rocm_cost.main_loop_counts(text)
    vgprs = {rocm_asm.gemm_symbol_id(s): k.vgpr_total for s, k in asm.items() if rocm_asm.gemm_symbol_id(s) is not None}
    return asm, counts, vgprs, rocm_cost.hand_off_fences(text)


def test_doc_tables_match_the_compiler(asm_text_cxx17, kernels, dispatch_tool):
    text = asm_text_cxx17["gemm_launcher"]
    asm, counts, vgprs, fences = _model_inputs(text)
    assert rocm_asm.doc_block("rocm_resources") == rocm_asm.render_resource_table(rocm_asm.resource_rows(kernels, asm)), (
        "gemm/docs/rocm_gfx942.md resource table is stale: regenerate with python gemm/tests/rocm_cost.py")
    assert rocm_asm.doc_block("rocm_step_costs") == rocm_cost.render_step_table(kernels, counts, vgprs), (
        "gemm/docs/rocm_gfx942.md per-step cost table is stale: regenerate with python gemm/tests/rocm_cost.py")
    bounds = rocm_cost.model_tables(kernels, counts, vgprs, fences, rocm_asm.select(dispatch_tool, rocm_asm.BENCHMARK_SHAPES))
    base = rocm_cost.load_baseline()
    assert rocm_asm.doc_block("rocm_step_changes") == rocm_cost.render_step_change_table(kernels, counts, base), (
        "gemm/docs/rocm_gfx942.md step change table is stale: regenerate with python gemm/tests/rocm_cost.py")
    table = rocm_cost.render_bound_table(bounds, rocm_cost.baseline_honest_bounds(base), rocm_cost.baseline_previous_bounds(base))
    assert rocm_asm.doc_block("rocm_bounds") == table, (
        "gemm/docs/rocm_gfx942.md bound table is stale: regenerate with python gemm/tests/rocm_cost.py")


def test_tuned_entries_are_the_cost_models_choice(asm_text_cxx17, kernels, dispatch_tool):
    """Every tuned entry is the configuration the cost model picks from the current assembly (the
    challenge layout: MN-major operands read in place)."""
    _, counts, vgprs, fences = _model_inputs(asm_text_cxx17["gemm_launcher"])
    names = {kd["id"]: kd["name"] for kd in kernels}
    for sel in rocm_asm.select(dispatch_tool, rocm_asm.BENCHMARK_SHAPES):
        best = rocm_cost.best_honest(sel["m"], sel["n"], sel["k"], kernels, counts, vgprs, fences)
        sk = best.config_sk_workgroups if best.config_sk_workgroups != best.workgroups else 0
        assert (names[sel["kernel"]], sel["workgroups"], sel["sk_workgroups"]) == (best.kernel, best.config_workgroups, sk), (
            sel, best)


def test_estimated_bound_improves_on_the_baseline(asm_text_cxx17, kernels, dispatch_tool):
    """Geometric mean of the model's estimates over the 18 shapes against the same model applied to
    the kernels and dispatch this code replaced (tests/data/gfx942_cost_baseline.json): at least
    25 % lower, and never below the speed of light."""
    _, counts, vgprs, fences = _model_inputs(asm_text_cxx17["gemm_launcher"])
    bounds = rocm_cost.model_tables(kernels, counts, vgprs, fences, rocm_asm.select(dispatch_tool, rocm_asm.BENCHMARK_SHAPES))
    after = rocm_cost.geomean(b.bound_us for b in bounds)
    before = rocm_cost.geomean(b.bound_us for b in rocm_cost.baseline_honest_bounds(rocm_cost.load_baseline()))
    sol = rocm_cost.geomean(rocm_asm.sol_us(*s)[0] for s in rocm_asm.BENCHMARK_SHAPES)
    assert sol <= after <= before * 0.75, (sol, after, before)
    for b in bounds:
        assert b.bound_us >= rocm_asm.sol_us(b.m, b.n, b.k)[0], b


def test_baseline_file_holds_per_step_counts_for_the_18_shapes():
    """The baseline file is the model's input, not its output: per-step counts and hand-off fences of
    the replaced kernels' assembly and their dispatch of the 18 shapes, so the comparison above
    applies one model twice."""
    b = rocm_cost.load_baseline()
    assert [(d["m"], d["n"], d["k"]) for d in b["dispatch"]] == rocm_asm.BENCHMARK_SHAPES
    for kd in b["kernels"]:
        assert len(b["fences"][str(kd["id"])]) == 3
        for layout in ("k_major", "mn_major"):
            c = rocm_cost.StepCounts(**b["loops"][str(kd["id"])][layout])
            assert c.mfma == rocm_asm.mfma_per_step(kd) and c.instructions > c.mfma, (kd, layout)


# ---- instruction order of the compiled hand-off and MFMA result hazards ---------------------------


def test_handoff_fence_order(asm_text):
    """Per kernel and hand-off: slot stores, release write-back, vmcnt(0), barrier, ticket; then
    barrier, acquire invalidate, slot loads (rocm_asm.handoff_order_problems)."""
    problems = rocm_asm.handoff_order_problems(asm_text["gemm_launcher"])
    assert len(problems) == 4, sorted(problems)
    assert all(not p for p in problems.values()), problems


def test_mfma_result_padding(asm_text):
    """Every VALU read of an MFMA result in the same basic block comes after the wait states the
    hazard needs (s_nop padding), in every kernel; there are such reads (the scale step)."""
    gaps = rocm_asm.mfma_valu_gaps(asm_text["gemm_launcher"])
    assert len({g[0] for g in gaps}) == 4, gaps[:4]
    short = [g for g in gaps if g[2] < g[3]]
    assert not short, short[:5]


def test_mfma_padding_check_catches_missing_nops(asm_text_cxx17):
    """The same assembly with its s_nop lines deleted fails the padding check."""
    text = "\n".join(l for l in asm_text_cxx17["gemm_launcher"].splitlines() if not l.strip().startswith("s_nop"))
    short = [g for g in rocm_asm.mfma_valu_gaps(text) if g[2] < g[3]]
    assert {g[0] for g in short} == {g[0] for g in rocm_asm.mfma_valu_gaps(text)}, short[:3]


FENCE_MUTANTS = {
    "release": "arch::fence_release_agent();  // the slot is visible at agent scope before the ticket is taken",
    "acquire": "arch::fence_acquire_agent();  // the other slots, released before their tickets",
}


@pytest.mark.parametrize("fence", sorted(FENCE_MUTANTS))
def test_fence_order_check_catches_a_missing_fence(tmp_path_factory, fence):
    """The kernel source with its release (or acquire) fence deleted, compiled for gfx942: the order
    check reports every kernel's hand-off (the ticket atomic's own write-back and invalidate sit in
    one lane's branch between the barriers, too late for the other waves' slots / too early for
    their loads)."""
    missing = rocm_asm.hip_toolchain_missing()
    if missing:
        if REQUIRE_HIP:
            pytest.fail(f"FP8GEMM_REQUIRE_HIP=1 but {missing}")
        pytest.skip(missing)
    root = tmp_path_factory.mktemp(f"fence_mutant_{fence}")
    for d in ("ci", "tools"):
        shutil.copytree(rocm_asm.REPO_DIR / d, root / d)
    shutil.copytree(rocm_asm.KERNEL_DIR, root / "gemm", ignore=shutil.ignore_patterns("build", "*.so", "__pycache__", "tests"))
    src = root / "gemm" / "gemm" / "gemm_rocm_kernels.h"
    line = FENCE_MUTANTS[fence]
    text = src.read_text()
    assert text.count(line) == 1
    src.write_text(text.replace(line, "/* removed */"))
    out = root / "asm"
    proc = subprocess.run(["bash", str(root / "ci" / "check_hip.sh"), str(out)], capture_output=True, text=True,
                          env={**os.environ, "HIP_UNITS": "gemm_launcher", "HIP_ASM_ONLY": "1"})  # what the check reads
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    problems = rocm_asm.handoff_order_problems((out / "gemm_launcher.gfx942.s").read_text())
    assert len(problems) == 4 and all(problems.values()), problems
    word = "buffer_wbl2" if fence == "release" else "buffer_inv"
    assert all(any(word in p for p in ps) for ps in problems.values()), problems


def test_speed_of_light_matches_the_challenge_table():
    # task.yml's published SOL values (µs) for six of the shapes.
    published = {(1024, 1536, 7168): 8.63, (1024, 4608, 7168): 25.89, (6144, 1536, 7168): 51.78,
                 (6144, 4608, 7168): 155.30, (1024, 7168, 256): 3.17, (6144, 7168, 256): 17.27}
    for shape, us in published.items():
        got, _ = rocm_asm.sol_us(*shape)
        assert abs(got - us) / us < 0.005, (shape, got, us)
