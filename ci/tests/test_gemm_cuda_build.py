"""gemm's sm_90a sources compile with nvcc, every kernel variant issues warpgroup MMA (wgmma.mma_async)
fed by TMA, and ptxas neither serialises the hand-written kernels' wgmmas (C7514) nor spills them or the
launcher's own kernels (gemm_cuda.cu: the preparation pass):
ci/check_cuda.sh, run here so CI counts it as a test."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_gemm_cuda_sources_compile_to_wgmma():
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("nvcc not installed")
    result = subprocess.run(["bash", str(ROOT / "ci" / "check_cuda.sh")], capture_output=True, text=True, timeout=1500)
    print(result.stdout[-4000:], result.stderr[-4000:])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "FAIL" not in result.stdout
    variants = [line for line in result.stdout.splitlines() if line.startswith("ok   sm90_") and "(ptxas)" not in line]
    assert len(variants) == len(list((ROOT / "gemm" / "gemm_cuda").glob("sm90_*.cu")))
    hand = [line for line in result.stdout.splitlines() if line.startswith("ok   sm90_hand") and "(ptxas)" in line]
    assert len(hand) == len(list((ROOT / "gemm" / "gemm_cuda").glob("sm90_hand*.cu")))
    assert any(line.startswith("ok   gemm_cuda (ptxas)") for line in result.stdout.splitlines())
