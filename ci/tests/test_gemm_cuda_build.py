"""gemm's CUDA translation units compile to objects (nvcc's device pass and its host pass with the host compiler,
Debian 12's g++ 12 in CI) as kernel-builder compiles them (staged source set, the section's include roots,
defines, C++ standard and capabilities for the toolkit, CUTLASS as a system include of the release build.toml
depends on), with every CUDA toolkit of kernel-builder's matrix that PyPI has an nvcc for (13.0, 13.2; none for
12.6); every kernel variant issues warpgroup MMA (wgmma.mma_async) fed by TMA, and ptxas neither serialises the
hand-written (tile and decode) kernels' wgmmas (C7514) nor spills them or the launcher's own kernels
(gemm_cuda.cu: the preparation pass): ci/check_cuda.sh, run here so CI counts it as a test. In CI
(CI_REQUIRE_NVCC=1) a missing nvcc fails."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from kbuild.toolchain import CUDA_TOOLKITS, DEFAULT_CUDA, cached_nvcc  # noqa: E402


@pytest.mark.parametrize("cuda", list(CUDA_TOOLKITS))
def test_gemm_cuda_units_compile_to_objects_with_wgmma(cuda, nvcc):
    from kbuild.config import load_config
    from kbuild.rules import section_of

    if cuda == DEFAULT_CUDA:
        path = nvcc  # $NVCC, else the cached 13.0 (the conftest's fixture)
    else:
        path = cached_nvcc(cuda)
        if not path.is_file():
            if os.environ.get("CI_REQUIRE_NVCC") == "1":
                pytest.fail(f"CI_REQUIRE_NVCC=1 but CUDA {cuda}'s nvcc is not installed (ci/setup.sh installs it)")
            pytest.skip(f"CUDA {cuda}'s nvcc not installed (tools/kbuild install-nvcc --cuda {cuda})")
    result = subprocess.run(["bash", str(ROOT / "ci" / "check_cuda.sh")], capture_output=True, text=True, timeout=2400,
                            env=dict(os.environ, PYTHON=sys.executable, NVCC=str(path)))
    print(result.stdout[-6000:], result.stderr[-4000:])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "FAIL" not in result.stdout
    lines = result.stdout.splitlines()
    if "NVCC" not in os.environ or cuda != DEFAULT_CUDA:
        assert any(line.startswith("check_cuda: ") and f"cuda_{cuda}." in line for line in lines), lines[:2]
    flag_lines = [line for line in lines if line.startswith("check_cuda: flags:")]
    assert flag_lines and all(f in flag_lines[0].split() for f in ("-c", "-isystem", "-gencode=arch=compute_90a,code=sm_90a"))
    units = [Path(s).stem for s in section_of(load_config(ROOT / "gemm"), "gemm_cuda").compiled_sources]
    for unit in units:
        assert any(line.startswith(f"ok   {unit}: object") for line in lines), f"{unit} not compiled to an object"
        if unit.startswith("sm90_tile") or unit in ("sm90_decode", "gemm_cuda", "act_quant_cuda"):
            assert any(line.startswith(f"ok   {unit} (ptxas)") for line in lines), f"{unit} not checked by ptxas"
