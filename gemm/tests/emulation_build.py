"""Building the gfx942 emulation drivers (tests/emulation/*_driver.cpp) with the host compiler: the kernel bodies
compiled for the CPU SIMT emulator (-DFP8GEMM_SIMT_EMULATION), the kernel's include roots, warnings as errors."""
import os
import subprocess
import sys

import pytest

from host_cxx import host_cxx

GEMM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMU_DIR = os.path.join(GEMM_DIR, "tests", "emulation")
CXXFLAGS = ["-std=c++20", "-O2", "-g0", "-Wall", "-Wextra", "-Werror", "-Wno-psabi", "-Wno-unknown-pragmas",
            "-DFP8GEMM_SIMT_EMULATION", "-pthread"]
CXX = host_cxx()
SKIP_WITHOUT_HOST_COMPILER = [
    pytest.mark.skipif(CXX is None, reason="no C++ compiler"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the SIMT emulator needs Linux"),
]


def build_driver(out_dir, name, timeout):
    """Compiles tests/emulation/<name>.cpp into out_dir and returns the executable's path."""
    out = str(out_dir / name)
    cmd = [CXX, *CXXFLAGS, f"-I{os.path.join(GEMM_DIR, 'gemm')}", f"-I{EMU_DIR}", f"-I{os.path.join(GEMM_DIR, 'include')}",
           os.path.join(EMU_DIR, f"{name}.cpp"), "-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"compile failed:\n{' '.join(cmd)}\n{r.stderr[-6000:]}"
    return out
