"""Helpers for the gfx942 ISA checks: build the HIP sources with ci/check_hip.sh, parse the AMDGPU
assembly and its metadata, compute occupancy and MI300X speed-of-light numbers, and render the
resource table committed in gemm/docs/rocm_gfx942.md (rocm_cost.py prints it with the cost tables).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
KERNEL_DIR = TESTS_DIR.parent
REPO_DIR = KERNEL_DIR.parent
CHECK_HIP = REPO_DIR / "ci" / "check_hip.sh"
DISPATCH_CHECK_SRC = TESTS_DIR / "rocm_dispatch_check.cpp"
DOC = KERNEL_DIR / "docs" / "rocm_gfx942.md"

# MI300X (gfx942) facts used for occupancy and speed of light.
NUM_CUS = 304
SIMDS_PER_CU = 4
VGPRS_PER_SIMD_LANE = 512  # arch VGPRs + AGPRs, unified file
VGPR_GRANULE = 8
MAX_WAVES_PER_SIMD = 8
LDS_PER_CU = 65536
PEAK_FP8_FLOPS = 2.615e15  # dense FP8, rounded as in the challenge's published speed-of-light values
HBM_BYTES_PER_S = 5.3e12

# The 18 timed shapes of the AMD challenge (gemm_shapes.json "benchmarks").
BENCHMARK_SHAPES = [
    (m, n, k)
    for m in (1024, 6144)
    for (n, k) in (
        (1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048),
        (4608, 7168), (7168, 2304), (512, 7168), (4096, 512),
    )
]

MFMA_RE = re.compile(r"^\s+(v_mfma_\S+)")
INSTR_RE = re.compile(r"^\s+([a-z_][a-z0-9_]*)\b")


@dataclass
class KernelAsm:
    symbol: str
    meta: dict = field(default_factory=dict)
    instructions: dict = field(default_factory=dict)  # mnemonic -> count
    meta_text: str = ""  # its amdhsa.kernels metadata entry (lists such as .args included)

    def count(self, prefix: str) -> int:
        return sum(c for mnem, c in self.instructions.items() if mnem.startswith(prefix))

    @property
    def vgpr_total(self) -> int:
        # .vgpr_count is the unified (arch + acc) allocation on gfx90a/gfx942.
        return int(self.meta[".vgpr_count"])


def hip_toolchain_missing() -> str | None:
    for tool in ("clang++-19", "llvm-dis-19", "llvm-as-19"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install clang-19 lld-19 llvm-19)"
    if not Path("/usr/include/hip/hip_runtime.h").exists():
        return "HIP headers missing (apt-get install libamdhip64-dev)"
    return None


def build_assembly(out_dir: Path, std: str = "c++17") -> dict[str, Path]:
    """Runs ci/check_hip.sh with the C++ standard `std`; returns {translation unit name: assembly path}."""
    proc = subprocess.run(["bash", str(CHECK_HIP), str(out_dir)], capture_output=True, text=True,
                          env={**os.environ, "HIP_STD": std})
    if proc.returncode != 0:
        raise RuntimeError(f"ci/check_hip.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return {p.name[: -len(".gfx942.s")]: p for p in sorted(out_dir.glob("*.gfx942.s"))}


def parse_assembly(text: str) -> dict[str, KernelAsm]:
    kernels: dict[str, KernelAsm] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_.$][\w.$]*):", line)
        if m and not m.group(1).startswith("."):
            current = kernels.setdefault(m.group(1), KernelAsm(m.group(1)))
            continue
        if current is not None and line.startswith(".Lfunc_end"):
            current = None
            continue
        if current is not None:
            im = INSTR_RE.match(line)
            if im and not line.lstrip().startswith("."):
                current.instructions[im.group(1)] = current.instructions.get(im.group(1), 0) + 1
    # Metadata: one YAML list entry per kernel; flat scalar keys are all we need.
    meta_block = text.split(".amdgpu_metadata", 1)[1].split(".end_amdgpu_metadata", 1)[0]
    for entry in re.split(r"\n  - ", meta_block)[1:]:
        fields = dict(re.findall(r"^\s*(\.[a-z_]+):\s+(\S+)\s*$", "  " + entry, flags=re.M))
        name = fields.get(".name")
        if name in kernels:
            kernels[name].meta = fields
            kernels[name].meta_text = entry
    # The kernel descriptors: .amdhsa_next_free_sgpr is the addressable SGPR count (.sgpr_count adds
    # VCC, FLAT_SCRATCH and XNACK_MASK).
    for name, body in re.findall(r"\.amdhsa_kernel (\S+)\n(.*?)\.end_amdhsa_kernel", text, flags=re.S):
        m = re.search(r"\.amdhsa_next_free_sgpr (\d+)", body)
        if name in kernels and m:
            kernels[name].meta[".amdhsa_next_free_sgpr"] = m.group(1)
    # Only kernels (entries of amdhsa.kernels); other labels are data such as __hip_cuid_*.
    return {name: k for name, k in kernels.items() if k.meta}


def compile_dispatch_tool(out_dir: Path) -> Path:
    exe = out_dir / "rocm_dispatch_check"
    cxx = os.environ.get("CXX_HOST", "g++")
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{KERNEL_DIR / 'include'}",
           f"-I{KERNEL_DIR / 'gemm'}", str(DISPATCH_CHECK_SRC), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


def kernel_table(tool: Path) -> list[dict]:
    return json.loads(subprocess.run([str(tool), "kernels"], check=True, capture_output=True, text=True).stdout)


def select(tool: Path, shapes) -> list[dict]:
    args = [str(x) for s in shapes for x in s]
    out = subprocess.run([str(tool), "select", *args], check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def gemm_symbol_id(symbol: str) -> int | None:
    """gemm_kernel<GemmKernelId(N)> mangles as ...gemm_kernelILNS0_12GemmKernelIdEN..."""
    m = re.search(r"gemm_kernelILNS0_12GemmKernelIdE(\d+)E", symbol)
    return int(m.group(1)) if m else None


def act_quant_symbol_dtype(symbol: str) -> int | None:
    """act_quant_kernel<ActDtype(N)> mangles as ...act_quant_kernelILNS_8ActDtypeEN..."""
    m = re.search(r"act_quant_kernelILNS_8ActDtypeE(\d)E", symbol)
    return int(m.group(1)) if m else None


def waves_per_simd(vgpr_total: int, lds_bytes: int, threads: int) -> dict:
    waves_per_wg = threads // 64
    alloc = math.ceil(max(vgpr_total, 1) / VGPR_GRANULE) * VGPR_GRANULE
    by_vgpr = min(MAX_WAVES_PER_SIMD, VGPRS_PER_SIMD_LANE // alloc)
    wg_per_cu_lds = LDS_PER_CU // lds_bytes if lds_bytes else 10**6
    by_lds = wg_per_cu_lds * waves_per_wg / SIMDS_PER_CU
    # Whole workgroups only: a workgroup's waves are spread over the 4 SIMDs.
    wg_per_cu_vgpr = (by_vgpr * SIMDS_PER_CU) // waves_per_wg
    wg_per_cu = min(wg_per_cu_lds, wg_per_cu_vgpr)
    return {
        "by_vgpr": by_vgpr,
        "by_lds": by_lds,
        "wg_per_cu": wg_per_cu,
        "waves_per_simd": wg_per_cu * waves_per_wg / SIMDS_PER_CU,
    }


def vgpr_budget(threads: int) -> int:
    """Per-lane VGPR+AGPR limit for a workgroup of `threads` to be resident at all."""
    waves_per_simd_needed = math.ceil(threads / 64 / SIMDS_PER_CU)
    return VGPRS_PER_SIMD_LANE // waves_per_simd_needed


def sol_us(m: int, n: int, k: int) -> tuple[float, str]:
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    flops = 2.0 * m * n * k
    bytes_ = m * k + n * k + 4 * m * kb + 4 * nb * kb + 2 * m * n
    t_compute, t_memory = flops / PEAK_FP8_FLOPS, bytes_ / HBM_BYTES_PER_S
    return max(t_compute, t_memory) * 1e6, ("compute" if t_compute >= t_memory else "memory")


def resource_rows(kernels: list[dict], asm: dict[str, KernelAsm]) -> list[dict]:
    by_id = {gemm_symbol_id(s): k for s, k in asm.items() if gemm_symbol_id(s) is not None}
    rows = []
    for kd in kernels:
        ka = by_id[kd["id"]]
        occ = waves_per_simd(ka.vgpr_total, kd["lds_bytes"] + int(ka.meta[".group_segment_fixed_size"]), kd["threads"])
        mfma = [m for m in ka.instructions if m.startswith("v_mfma")]
        per_step = mfma_per_step(kd)
        rows.append({
            **kd,
            "symbol": ka.symbol,
            "mfma_instr": ",".join(sorted(mfma)),
            "mfma_count": ka.count("v_mfma"),
            "mfma_per_step": per_step,
            "vgpr": int(ka.meta[".vgpr_count"]),
            "agpr": int(ka.meta[".agpr_count"]),
            "sgpr": int(ka.meta[".sgpr_count"]),
            "scratch": int(ka.meta[".private_segment_fixed_size"]),
            "vgpr_spill": int(ka.meta[".vgpr_spill_count"]),
            "sgpr_spill": int(ka.meta[".sgpr_spill_count"]),
            "lds_total": kd["lds_bytes"] + int(ka.meta[".group_segment_fixed_size"]),
            "waves_per_simd_target": kd["waves_per_simd"],
            **occ,
        })
    return rows


def mfma_per_step(kd: dict) -> int:
    """MFMAs one wave issues per 128-wide K step: its sub-tiles times the K steps of its K share."""
    k_per_mfma = 16 if kd["mfma"] == 32 else 32
    tiles = (kd["block_m"] // kd["waves_m"] // kd["mfma"]) * (kd["block_n"] // kd["waves_n"] // kd["mfma"])
    return tiles * (128 // kd["waves_k"] // k_per_mfma)


def render_resource_table(rows: list[dict]) -> str:
    out = ["| instantiation | tile (M×N×K) | waves (M×N×K) | fp8 MFMA | per 128-K step per wave (in ISA) "
           "| VGPR total (AGPR) | SGPR | LDS bytes | scratch / spills | WG per CU | waves per SIMD (target) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| `{r['name']}` | {r['block_m']}×{r['block_n']}×128 | {r['waves_m']}×{r['waves_n']}×{r['waves_k']} "
            f"| `{r['mfma_instr']}` | {r['mfma_per_step']} ({r['mfma_count']}) | {r['vgpr']} ({r['agpr']}) "
            f"| {r['sgpr']} | {r['lds_total']} | {r['scratch']} / {r['vgpr_spill'] + r['sgpr_spill']} "
            f"| {r['wg_per_cu']} | {r['waves_per_simd']:g} ({r['waves_per_simd_target']}) |")
    return "\n".join(out)


def doc_block(name: str) -> str:
    text = DOC.read_text()
    m = re.search(rf"<!-- BEGIN {name} -->\n(.*?)\n<!-- END {name} -->", text, flags=re.S)
    if not m:
        raise KeyError(f"{DOC} has no generated block {name}")
    return m.group(1).strip()


# ---- instruction order checks on the compiled kernels --------------------------------------------

def _function_instructions(text: str) -> dict[str, list[tuple[str, list[str], str]]]:
    """{symbol: [(mnemonic, operand names, line) or ("label", [], name)]} in assembly order."""
    funcs: dict[str, list] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^(_Z\w+):", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        if cur is None:
            continue
        if line.startswith(".Lfunc_end"):
            cur = None
            continue
        if re.match(r"^(\.LBB\d+_\d+|; %bb\.\d+):", line):
            cur.append(("label", [], line.split(":")[0]))
            continue
        s = line.strip()
        if not s or s.startswith((";", ".")) or not re.match(r"[a-z_]", s):
            continue
        ins = s.split(";")[0].strip()
        parts = ins.split(None, 1)
        ops = [o.strip().split()[0] for o in parts[1].split(",") if o.strip()] if len(parts) > 1 else []
        cur.append((parts[0], ops, ins))
    return funcs


def handoff_order_problems(text: str) -> dict[str, list[str]]:
    """Per GEMM kernel, what is out of order in each stream-K hand-off (empty lists: none). For every
    ticket atomic: the wave's last partial-slot store before the barrier that precedes the atomic is
    followed by the release write-back (buffer_wbl2) and then an s_waitcnt vmcnt(0), both before
    that barrier (so every wave's slot is visible at agent scope before any ticket is taken); after
    the atomic, the last barrier before the first slot load is followed by the acquire invalidate
    (buffer_inv) before that load."""
    out = {}
    for sym, ins in _function_instructions(text).items():
        if gemm_symbol_id(sym) is None:
            continue
        problems = []
        mn = [i[0] for i in ins]
        atomics = [i for i, m in enumerate(mn) if m.startswith("global_atomic")]
        if not atomics:
            problems.append("no ticket atomic")
        for a in atomics:
            bar = max((i for i in range(a) if mn[i] == "s_barrier"), default=None)
            store = max((i for i in range(bar or 0) if mn[i] == "global_store_dwordx4"), default=None)
            if bar is None or store is None:
                problems.append(f"atomic at {a}: no slot store and barrier before it")
                continue
            wb = next((i for i in range(store + 1, bar) if mn[i] == "buffer_wbl2"), None)
            if wb is None:
                problems.append(f"atomic at {a}: no buffer_wbl2 between the slot stores and the barrier")
                continue
            if not any(mn[i] == "s_waitcnt" and "vmcnt(0)" in ins[i][2] for i in range(wb + 1, bar)):
                problems.append(f"atomic at {a}: no s_waitcnt vmcnt(0) after the release write-back before the barrier")
            load = next((i for i in range(a + 1, len(mn)) if mn[i] == "global_load_dwordx4"), None)
            if load is None:
                problems.append(f"atomic at {a}: no slot load after it")
                continue
            bar2 = max((i for i in range(a, load) if mn[i] == "s_barrier"), default=a)
            if not any(mn[i] == "buffer_inv" for i in range(bar2 + 1, load)):
                problems.append(f"atomic at {a}: no buffer_inv between the last barrier and the first slot load")
        out[sym] = problems
    return out


# Wait states between an XDL MFMA and the first VALU instruction reading its result on gfx942, as
# LLVM's hazard recognizer inserts them (its pass counts 8 and 4 for these instructions, + 3).
MFMA_VALU_READ_WAIT_STATES = {"v_mfma_f32_32x32x16_fp8_fp8": 11, "v_mfma_f32_16x16x32_fp8_fp8": 7}


def _regs(op: str) -> set:
    m = re.fullmatch(r"([va])(\d+)", op)
    if m:
        return {(m.group(1), int(m.group(2)))}
    m = re.fullmatch(r"([va])\[(\d+):(\d+)\]", op)
    return {(m.group(1), i) for i in range(int(m.group(2)), int(m.group(3)) + 1)} if m else set()


def mfma_valu_gaps(text: str) -> list[tuple[str, str, int, int, str]]:
    """[(symbol, MFMA, wait states, required, reading line)]: for every fp8 MFMA, the first VALU
    instruction of the same basic block that reads its result, and the wait states before it (an
    s_nop N counts N + 1, any other instruction 1)."""
    out = []
    for sym, ins in _function_instructions(text).items():
        block: list = []
        blocks = [block]
        for i in ins:
            if i[0] == "label":
                block = []
                blocks.append(block)
                continue
            block.append(i)
            if i[0].startswith(("s_cbranch", "s_branch")):
                block = []
                blocks.append(block)
        for bl in blocks:
            for j, (mnem, ops, _) in enumerate(bl):
                if mnem not in MFMA_VALU_READ_WAIT_STATES:
                    continue
                dst, ws = _regs(ops[0]), 0
                for mnem2, ops2, line2 in bl[j + 1:]:
                    if mnem2.startswith("v_") and not mnem2.startswith("v_mfma") and any(_regs(o) & dst for o in ops2[1:]):
                        out.append((sym, mnem, ws, MFMA_VALU_READ_WAIT_STATES[mnem], line2))
                        break
                    if mnem2.startswith("v_") and ops2 and _regs(ops2[0]) & dst:
                        break
                    m = re.match(r"s_nop\s+(\d+)", line2)
                    ws += int(m.group(1)) + 1 if m else 1
    return out
