"""gemm's sm_90a sources compile with nvcc as kernel-builder compiles them (staged source set, the section's
include roots, defines and C++ standard, the CUTLASS release build.toml depends on), every kernel variant
issues warpgroup MMA (wgmma.mma_async) fed by TMA, and ptxas neither serialises the hand-written (tile and
decode) kernels' wgmmas (C7514) nor spills them or the launcher's own kernels (gemm_cuda.cu: the preparation pass):
ci/check_cuda.sh, run here so CI counts it as a test. In CI (CI_REQUIRE_NVCC=1) a missing nvcc fails."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))


def test_gemm_cuda_sources_compile_to_wgmma(nvcc):
    from kbuild.config import load_config
    from kbuild.rules import section_of

    result = subprocess.run(["bash", str(ROOT / "ci" / "check_cuda.sh")], capture_output=True, text=True, timeout=1500,
                            env=dict(os.environ, PYTHON=sys.executable))
    print(result.stdout[-4000:], result.stderr[-4000:])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "FAIL" not in result.stdout
    units = [Path(s).stem for s in section_of(load_config(ROOT / "gemm"), "gemm_cuda").compiled_sources]
    lines = result.stdout.splitlines()
    for unit in units:
        assert any(line.startswith(f"ok   {unit}: ") for line in lines), f"{unit} not checked"
        if unit.startswith("sm90_tile") or unit in ("sm90_decode", "gemm_cuda", "act_quant_cuda"):
            assert any(line.startswith(f"ok   {unit} (ptxas)") for line in lines), f"{unit} not checked by ptxas"
