"""ISA-derived cost model of the gfx942 GEMM: per-step instruction counts read from the clang-19
assembly of the main loops, combined with the dispatch table into per-shape estimates on an MI300X:
the pipes (MFMA, VALU, scalar), instruction issue and the latency one wave cannot hide, LDS, L2, HBM
and Infinity Cache traffic, the stream-K hand-off with its fences, and one dispatch per launch
(honest_bound); shape_bound is the previous, pipes-and-bytes-only model, kept for the comparison
column. Nothing here runs on an AMD GPU: every number is an estimate from a model, never a
measurement.

    python gemm/tests/rocm_cost.py             # print the generated doc blocks (needs clang-19, g++)
    python gemm/tests/rocm_cost.py baseline ASM SELECT_JSON KERNELS_JSON COMMIT > OUT.json
                                               # counts and dispatch of another build (the committed
                                               # baseline: the kernels this code replaced)

The model and its constants are described in gemm/docs/rocm_gfx942.md ("Cost model").
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

import rocm_asm

TESTS_DIR = Path(__file__).resolve().parent
BASELINE_FILE = TESTS_DIR / "data" / "gfx942_cost_baseline.json"

# ---- MI300X constants (sources in gemm/docs/rocm_gfx942.md, "Cost model") ------------------------
NUM_CUS = rocm_asm.NUM_CUS                # 304
SIMDS_PER_CU = rocm_asm.SIMDS_PER_CU      # 4
PEAK_FP8_FLOPS = 2614.9e12                # dense fp8 MFMA peak
MFMA_FLOPS_PER_CLK_PER_CU = 4096          # fp8 MFMA FLOP per clock per CU
CLOCK_HZ = PEAK_FP8_FLOPS / (NUM_CUS * MFMA_FLOPS_PER_CLK_PER_CU)  # = 2.1 GHz, the peak engine clock
VALU_CYCLES = 4                           # one wave64 VALU instruction on a 16-lane SIMD
LDS_BYTES_PER_CLK_PER_CU = 128
VL1D_BYTES_PER_CLK_PER_CU = 128           # vector L1 peak: what one CU's loads and stores move per clock
HBM_BYTES_PER_S = 5.3e12
MALL_BYTES_PER_S = 17.0e12                # Infinity Cache peak
MALL_BYTES = 256 * 2**20                  # Infinity Cache capacity

# Passes of each MFMA (CDNA3 ISA guide, table of MFMA opcodes: 32x32x16 fp8 16 passes, 16x16x32 fp8
# 8 passes; a pass is 4 cycles): the cycles before its result can be read.
MFMA_PASSES = {"v_mfma_f32_32x32x16_fp8_fp8": 16, "v_mfma_f32_16x16x32_fp8_fp8": 8}

# ---- terms of the honest model (sources and error bars in gemm/docs/rocm_gfx942.md) ---------------
ISSUE_CYCLES = 4           # a wave issues at most one instruction every 4 cycles (wave64 on a 16-lane SIMD)
SALU_CYCLES = 4            # one scalar ALU per CU, shared by the 4 SIMDs in turn: 1 per 4 cycles per SIMD
LDS_LATENCY = 128          # cycles, ds_read issue to data (assumed, 64..192)
SMEM_LATENCY = 300         # cycles, s_buffer_load that misses the scalar cache, L2 hit (assumed, 150..600)
VMEM_LATENCY = 600         # cycles, vector load served by L2 (assumed, 400..900); MALL/HBM are slower
BARRIER_LATENCY = 64       # cycles a wave waits at s_barrier after the last one arrives (assumed, 16..128)
L2_CHANNELS = 16 * 8       # 16 L2 channels per XCD, 8 XCDs
L2_BYTES_PER_CLK_PER_CHANNEL = 128
DISPATCH_US = 3.5          # each dependent launch in a stream (a memset too), assumed 2..7 µs
XCDS = 8

MFMA_FLOPS = {"v_mfma_f32_32x32x16_fp8_fp8": 2 * 32 * 32 * 16, "v_mfma_f32_16x16x32_fp8_fp8": 2 * 16 * 16 * 32}


def mfma_cycles(mnemonic: str) -> float:
    """Issue-to-issue cycles of one MFMA on its SIMD at the fp8 peak (32 for 32x32x16, 16 for 16x16x32)."""
    return MFMA_FLOPS[mnemonic] / (MFMA_FLOPS_PER_CLK_PER_CU / SIMDS_PER_CU)


# Bytes per lane of each LDS instruction.
LDS_READ = {"ds_read_b128": 16, "ds_read_b96": 12, "ds_read_b64": 8, "ds_read_b32": 4, "ds_read_u16": 2,
            "ds_read_i16": 2, "ds_read_u8": 1, "ds_read_i8": 1, "ds_read2_b32": 8, "ds_read2st64_b32": 8,
            "ds_read2_b64": 16, "ds_read2st64_b64": 16, "ds_bpermute_b32": 4, "ds_permute_b32": 4}
LDS_WRITE = {"ds_write_b128": 16, "ds_write_b96": 12, "ds_write_b64": 8, "ds_write_b32": 4, "ds_write_b16": 2,
             "ds_write_b8": 1, "ds_write2_b32": 8, "ds_write2st64_b32": 8, "ds_write2_b64": 16,
             "ds_write2st64_b64": 16}
SCALAR_MEM = re.compile(r"^s_(buffer_)?load_dword(x(\d+))?$")
VECTOR_MEM = re.compile(r"^(global|buffer)_(load|store)_(dword(x(\d))?|ubyte|sbyte|ushort|sshort|short|byte)$")
VECTOR_MEM_BYTES = {"ubyte": 1, "sbyte": 1, "byte": 1, "ushort": 2, "sshort": 2, "short": 2}
NO_SALU = ("s_waitcnt", "s_barrier", "s_nop", "s_cbranch", "s_branch", "s_load", "s_buffer_load", "s_setprio",
           "s_sleep", "s_endpgm")


# ---- assembly structure ---------------------------------------------------------------------------

@dataclass
class Block:
    label: str
    loop: str | None        # header label (without the leading '.L') of the innermost loop, if any
    depth: int              # loop depth (0 outside loops)
    lines: list[str] = field(default_factory=list)       # instructions
    notes: list[str] = field(default_factory=list)       # ";; fp8gemm: ..." notes


def function_blocks(text: str) -> dict[str, list[Block]]:
    """Basic blocks of every function, with clang's loop annotations and the kernel's ISA notes."""
    funcs: dict[str, list[Block]] = {}
    blocks = None
    for line in text.splitlines():
        m = re.match(r"^(_Z\w+):", line)
        if m:
            blocks = funcs.setdefault(m.group(1), [Block("entry", None, 0)])
            continue
        if blocks is None:
            continue
        if line.startswith(".Lfunc_end"):
            blocks = None
            continue
        m = re.match(r"^(\.LBB\d+_\d+|; %bb\.\d+):\s*(;.*)?$", line)
        if m:
            comment = m.group(2) or ""
            header = re.search(r"Loop Header: Depth=(\d+)", comment)
            member = re.search(r"in Loop: Header=(BB\d+_\d+) Depth=(\d+)", comment)
            if header:
                blocks.append(Block(m.group(1)[2:], m.group(1)[2:], int(header.group(1))))
            elif member:
                blocks.append(Block(m.group(1), member.group(1), int(member.group(2))))
            else:
                blocks.append(Block(m.group(1), None, 0))
            continue
        s = line.strip()
        # A nested loop's header: "; Parent Loop ..." on the label line, the header mark on the next.
        header = re.match(r"^;\s*=>\s*This (Inner )?Loop Header: Depth=(\d+)", s)
        if header and not blocks[-1].lines and blocks[-1].label.startswith(".LBB"):
            blocks[-1].label = blocks[-1].label[2:]
            blocks[-1].loop, blocks[-1].depth = blocks[-1].label, int(header.group(2))
            continue
        if s.startswith(";; fp8gemm:"):
            blocks[-1].notes.append(s[len(";; fp8gemm:"):].strip())
        elif s and re.match(r"[a-z_]", s) and not s.startswith("."):
            blocks[-1].lines.append(s.split(";")[0].strip())
    return funcs


def loop_blocks(blocks: list[Block], header: str) -> list[Block]:
    inner = [b for b in blocks if b.loop == header]
    assert any(b.label == header for b in inner), f"loop {header} not found"
    return inner


def noted_loops(blocks: list[Block]) -> dict[str, list[Block]]:
    """{note text: blocks of the first loop that starts after the note} for every ISA note (the main
    loops sit inside the kernel's loop over the tiles of a workgroup, one level deep)."""
    found = {}
    for i, b in enumerate(blocks):
        for note in b.notes:
            assert note not in found, f"the ISA note {note!r} occurs twice (a duplicated main loop)"
            header = next((c.label for c in blocks[i:] if c.loop == c.label), None)
            assert header is not None, f"no loop after the ISA note {note!r}"
            found[note] = loop_blocks(blocks, header)
    return found


# ---- per-trip counts -------------------------------------------------------------------------------

def _operands(line: str) -> list[str]:
    parts = line.split(None, 1)
    return [o.strip() for o in parts[1].split(",")] if len(parts) > 1 else []


def _vgprs(operand: str) -> list[int]:
    m = re.fullmatch(r"v(\d+)", operand)
    if m:
        return [int(m.group(1))]
    m = re.fullmatch(r"v\[(\d+):(\d+)\]", operand)
    return list(range(int(m.group(1)), int(m.group(2)) + 1)) if m else []


def _writes_first_operand(mnem: str) -> bool:
    if mnem.startswith(("v_cmp", "v_readfirstlane", "v_readlane")):
        return False
    return mnem.startswith(("v_", "ds_read", "ds_bpermute", "ds_permute", "buffer_load", "global_load"))


def _lds_read_ranges(mnem: str, ops: list[str], line: str) -> list[tuple[int, int]]:
    """Byte ranges [lo, hi) relative to the address VGPR that one LDS read touches."""
    width = LDS_READ[mnem]
    if mnem.startswith("ds_read2"):
        elem = width // 2
        scale = elem * (64 if "st64" in mnem else 1)
        o0 = re.search(r"offset0:(\d+)", line)
        o1 = re.search(r"offset1:(\d+)", line)
        a = int(o0.group(1)) * scale if o0 else 0
        b = int(o1.group(1)) * scale if o1 else 0
        return [(a, a + elem), (b, b + elem)]
    o = re.search(r"offset:(\d+)", line)
    a = int(o.group(1)) if o else 0
    return [(a, a + width)]


@dataclass
class StepCounts:
    """One trip of a main loop = one 128-wide K step of one wave."""
    mfma: int = 0
    mfma_cycles: float = 0.0
    valu: int = 0
    salu: int = 0
    lds_read_bytes: int = 0
    lds_write_bytes: int = 0
    lds_duplicate_reads: int = 0   # LDS reads overlapping an earlier read of the same address
    bpermutes: int = 0
    global_read_bytes: int = 0     # vector loads x 64 lanes + scalar loads
    global_write_bytes: int = 0
    vector_loads: dict = field(default_factory=dict)   # mnemonic -> count
    waits: int = 0
    barriers: int = 0
    divergent_branches: int = 0    # s_cbranch_execz / execnz: per-lane control flow
    uniform_branches: int = 0
    instructions: int = 0          # every instruction of the trip (each takes one issue slot of its wave)
    nop_cycles: int = 0            # extra cycles of s_nop N (N + 1 cycles each, one of them its issue slot)
    scalar_loads: int = 0          # s_load / s_buffer_load (their return shares lgkmcnt with LDS reads)
    scalar_muls: int = 0           # s_mul_i32 / s_mul_hi_u32 (per-step 64-bit address arithmetic)
    mfma_drain: int = 0            # cycles from the last MFMA's issue to its result (its passes x 4)

    @property
    def valu_cycles(self) -> float:
        return self.valu * VALU_CYCLES


def count_step(blocks: list[Block], skip=lambda b: False) -> StepCounts:
    c = StepCounts()
    version: dict[int, int] = {}
    reads: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for b in blocks:
        if skip(b):
            continue
        for line in b.lines:
            mnem = line.split()[0]
            ops = _operands(line)
            if mnem.startswith("v_mfma"):
                c.mfma += 1
                c.mfma_cycles += mfma_cycles(mnem)
            elif mnem.startswith("v_"):
                c.valu += 1
            elif mnem.startswith("s_") and not mnem.startswith(NO_SALU):
                c.salu += 1
            if mnem in LDS_READ:
                c.lds_read_bytes += 64 * LDS_READ[mnem]
                c.bpermutes += mnem in ("ds_bpermute_b32", "ds_permute_b32")
                if mnem.startswith("ds_read"):
                    base = _vgprs(ops[1].split()[0])[0]
                    key = (base, version.get(base, 0))
                    for lo, hi in _lds_read_ranges(mnem, ops, line):
                        if any(lo < h and l < hi for l, h in reads.get(key, [])):
                            c.lds_duplicate_reads += 1
                        reads.setdefault(key, []).append((lo, hi))
            elif mnem in LDS_WRITE:
                c.lds_write_bytes += 64 * LDS_WRITE[mnem]
            m = VECTOR_MEM.match(mnem)
            if m:
                size = VECTOR_MEM_BYTES.get(m.group(3)) or 4 * int(m.group(5) or 1)
                if m.group(2) == "load":
                    c.global_read_bytes += 64 * size
                    c.vector_loads[mnem] = c.vector_loads.get(mnem, 0) + 1
                else:
                    c.global_write_bytes += 64 * size
            m = SCALAR_MEM.match(mnem)
            if m:
                c.global_read_bytes += 4 * int(m.group(3) or 1)
            c.instructions += 1
            m_nop = re.match(r"s_nop\s+(\d+)", line)
            if m_nop:
                c.nop_cycles += int(m_nop.group(1))
            c.scalar_loads += bool(SCALAR_MEM.match(mnem))
            c.scalar_muls += mnem in ("s_mul_i32", "s_mul_hi_u32", "s_mul_hi_i32")
            if mnem.startswith("v_mfma"):
                c.mfma_drain = MFMA_PASSES[mnem] * 4
            c.waits += mnem == "s_waitcnt"
            c.barriers += mnem == "s_barrier"
            c.divergent_branches += mnem in ("s_cbranch_execz", "s_cbranch_execnz")
            c.uniform_branches += mnem in ("s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz")
            if ops and _writes_first_operand(mnem):
                for r in _vgprs(ops[0].split()[0]):
                    version[r] = version.get(r, 0) + 1
    return c


LOOPS = {"main loop k-major": "k_major", "main loop mn-major": "mn_major"}


def main_loop_counts(asm_text: str) -> dict[int, dict[str, StepCounts]]:
    """{GemmKernelId: {"k_major": counts, "mn_major": counts}} from the ISA notes of the kernels."""
    out = {}
    for sym, blocks in function_blocks(asm_text).items():
        kid = rocm_asm.gemm_symbol_id(sym)
        if kid is None:
            continue
        loops = noted_loops(blocks)
        assert set(loops) == set(LOOPS), (sym, sorted(loops))
        for blocks_of_loop in loops.values():
            depth = blocks_of_loop[0].depth
            assert all(b.depth == depth for b in blocks_of_loop), f"{sym}: nested loop inside the main loop"
        out[kid] = {LOOPS[note]: count_step(bl) for note, bl in loops.items()}
    return out


# ---- per-shape bounds ----------------------------------------------------------------------------

@dataclass
class Bound:
    m: int
    n: int
    k: int
    kernel: str
    decomposition: str      # "per tile", "split-K s" (separate reduction pass), or the stream-K schedule
    workgroups: int         # grid of the GEMM pass
    wg_per_cu: int
    waves_per_simd: float   # resident on the busiest CU's SIMDs: min(occupancy limit, waves it gets)
    mfma_us: float
    valu_us: float
    lds_us: float
    hbm_us: float
    mall_us: float
    after_us: float         # serial time added to the GEMM pass: reduction pass, or fix-up + zero pass
    after_kind: str         # "" / "reduce" / "fix-up"
    config_workgroups: int = 0     # GemmConfig::workgroups of this candidate (0: one per tile)
    config_sk_workgroups: int = 0  # GemmConfig::sk_workgroups (0: all)

    @property
    def bound_us(self) -> float:
        return max(self.mfma_us, self.valu_us, self.lds_us, self.hbm_us, self.mall_us) + self.after_us

    @property
    def binding(self) -> str:
        terms = {"MFMA": self.mfma_us, "VALU": self.valu_us, "LDS": self.lds_us, "HBM": self.hbm_us,
                 "MALL": self.mall_us}
        return max(terms, key=terms.get) + (f" + {self.after_kind}" if self.after_us else "")


def input_bytes(m: int, n: int, k: int) -> int:
    """A and B (fp8) and both scales (fp32), each read once."""
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    return m * k + n * k + 4 * m * kb + 4 * nb * kb


def _pass_terms(kernel: dict, counts: StepCounts, wgs: int, steps: int, vgpr_total: int):
    """(occupancy, w, resident waves/SIMD, MFMA, VALU, LDS µs) of a GEMM pass of `wgs` workgroups whose
    longest one runs `steps` K steps: dealt round-robin, the busiest CU runs w = ceil(wgs / 304) of
    them, each of whose waves occupies one SIMD (a workgroup's waves are spread evenly over the 4)."""
    waves = kernel["threads"] // 64
    occ = rocm_asm.waves_per_simd(vgpr_total, kernel["lds_bytes"], kernel["threads"])
    w = math.ceil(wgs / NUM_CUS)
    simd_waves = math.ceil(w * waves / SIMDS_PER_CU)
    to_us = 1e6 / CLOCK_HZ
    mfma = simd_waves * steps * counts.mfma_cycles * to_us
    valu = simd_waves * steps * counts.valu_cycles * to_us
    lds = w * steps * waves * (counts.lds_read_bytes + counts.lds_write_bytes) / LDS_BYTES_PER_CLK_PER_CU * to_us
    return occ, w, min(occ["waves_per_simd"], simd_waves), mfma, valu, lds


def split_bound(m: int, n: int, k: int, kernel: dict, counts: StepCounts, split_k: int, vgpr_total: int) -> Bound:
    """Split-K with a separate reduction pass (the decomposition of the baseline kernel).

    GEMM pass: tiles x split workgroups of ceil(K blocks / split) steps (_pass_terms); HBM time for
    the inputs read once and the bf16 output written once (or the fp32 split-K partials written
    once: to the Infinity Cache (MALL) when inputs and partials fit in it, else to HBM), MALL time for
    everything that passes through it. The pass takes the largest of these.
    Reduction pass (split-K only, a separate launch after the GEMM pass, so added): reads the
    partials back (MALL or HBM as they were written) and writes the bf16 output to HBM."""
    kb = math.ceil(k / 128)
    kps = math.ceil(kb / split_k)
    split = math.ceil(kb / kps)
    tiles = math.ceil(m / kernel["block_m"]) * math.ceil(n / kernel["block_n"])
    wgs = tiles * split
    occ, _, resident, mfma, valu, lds = _pass_terms(kernel, counts, wgs, kps, vgpr_total)
    inputs, out = input_bytes(m, n, k), 2 * m * n
    partials = 4 * split * m * n if split > 1 else 0
    if not partials:
        hbm = mall = (inputs + out)
        reduce = 0.0
    elif inputs + partials <= MALL_BYTES:
        hbm, mall = inputs, inputs + partials
        reduce = partials / MALL_BYTES_PER_S * 1e6 + out / HBM_BYTES_PER_S * 1e6
    else:
        hbm, mall = inputs + partials, inputs + partials
        reduce = (partials + out) / HBM_BYTES_PER_S * 1e6
    label = f"split-K {split}" if split > 1 else f"{wgs}: one per tile"
    return Bound(m, n, k, kernel["name"], label, wgs, occ["wg_per_cu"],
                 resident, mfma, valu, lds, hbm / HBM_BYTES_PER_S * 1e6, mall / MALL_BYTES_PER_S * 1e6, reduce,
                 "reduce" if reduce else "", tiles * split if split > 1 else 0)


@dataclass(frozen=True)
class Schedule:
    """The kernel's work decomposition for one GemmConfig, as make_plan normalises it. Per stream-K
    workgroup v < sk_workgroups: iterations [run_first[v], run_end[v]) over the stream-K tiles, i.e.
    tiles run_tile_first[v]..run_tile_last[v]; then whole tiles v, v + grid, ... of the others."""
    workgroups: int       # GemmConfig::workgroups (0: one per tile)
    sk_workgroups: int    # 0 when there is no stream-K tile
    grid: int
    sk_tiles: int
    k_blocks: int
    run_first: np.ndarray
    run_end: np.ndarray
    contributors: np.ndarray  # per stream-K tile: workgroups covering it
    dp_tiles: int         # whole tiles, dealt round-robin to the grid

    @property
    def run_tile_first(self) -> np.ndarray:
        return self.run_first // self.k_blocks

    @property
    def run_tile_last(self) -> np.ndarray:
        return (self.run_end - 1) // self.k_blocks

    def dp(self, v) -> np.ndarray | int:
        """Whole tiles workgroup v (an index or an array of them) takes."""
        return self.dp_tiles // self.grid + (v < self.dp_tiles % self.grid)

    def per_run(self, per_tile: np.ndarray) -> np.ndarray:
        """Per stream-K workgroup: the sum of per_tile (one value per stream-K tile) over its run's tiles."""
        before = np.concatenate(([0], np.cumsum(per_tile)))
        return before[self.run_tile_last + 1] - before[self.run_tile_first]

    @functools.cached_property
    def steps(self) -> int:
        """K steps of the busiest workgroup: its stream-K run and whole tiles; past the stream-K workgroups, the
        first takes the most whole tiles."""
        v = np.arange(self.sk_workgroups)
        steps = int((self.run_end - self.run_first + self.dp(v) * self.k_blocks).max()) if self.sk_workgroups else 0
        if self.sk_workgroups < self.grid:
            steps = max(steps, int(self.dp(self.sk_workgroups)) * self.k_blocks)
        return steps


def schedule(m: int, n: int, k: int, kernel: dict, workgroups: int, sk_workgroups: int = 0) -> Schedule:
    """gemm_rocm_plan.h make_plan + gemm_rocm_kernels.h: W workgroups; the tiles past the last whole
    wave of W (all of them when there are at most W) are stream-K tiles dealt in equal runs to the
    first sk_workgroups; workgroup v then takes whole tiles v, v + W, ... of the others."""
    return _schedule(m, n, k, kernel["block_m"], kernel["block_n"], workgroups, sk_workgroups)


@functools.lru_cache(maxsize=None)  # the tuning search and both bounds ask for the same schedules
def _schedule(m: int, n: int, k: int, block_m: int, block_n: int, workgroups: int, sk_workgroups: int) -> Schedule:
    tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
    kb = math.ceil(k / 128)
    w = min(max(workgroups, 0), tiles * kb)
    sk, skw = 0, 0
    if w and w != tiles:
        sk = tiles % w if w < tiles else tiles
        skw = sk_workgroups if 0 < sk_workgroups < w else w
        skw = min(skw, sk * kb)
        if sk * kb * skw > 2**31 - 1:
            skw = (2**31 - 1) // (sk * kb)
        if sk and skw < 1:
            w = sk = skw = 0
    if w == tiles:
        w = 0
    if not sk:
        skw = 0
    grid = w or tiles
    iters = sk * kb
    v = np.arange(skw, dtype=np.int64)
    first, end = v * iters // max(skw, 1), (v + 1) * iters // max(skw, 1)
    covered = np.zeros(sk + 1, dtype=np.int64)  # +1 at each run's first tile, -1 past its last
    np.add.at(covered, first // kb, 1)
    np.add.at(covered, (end - 1) // kb + 1, -1)
    return Schedule(w, skw, grid, sk, kb, first, end, np.cumsum(covered)[:sk], tiles - sk)


def shape_bound(m: int, n: int, k: int, kernel: dict, counts: StepCounts, workgroups: int, vgpr_total: int,
                sk_workgroups: int = 0) -> Bound:
    """Lower-bound estimate of one call with one configuration of this kernel (main loops only).

    One workgroup per tile: split_bound with no split. Otherwise the schedule above in one pass:
    MFMA/VALU/LDS as _pass_terms with the busiest workgroup's K steps. A stream-K tile covered by
    c > 1 workgroups costs c fp32 partial slots written and c - 1 read back by the last of them
    (its own sums stay in registers), inside the pass: their bytes count in the MALL term (and HBM
    when inputs and slots do not fit in the Infinity Cache). The hand-off comes after the MFMAs of
    the tile's last contributor, so time is added for it: the larger of
      * the busiest CU's hand-off traffic at the vL1D peak, as if none of it overlapped its MFMAs:
        each of its workgroups writing its slot, then, as the last on every tile it shares, reading
        the others and storing the bf16 tile;
      * the hand-offs that can be the last thing their workgroup does (a workgroup with no whole
        tile left after its stream-K run): nothing runs after them, so they are charged as a
        separate reduction pass would be, the slots they read at the MALL rate and their bf16 tiles
        at the HBM rate.
    The tile tickets are zeroed by a memset before the pass (a separate launch: its bytes are added
    at the HBM rate)."""
    sch = schedule(m, n, k, kernel, workgroups, sk_workgroups)
    if sch.workgroups == 0:
        return split_bound(m, n, k, kernel, counts, 1, vgpr_total)
    kb = math.ceil(k / 128)
    bm, bn = kernel["block_m"], kernel["block_n"]
    slot, tile_out = 4 * bm * bn, 2 * bm * bn
    occ, w, resident, mfma, valu, lds = _pass_terms(kernel, counts, sch.grid, sch.steps, vgpr_total)
    c = sch.contributors
    is_shared = c > 1
    shared = bool(is_shared.any())
    written = int(c[is_shared].sum()) * slot
    read = int((c[is_shared] - 1).sum()) * slot
    # Per stream-K workgroup: the hand-off bytes of the shared tiles of its run.
    per_wg = max(0, int(sch.per_run(np.where(is_shared, c * slot + tile_out, 0)).max())) if sch.sk_workgroups else 0
    t0, t1 = sch.run_tile_first, sch.run_tile_last
    # Workgroups whose run ends with their last stream-K tile (no whole tile after it).
    ends_with_handoff = (sch.dp(np.arange(sch.sk_workgroups)) == 0) & (t1 - t0 + 1 <= 2)
    tail = [int(t) for t in np.unique(t1[ends_with_handoff]) if c[t] > 1]
    inputs, out = input_bytes(m, n, k), 2 * m * n
    if inputs + written <= MALL_BYTES:
        hbm, mall = inputs + out, inputs + written + read + out
    else:
        hbm = mall = inputs + written + read + out
    after = 0.0
    if shared:
        per_cu = w * per_wg / VL1D_BYTES_PER_CLK_PER_CU / CLOCK_HZ * 1e6
        tail_us = (sum(int(c[t] - 1) * slot for t in tail) / MALL_BYTES_PER_S
                   + len(tail) * tile_out / HBM_BYTES_PER_S) * 1e6
        after = max(per_cu, tail_us) + 4 * sch.sk_tiles / HBM_BYTES_PER_S * 1e6
    whole = sch.dp_tiles
    label = f"{sch.grid}: {sch.sk_tiles} stream-K tiles over {sch.sk_workgroups}"
    label += f", {whole} whole" if whole else ""
    if not sch.sk_tiles:
        label = f"{sch.grid}: {whole} whole"
    return Bound(m, n, k, kernel["name"], label, sch.grid, occ["wg_per_cu"], resident, mfma, valu, lds,
                 hbm / HBM_BYTES_PER_S * 1e6, mall / MALL_BYTES_PER_S * 1e6, after, "fix-up" if after else "",
                 sch.workgroups, sch.sk_workgroups)


@dataclass
class Honest:
    """One call under the honest model: every term in µs (see honest_bound)."""
    m: int
    n: int
    k: int
    kernel: str
    decomposition: str
    workgroups: int
    waves_per_simd: float     # resident on the busiest SIMD
    step_cycles: float        # one wave's K step alone: issue + exposed latencies (its critical path)
    mfma_us: float
    issue_us: float           # max(VALU port, scalar pipe, one wave's critical path / resident waves)
    lds_us: float
    l2_us: float
    hbm_us: float
    mall_us: float
    fixup_us: float           # the hand-off traffic of shared tiles (as the previous model)
    fence_us: float           # release write-backs, acquire invalidates and ticket atomics of the busiest CU
    dispatch_us: float        # one per launch (the ticket memset included)
    config_workgroups: int = 0
    config_sk_workgroups: int = 0

    @property
    def pass_us(self) -> float:
        return max(self.mfma_us, self.issue_us, self.lds_us, self.l2_us, self.hbm_us, self.mall_us)

    @property
    def bound_us(self) -> float:
        return self.pass_us + self.fixup_us + self.fence_us + self.dispatch_us

    @property
    def binding(self) -> str:
        terms = {"MFMA": self.mfma_us, "issue": self.issue_us, "LDS": self.lds_us, "L2": self.l2_us,
                 "HBM": self.hbm_us, "MALL": self.mall_us}
        return max(terms, key=terms.get)


def step_critical_path(c: StepCounts) -> float:
    """Cycles of one K step of one wave with no other wave to hide anything: every instruction's
    issue slot (4 cycles) and s_nop stalls, plus what it waits for in series: the first LDS fragment
    (or a scalar load in flight under the same lgkmcnt, whichever returns later), the last MFMA's
    result before the scale step, the two barriers, and the part of the global loads' latency that
    the step's own issue time does not cover (they are waited for at the end of the step)."""
    issue = c.instructions * ISSUE_CYCLES + c.nop_cycles
    first = max(LDS_LATENCY, SMEM_LATENCY if c.scalar_loads else 0)
    return issue + first + c.mfma_drain + 2 * BARRIER_LATENCY + max(0.0, VMEM_LATENCY - issue)


def honest_bound(m: int, n: int, k: int, kernel: dict, counts: StepCounts, workgroups: int, vgpr_total: int,
                 sk_workgroups: int = 0, fences: tuple = (0, 0, 0)) -> Honest:
    """The previous model's schedule and traffic, plus what it left out:
      * issue: per resident round of R waves on a SIMD, one K step each, the SIMD needs the larger of
        R x MFMA cycles, R x (VALU + MFMA) x 4 (one VALU-port issue each), R x SALU x 4 (the CU's
        scalar unit, one SIMD per cycle in turn) and one wave's critical path (step_critical_path:
        with R waves, the others' work fills its waits; with R = 1 nothing does);
      * L2: every operand byte the workgroups load (each K step of each workgroup its A and B tile
        rows and scales) from the XCDs' L2 at 128 channels x 128 B per clock;
      * fences: per hand-off of a shared tile, each buffer_wbl2 (release) and buffer_inv (acquire)
        and the ticket atomic, in series with the busiest CU's other work: a round trip to L2 each
        (VMEM_LATENCY), the write-back also moving the workgroup's slot;
      * dispatch: DISPATCH_US per launch (the GEMM, and the ticket memset where tiles are shared)."""
    sch = schedule(m, n, k, kernel, workgroups, sk_workgroups)
    old = shape_bound(m, n, k, kernel, counts, workgroups, vgpr_total, sk_workgroups)
    kb = math.ceil(k / 128)
    waves = kernel["threads"] // 64
    occ = rocm_asm.waves_per_simd(vgpr_total, kernel["lds_bytes"], kernel["threads"])
    grid, steps = sch.grid, sch.steps
    w = math.ceil(grid / NUM_CUS)
    simd_waves = math.ceil(w * waves / SIMDS_PER_CU)
    resident = max(1, min(int(occ["waves_per_simd"]), simd_waves))
    rounds = math.ceil(simd_waves / resident)
    to_us = 1e6 / CLOCK_HZ
    path = step_critical_path(counts)
    per_round = max(resident * counts.mfma_cycles, resident * (counts.valu + counts.mfma) * ISSUE_CYCLES,
                    resident * counts.salu * SALU_CYCLES, path)
    mfma = simd_waves * steps * counts.mfma_cycles * to_us
    issue = rounds * steps * per_round * to_us
    l2_bytes = sum_steps(sch, kb) * waves * counts.global_read_bytes
    l2 = l2_bytes / (L2_CHANNELS * L2_BYTES_PER_CLK_PER_CHANNEL * CLOCK_HZ) * 1e6
    shared = bool((sch.contributors > 1).any())
    fence = 0.0
    passes = 1
    if shared:
        passes = 2
        wbl2, inv, atomics = fences
        slot_wave = 4 * kernel["block_m"] * kernel["block_n"] // max(1, kernel["waves_m"] * kernel["waves_n"])
        per_handoff = (wbl2 * (VMEM_LATENCY + slot_wave / VL1D_BYTES_PER_CLK_PER_CU) + inv * VMEM_LATENCY
                       + atomics * 2 * VMEM_LATENCY)
        handoffs = int(sch.per_run(sch.contributors > 1).max())  # shared tiles of the busiest run
        fence = w * handoffs * per_handoff * to_us
    fixup = old.after_us - (4 * sch.sk_tiles / HBM_BYTES_PER_S * 1e6 if shared else 0.0)
    return Honest(m, n, k, kernel["name"], old.decomposition, grid, resident, path, mfma, issue, old.lds_us, l2,
                  old.hbm_us, old.mall_us, max(0.0, fixup), fence, passes * DISPATCH_US,
                  sch.workgroups, sch.sk_workgroups)


def sum_steps(sch: Schedule, kb: int) -> int:
    """K steps of all workgroups together (each loads its tiles' rows once per step)."""
    if sch.workgroups == 0:
        return sch.grid * kb
    return int((sch.run_end - sch.run_first).sum()) + sch.dp_tiles * kb


def hand_off_fences(asm_text: str) -> dict:
    """{GemmKernelId: (buffer_wbl2, buffer_inv, ticket atomics) per hand-off and wave}: the counts in
    the kernel divided by its two main loops (each layout has its own copy of the hand-off)."""
    out = {}
    for sym, blocks in function_blocks(asm_text).items():
        kid = rocm_asm.gemm_symbol_id(sym)
        if kid is None:
            continue
        lines = [l.split()[0] for b in blocks for l in b.lines]
        n = len(LOOPS)
        out[kid] = (lines.count("buffer_wbl2") / n, lines.count("buffer_inv") / n,
                    sum(1 for l in lines if l.startswith("global_atomic")) / n)
    return out


def honest_candidates(m: int, n: int, k: int, kernels: list[dict], counts: dict, vgprs: dict, fences: dict,
                      layout: str = "mn_major") -> list[Honest]:
    return [honest_bound(m, n, k, kd, counts[kd["id"]][layout], w, vgprs[kd["id"]], skw, fences[kd["id"]])
            for kd in kernels for w, skw in candidate_configs(m, n, k, kd, vgprs[kd["id"]])]


def _honest_tie_key(c: Honest):
    # Near ties: more resident waves (the model's latency terms are the least certain), then no
    # shared tiles, then one workgroup per tile, then fewer workgroups.
    return (-c.waves_per_simd, c.fence_us > 0, c.config_workgroups != 0, c.workgroups, c.bound_us)


def best_honest(m: int, n: int, k: int, kernels: list[dict], counts: dict, vgprs: dict, fences: dict) -> Honest:
    """The configuration with the lowest honest bound; within 1 %, the tie key above."""
    cands = honest_candidates(m, n, k, kernels, counts, vgprs, fences)
    best = min(c.bound_us for c in cands)
    return min((c for c in cands if c.bound_us <= best * 1.01), key=_honest_tie_key)


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def candidate_configs(m: int, n: int, k: int, kernel: dict, vgpr_total: int) -> list[tuple[int, int]]:
    """(workgroups, sk_workgroups) the tuning considers for one kernel: one workgroup per tile,
    split-K by 2..8 (tiles x s) and whole waves of the machine (304 x j, up to the workgroups one
    CU holds), each with its stream-K tiles dealt to all workgroups or to 1..8 per stream-K tile."""
    tiles = math.ceil(m / kernel["block_m"]) * math.ceil(n / kernel["block_n"])
    kb = math.ceil(k / 128)
    occ = rocm_asm.waves_per_simd(vgpr_total, kernel["lds_bytes"], kernel["threads"])
    out = []
    for w in [0] + [tiles * s for s in range(2, 9) if s <= kb] + [NUM_CUS * j for j in range(1, occ["wg_per_cu"] + 1)]:
        sk = (tiles % w if w < tiles else tiles) if w else 0
        for skw in [0] + [sk * s for s in range(1, 9)]:
            sch = schedule(m, n, k, kernel, w, skw)
            key = (sch.workgroups, sch.sk_workgroups if sch.sk_workgroups != sch.grid else 0)
            if key not in out:
                out.append(key)
    return out


# ---- baseline ------------------------------------------------------------------------------------

def load_baseline() -> dict:
    return json.loads(BASELINE_FILE.read_text())


def _baseline_inputs(baseline: dict):
    kernels = {kd["id"]: kd for kd in baseline["kernels"]}
    counts = {int(k): {lay: StepCounts(**c) for lay, c in v.items()} for k, v in baseline["loops"].items()}
    vgprs = {int(k): v for k, v in baseline["vgpr"].items()}
    fences = {int(k): tuple(v) for k, v in baseline["fences"].items()}
    return kernels, counts, vgprs, fences


def baseline_previous_bounds(baseline: dict) -> list[Bound]:
    """The previous model (MFMA/VALU/LDS/HBM/MALL + fix-up) on the kernels and dispatch this change
    replaced: the numbers the documentation gave before."""
    kernels, counts, vgprs, _ = _baseline_inputs(baseline)
    return [shape_bound(s["m"], s["n"], s["k"], kernels[s["kernel"]], counts[s["kernel"]]["mn_major"], s["workgroups"],
                        vgprs[s["kernel"]], s["sk_workgroups"]) for s in baseline["dispatch"]]


def baseline_honest_bounds(baseline: dict) -> list[Honest]:
    """The honest model on the kernels and dispatch this change replaced (its own baseline)."""
    kernels, counts, vgprs, fences = _baseline_inputs(baseline)
    return [honest_bound(s["m"], s["n"], s["k"], kernels[s["kernel"]], counts[s["kernel"]]["mn_major"], s["workgroups"],
                         vgprs[s["kernel"]], s["sk_workgroups"], fences[s["kernel"]]) for s in baseline["dispatch"]]


# ---- rendering -----------------------------------------------------------------------------------

def render_step_table(kernels: list[dict], counts: dict, vgprs: dict) -> str:
    out = ["| instantiation | loop | MFMA (cycles) | VALU (cycles) | LDS read B | LDS write B | dup. LDS reads "
           "| global read B | waits | barriers | branches (divergent) | VGPR |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for kd in kernels:
        for layout in ("k_major", "mn_major"):
            c = counts[kd["id"]][layout]
            out.append(
                f"| `{kd['name']}` | {layout.replace('_', '-')} | {c.mfma} ({c.mfma_cycles:g}) | {c.valu} ({c.valu_cycles}) "
                f"| {c.lds_read_bytes} | {c.lds_write_bytes} | {c.lds_duplicate_reads} | {c.global_read_bytes} "
                f"| {c.waits} | {c.barriers} | {c.uniform_branches + c.divergent_branches} ({c.divergent_branches}) "
                f"| {vgprs[kd['id']]} |")
    return "\n".join(out)


def render_step_change_table(kernels: list[dict], counts: dict, baseline: dict) -> str:
    """Per instantiation and loop, the replaced kernels' step (baseline file) -> the current one: the
    counts the issue and latency terms read."""
    _, before, _, _ = _baseline_inputs(baseline)
    out = ["| instantiation | loop | instructions | SALU | `s_mul` | scalar loads | VALU | step path (cycles) |",
           "|---|---|---|---|---|---|---|---|"]
    for kd in kernels:
        for layout in ("k_major", "mn_major"):
            c, o = counts[kd["id"]][layout], before[kd["id"]][layout]
            out.append(f"| `{kd['name']}` | {layout.replace('_', '-')} | {o.instructions} → {c.instructions} "
                       f"| {o.salu} → {c.salu} | {o.scalar_muls} → {c.scalar_muls} | {o.scalar_loads} → {c.scalar_loads} "
                       f"| {o.valu} → {c.valu} | {step_critical_path(o):.0f} → {step_critical_path(c):.0f} |")
    return "\n".join(out)


def render_bound_table(bounds: list[Honest], before: list[Honest], previous: list[Bound]) -> str:
    out = ["| M | N | K | instantiation | workgroups | resident waves/SIMD | step path (cycles) | MFMA µs | issue µs "
           "| LDS µs | L2 µs | HBM µs | MALL µs | fix-up µs | fences µs | dispatch µs | bound µs | binding "
           "| replaced kernels, this model µs (binding) | replaced kernels, previous model µs |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for b, o, p in zip(bounds, before, previous):
        out.append(
            f"| {b.m} | {b.n} | {b.k} | `{b.kernel}` | {b.decomposition} | {b.waves_per_simd:g} | {b.step_cycles:.0f} "
            f"| {b.mfma_us:.2f} | {b.issue_us:.2f} | {b.lds_us:.2f} | {b.l2_us:.2f} | {b.hbm_us:.2f} | {b.mall_us:.2f} "
            f"| {b.fixup_us:.2f} | {b.fence_us:.2f} | {b.dispatch_us:.2f} | **{b.bound_us:.2f}** | {b.binding} "
            f"| {o.bound_us:.2f} ({o.binding}) | {p.bound_us:.2f} |")
    g, g0, gp = (geomean(x.bound_us for x in xs) for xs in (bounds, before, previous))
    sol = geomean(rocm_asm.sol_us(b.m, b.n, b.k)[0] for b in bounds)
    out.append("")
    out.append(f"Geometric mean over the 18 shapes: **{g:.2f} µs** estimated, against {g0:.2f} µs for the replaced "
               f"kernels and dispatch under the same model ({100 * (1 - g / g0):.1f} % lower); the previous model "
               f"gave the replaced kernels {gp:.2f} µs; speed of light {sol:.2f} µs.")
    return "\n".join(out)


def model_tables(kernels: list[dict], counts: dict, vgprs: dict, fences: dict, selected: list[dict]) -> list[Honest]:
    """Honest bounds of the dispatched configurations."""
    by_id = {kd["id"]: kd for kd in kernels}
    return [honest_bound(s["m"], s["n"], s["k"], by_id[s["kernel"]], counts[s["kernel"]]["mn_major"], s["workgroups"],
                         vgprs[s["kernel"]], s["sk_workgroups"], fences[s["kernel"]]) for s in selected]


def current_model(work_dir: Path, std: str = "c++17"):
    """(kernels, loop counts, VGPRs, fences, honest bounds of the dispatched configs, launcher asm) of the
    current tree."""
    asm_files = rocm_asm.build_assembly(work_dir, std=std)
    text = asm_files["gemm_launcher"].read_text()
    asm = rocm_asm.parse_assembly(text)
    tool = rocm_asm.compile_dispatch_tool(work_dir)
    kernels = rocm_asm.kernel_table(tool)
    counts = main_loop_counts(text)
    vgprs = {rocm_asm.gemm_symbol_id(s): k.vgpr_total for s, k in asm.items() if rocm_asm.gemm_symbol_id(s) is not None}
    fences = hand_off_fences(text)
    bounds = model_tables(kernels, counts, vgprs, fences, rocm_asm.select(tool, rocm_asm.BENCHMARK_SHAPES))
    return kernels, counts, vgprs, fences, bounds, asm


def main() -> int:
    import tempfile

    if len(sys.argv) >= 2 and sys.argv[1] == "baseline":
        asm_path, select_path, kernels_path, commit = sys.argv[2:6]
        text = Path(asm_path).read_text()
        counts = main_loop_counts(text)
        asm = rocm_asm.parse_assembly(text)
        vgprs = {rocm_asm.gemm_symbol_id(s): k.vgpr_total for s, k in asm.items()
                 if rocm_asm.gemm_symbol_id(s) is not None}
        doc = {
            "source": f"gemm/gemm of commit {commit}, clang-19 -O3 -std=c++17 (ci/check_hip.sh), main loops counted "
                      "by rocm_cost.main_loop_counts, hand-off fences by rocm_cost.hand_off_fences",
            "kernels": json.loads(Path(kernels_path).read_text()),
            "vgpr": {str(k): v for k, v in sorted(vgprs.items())},
            "fences": {str(k): list(v) for k, v in sorted(hand_off_fences(text).items())},
            "loops": {str(k): {lay: {f: v for f, v in asdict(c).items()} for lay, c in sorted(v.items())}
                      for k, v in sorted(counts.items())},
            "dispatch": [json.loads(line) for line in Path(select_path).read_text().splitlines() if line.strip()],
        }
        print(json.dumps(doc, indent=1))
        return 0
    missing = rocm_asm.hip_toolchain_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        kernels, counts, vgprs, fences, bounds, asm = current_model(Path(d))
    base = load_baseline()
    resources = rocm_asm.render_resource_table(rocm_asm.resource_rows(kernels, asm))
    print("<!-- BEGIN rocm_resources -->\n" + resources + "\n<!-- END rocm_resources -->\n")
    print("<!-- BEGIN rocm_step_costs -->\n" + render_step_table(kernels, counts, vgprs) + "\n<!-- END rocm_step_costs -->\n")
    print("<!-- BEGIN rocm_step_changes -->\n" + render_step_change_table(kernels, counts, base)
          + "\n<!-- END rocm_step_changes -->\n")
    print("<!-- BEGIN rocm_bounds -->\n" + render_bound_table(bounds, baseline_honest_bounds(base), baseline_previous_bounds(base))
          + "\n<!-- END rocm_bounds -->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
