"""Compilers the repository's compile checks use, installed from PyPI into the kbuild cache.

nvcc for the sm_90a checks is CUDA 13.0 (the H200 runs torch's cu130 build): NVIDIA's ``nvidia-cuda-*``
wheels carry nvcc, ptxas, cicc (nvvm), the CUDA runtime and driver API headers (``cuda_runtime.h``,
``cuda.h``, ``cudaTypedefs.h``, ``cuda_fp16.h``, ...) and CCCL. ``pip install --target`` puts them in
``<cache>/cuda-<nvcc version>/``; ``nvidia/cu13/bin/nvcc`` there finds everything relative to itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .cutlass import cache_dir

NVCC_VERSION = "13.0.88"
CUDA_WHEELS = (
    f"nvidia-cuda-nvcc=={NVCC_VERSION}",  # nvcc, ptxas, fatbinary, nvlink
    f"nvidia-cuda-crt=={NVCC_VERSION}",  # crt/ headers nvcc's front end needs
    f"nvidia-nvvm=={NVCC_VERSION}",  # cicc, libnvvm, libdevice
    "nvidia-cuda-runtime==13.0.96",  # cuda_runtime.h, cuda.h, cudaTypedefs.h, cuda_fp16.h, ...
    "nvidia-cuda-cccl==13.0.85",  # cub, thrust, libcu++ (include/cccl)
)


def cuda_root() -> Path:
    return cache_dir() / f"cuda-{NVCC_VERSION}"


def cached_nvcc() -> Path:
    return cuda_root() / "nvidia" / "cu13" / "bin" / "nvcc"


def install_cuda(log=print) -> Path:
    """Install the pinned CUDA compiler wheels into the cache (nothing if already there); returns nvcc."""
    root = cuda_root()
    marker = root / ".installed"
    if marker.is_file() and marker.read_text().split() == list(CUDA_WHEELS) and cached_nvcc().is_file():
        log(f"nvcc {NVCC_VERSION}: cached in {root}")
        return cached_nvcc()
    shutil.rmtree(root, ignore_errors=True)
    log(f"nvcc {NVCC_VERSION}: pip install --target {root} " + " ".join(CUDA_WHEELS))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:",
                    "--target", str(root), *CUDA_WHEELS], check=True)
    version = subprocess.run([str(cached_nvcc()), "--version"], capture_output=True, text=True, check=True).stdout
    if f"V{NVCC_VERSION}" not in version:
        raise RuntimeError(f"{cached_nvcc()} reports {version.strip()!r}, expected V{NVCC_VERSION}")
    marker.write_text("\n".join(CUDA_WHEELS) + "\n")
    log(f"nvcc {NVCC_VERSION}: installed in {root}")
    return cached_nvcc()


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
