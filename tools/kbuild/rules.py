"""kernel-builder's compile rules (huggingface/kernels at the revision flake.lock pins), as data.

* include roots: ``<kernel>/csrc`` for every compiled file, plus the ``include`` list of the source's own
  section (``[torch]`` for the binding, ``[kernel.<name>]`` for kernel sources), relative to the kernel
  dir; a quoted include also searches the including file's folder. The kernel dir itself is no root.
* defines: ``TORCH_EXTENSION_NAME=<ops name>`` everywhere; ``CPU_KERNEL``, or ``CUDA_KERNEL`` +
  ``USE_CUDA=1``, or ``ROCM_KERNEL`` + ``USE_ROCM=1`` by backend; Release builds (``-O3 -DNDEBUG``).
* C++ standard: 17 with torch < 2.12, 20 from torch 2.12 on, host and device code alike.
* CUDA sources get torch's ``COMMON_NVCC_FLAGS`` without the ``__CUDA_NO_HALF*`` / ``__CUDA_NO_BFLOAT16*``
  defines, plus ``-DENABLE_FP8`` (CUDA >= 11.8); section ``cxx-flags`` apply to C++ sources,
  ``cuda-flags`` to ``.cu`` sources, ``hip-flags`` to HIP sources.
"""

from __future__ import annotations

from pathlib import Path

from .config import KernelConfig, KernelSection

BACKEND_DEFINES = {
    "cpu": [("CPU_KERNEL", None)],
    "cuda": [("CUDA_KERNEL", None), ("USE_CUDA", "1")],
    "rocm": [("ROCM_KERNEL", None), ("USE_ROCM", "1")],
}

RELEASE_FLAGS = ["-O3", "-DNDEBUG"]

# torch's COMMON_NVCC_FLAGS entries kernel-builder removes for CUDA >= 11.8 (it adds -DENABLE_FP8 instead).
NVCC_FLAGS_REMOVED = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for p in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def cxx_standard(torch_version: str) -> str:
    """``c++17`` for torch < 2.12, ``c++20`` from 2.12 on."""
    return "c++17" if _version_tuple(torch_version) < (2, 12) else "c++20"


def installed_torch_version() -> str:
    import torch

    return torch.__version__


def nvcc_common_flags(cuda_version: str | None) -> list[str]:
    """The flags kernel-builder's CMake gives every CUDA source, from torch's own list."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    flags = list(COMMON_NVCC_FLAGS)
    if cuda_version is None or _version_tuple(cuda_version) >= (11, 8):
        flags = [f for f in flags if f not in NVCC_FLAGS_REMOVED] + ["-DENABLE_FP8"]
    return flags


def include_roots(stage: Path, includes: tuple[str, ...] | list[str]) -> list[Path]:
    """Include directories of one section's sources inside a staged tree (the quoted-include search of the
    including file's own folder comes on top, from the compiler)."""
    roots = [stage / "csrc"]
    for inc in includes:
        path = stage / inc
        if path not in roots:
            roots.append(path)
    return roots


def section_of(cfg: KernelConfig, name: str) -> KernelSection | None:
    """``[kernel.<name>]``, or None for ``torch`` (the binding)."""
    if name == "torch":
        return None
    for k in cfg.kernels:
        if k.name == name:
            return k
    raise ValueError(f"{cfg.name}: build.toml has no [kernel.{name}] (sections: torch, "
                     + ", ".join(k.name for k in cfg.kernels) + ")")


def defines_for(backends: list[str] | tuple[str, ...], ops_name: str) -> list[tuple[str, str | None]]:
    macros: list[tuple[str, str | None]] = [("TORCH_EXTENSION_NAME", ops_name)]
    for b in backends:
        macros += BACKEND_DEFINES[b]
    return macros


def define_flags(macros) -> list[str]:
    return [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in macros]
