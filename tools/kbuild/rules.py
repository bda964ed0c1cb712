"""kernel-builder's compile rules (huggingface/kernels at the revision flake.lock pins), as data.

* include roots: ``<kernel>/csrc`` for every compiled file, plus the ``include`` list of the source's own
  section (``[torch]`` for the binding, ``[kernel.<name>]`` for kernel sources), relative to the kernel
  dir; a quoted include also searches the including file's folder. The kernel dir itself is no root.
* defines: ``TORCH_EXTENSION_NAME=<ops name>`` everywhere; ``CPU_KERNEL``, or ``CUDA_KERNEL`` +
  ``USE_CUDA=1``, or ``ROCM_KERNEL`` + ``USE_ROCM=1`` by backend; Release builds (``-O3 -DNDEBUG``).
* C++ standard: 17 with torch < 2.12, 20 from torch 2.12 on, host and device code alike.
* CUDA capabilities: a section's ``cuda-capabilities`` loosely intersected with the toolkit's default list
  (``cuda_archs_loose_intersection`` of the templates' utils.cmake); a section without them gets the default
  list itself (Nix builds set ``BUILD_ALL_SUPPORTED_ARCHS``).
* CUTLASS (``cutlass_*`` in ``depends``) is a system include directory (``-isystem``): the Nix compiler wrapper
  adds the headers of every build input that way.
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
    """Include directories of one section's sources inside a staged tree, ``csrc/`` first whether it exists or
    not (the quoted-include search of the including file's own folder comes on top, from the compiler)."""
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


# CUDA_DEFAULT_KERNEL_ARCHS of the templates' preamble.cmake, by the lowest CUDA version each applies to.
CUDA_DEFAULT_ARCHS = {
    (13, 0): ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX"],
    (12, 8): ["7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "12.0+PTX"],
    (0, 0): ["7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0+PTX"],
}


def default_cuda_archs(cuda_version: str) -> list[str]:
    """The capabilities kernel-builder compiles a CUDA section without ``cuda-capabilities`` for."""
    version = _version_tuple(cuda_version)[:2]
    return list(next(archs for floor, archs in CUDA_DEFAULT_ARCHS.items() if version >= floor))


def _arch_key(arch: str) -> tuple:
    base = arch.removesuffix("+PTX")
    return (*_version_tuple(base), base[-1] if base[-1] in "af" else "")


def cuda_archs_loose_intersection(src: list[str], tgt: list[str]) -> list[str]:
    """``cuda_archs_loose_intersection`` of kernel-builder's utils.cmake: ``x.ya``/``x.yf`` is kept where ``x.y``
    is a target; every other target gets the highest requested arch not above it of the same major (or any
    major, for an arch requested ``+PTX``); ``+PTX`` is re-applied to the archs that asked for it."""
    ptx = [a.removesuffix("+PTX") for a in src if a.endswith("+PTX")]
    srcs = list(dict.fromkeys(a.removesuffix("+PTX") for a in src))
    targets = list(tgt)
    out = []
    for arch in [a for a in srcs if a[-1] in "af"]:
        srcs.remove(arch)
        if arch[:-1] in tgt:
            if arch[:-1] in targets:
                targets.remove(arch[:-1])
            out.append(arch)
    srcs.sort(key=_arch_key)
    for target in targets:
        found = None
        for arch in srcs:
            if _version_tuple(arch) <= _version_tuple(target):
                if arch in ptx or arch.split(".")[0] == target.split(".")[0]:
                    found = arch
            else:
                break
        if found:
            out.append(found)
    out = [f"{a}+PTX" if a in ptx else a for a in dict.fromkeys(out)]
    return sorted(out, key=_arch_key)


def section_cuda_archs(capabilities, cuda_version: str, default=None) -> list[str]:
    """What kernel-builder compiles one CUDA section for with this toolkit: its capabilities intersected with
    the toolkit's list (an error if nothing is left), else ``default`` or the toolkit's default list."""
    toolkit = default_cuda_archs(cuda_version)
    if not capabilities:
        return list(default) if default else toolkit
    archs = cuda_archs_loose_intersection(list(capabilities), [a.removesuffix("+PTX") for a in toolkit])
    if not archs:
        raise ValueError(f"cuda-capabilities {list(capabilities)} leave nothing after the intersection with "
                         f"CUDA {cuda_version}'s {toolkit}")
    return archs


def cuda_arch_flags(capabilities: list[str]) -> list[str]:
    """``9.0a`` -> ``-gencode=arch=compute_90a,code=sm_90a``; ``X.Y+PTX`` also embeds PTX."""
    flags = []
    for cap in capabilities:
        num = cap.removesuffix("+PTX").replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if cap.endswith("+PTX"):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags
