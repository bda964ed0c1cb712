"""Which backend a build targets, and kernel-builder's names for it."""

from __future__ import annotations

import os
import shutil

BACKENDS = ("cpu", "cuda", "rocm")


def _nvcc_available() -> bool:
    from torch.utils.cpp_extension import CUDA_HOME

    return CUDA_HOME is not None and (
        shutil.which("nvcc") is not None or os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))
    )


def detect_backend() -> str:
    """The backend matching the installed torch, as kernel-builder's get_gpu_lang does.

    ``KBUILD_BACKEND=cpu|cuda|rocm`` overrides (e.g. a CPU-only build on a CUDA torch).
    A CUDA torch without nvcc builds the CPU backend rather than failing half-way.
    """
    forced = os.environ.get("KBUILD_BACKEND")
    if forced:
        if forced not in BACKENDS:
            raise ValueError(f"KBUILD_BACKEND must be one of {BACKENDS}, got {forced!r}")
        return forced
    import torch

    if torch.version.hip:
        return "rocm"
    if torch.version.cuda and _nvcc_available():
        return "cuda"
    return "cpu"


def backend_tag(backend: str) -> str:
    """``cpu`` / ``cu130`` / ``rocm71``: the backend part of a variant name."""
    import torch

    if backend == "cpu":
        return "cpu"
    if backend == "cuda":
        major, minor = torch.version.cuda.split(".")[:2]
        return f"cu{major}{minor}"
    if backend == "rocm":
        major, minor = torch.version.hip.split(".")[:2]
        return f"rocm{major}{minor}"
    raise ValueError(f"unknown backend {backend!r}")


def variant_name(backend: str) -> str:
    """kernel-builder's build variant for the installed torch, e.g. ``torch213-cxx11-cpu-x86_64-linux``."""
    import platform

    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    abi = "cxx11" if torch.compiled_with_cxx11_abi() else "cxx98"
    arch = platform.machine()
    return f"torch{major}{minor}-{abi}-{backend_tag(backend)}-{arch}-linux"
