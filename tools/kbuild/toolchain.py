"""Compilers the repository's compile checks use, installed from PyPI into the kbuild cache.

nvcc for the sm_90a checks: CUDA 13.0 (the H200 runs torch's cu130 build; :data:`NVCC_VERSION`) and CUDA 13.2,
the toolkits of kernel-builder's CUDA 13.x variants. NVIDIA's ``nvidia-cuda-*`` wheels carry nvcc, ptxas,
cicc (nvvm), the CUDA runtime and driver API headers (``cuda_runtime.h``, ``cuda.h``, ``cudaTypedefs.h``,
``cuda_fp16.h``, ...) and CCCL. ``pip install --target`` puts them in ``<cache>/cuda-<nvcc version>/``;
``nvidia/cu13/bin/nvcc`` there finds everything relative to itself. CUDA 12.x has no nvcc on PyPI: its
``nvidia-cuda-nvcc-cu12`` wheels (12.6.20 to 12.9.86) hold ptxas, the crt headers and libnvvm only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .cutlass import cache_dir

# CUDA release -> (nvcc version, the wheels that make a toolkit nvcc compiles with).
CUDA_TOOLKITS = {
    "13.0": ("13.0.88", (
        "nvidia-cuda-nvcc==13.0.88",  # nvcc, ptxas, fatbinary, nvlink
        "nvidia-cuda-crt==13.0.88",  # crt/ headers nvcc's front end needs
        "nvidia-nvvm==13.0.88",  # cicc, libnvvm, libdevice
        "nvidia-cuda-runtime==13.0.96",  # cuda_runtime.h, cuda.h, cudaTypedefs.h, cuda_fp16.h, ...
        "nvidia-cuda-cccl==13.0.85",  # cub, thrust, libcu++ (include/cccl)
    )),
    "13.2": ("13.2.86", (
        "nvidia-cuda-nvcc==13.2.86",
        "nvidia-cuda-crt==13.2.86",
        "nvidia-nvvm==13.2.86",
        "nvidia-cuda-runtime==13.2.86",
        "nvidia-cuda-cccl==13.2.86",
    )),
}
DEFAULT_CUDA = "13.0"
NVCC_VERSION, CUDA_WHEELS = CUDA_TOOLKITS[DEFAULT_CUDA]


def cuda_root(cuda: str = DEFAULT_CUDA) -> Path:
    return cache_dir() / f"cuda-{CUDA_TOOLKITS[cuda][0]}"


def cached_nvcc(cuda: str = DEFAULT_CUDA) -> Path:
    return cuda_root(cuda) / "nvidia" / "cu13" / "bin" / "nvcc"


def install_cuda(log=print, cuda: str = DEFAULT_CUDA) -> Path:
    """Install one CUDA release's compiler wheels into the cache (nothing if already there); returns nvcc."""
    if cuda not in CUDA_TOOLKITS:
        raise ValueError(f"no PyPI nvcc for CUDA {cuda}: kbuild installs {', '.join(CUDA_TOOLKITS)}")
    version, wheels = CUDA_TOOLKITS[cuda]
    root, nvcc = cuda_root(cuda), cached_nvcc(cuda)

    def check():
        text = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
        if f"V{version}" not in text:
            raise RuntimeError(f"{nvcc} reports {text.strip()!r}, expected V{version}")

    if install_wheels(root, wheels, f"nvcc {version}", log, present=nvcc.is_file, check=check):
        log(f"nvcc {version}: installed in {root}")
    return nvcc


def install_wheels(root: Path, wheels, what: str, log=print, present=lambda: True, check=lambda: None) -> bool:
    """``pip install --target root`` the pinned wheels unless root's marker lists them already (and ``present()``);
    ``check()`` runs before the marker is written. True when it installed them now."""
    marker = root / ".installed"
    if marker.is_file() and marker.read_text().split() == list(wheels) and present():
        log(f"{what}: cached in {root}")
        return False
    shutil.rmtree(root, ignore_errors=True)
    log(f"{what}: pip install --target {root} " + " ".join(wheels))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:",
                    "--target", str(root), *wheels], check=True)
    check()
    marker.write_text("\n".join(wheels) + "\n")
    return True


def find_nvcc() -> str | None:
    """``$NVCC``, else the cached PyPI nvcc (what CI installs), else nvcc on PATH or in /usr/local/cuda."""
    env = os.environ.get("NVCC")
    if env:
        return env
    if cached_nvcc().is_file():
        return str(cached_nvcc())
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() else None
