"""The pip path: one setuptools extension per kernel, compiled from the staged Nix source set.

``pip install --no-build-isolation -e <kernel>`` runs the kernel's setup.py, which calls
:func:`setup_kernel`. It stages the kernel's Nix source set into ``<kernel>/_build/stage``
(:mod:`kbuild.stage`), checks every include against kernel-builder's rules, and compiles ``[torch].src``
plus every ``[kernel.*]`` section of the backend that matches the installed torch from that staged tree,
with kernel-builder's include roots, defines, flags and C++ standard (:mod:`kbuild.rules`), into
``torch-ext/<pkg>/<ops_name>.abi3.so``; ``_ops.py`` is generated beside it.

The editable install puts ``<kernel>/torch-ext`` on ``sys.path`` through a ``.pth`` file (setuptools'
static-path editable mode, chosen because ``package_dir`` maps the root to ``torch-ext``): a regular
package found on ``sys.path`` beats the namespace package that a ``<kernel>/`` or ``gemm/gemm/`` folder in
the current directory would otherwise produce, so ``import <pkg>`` works from every directory.

On a GPU backend the CPU sections are compiled into the same library too (``KBUILD_WITH_CPU=0`` turns that
off), so one editable install serves CPU and GPU tensors; build variants stay one backend each, as
kernel-builder builds them. Each source is compiled with the include roots of its own section only (csrc/ +
that section's ``include`` list), as kernel-builder's per-source ``INCLUDE_DIRECTORIES``: sources whose
sections have different lists are compiled in separate batches; :func:`kbuild.stage.check_includes` checks
each source against those roots before anything is compiled.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import cutlass as cutlass_mod
from .backend import detect_backend
from .config import KernelConfig, KernelSection, load_config
from .generate import ops_name as make_ops_name
from .generate import write_ops_py
from .rules import (BACKEND_DEFINES, RELEASE_FLAGS, cuda_arch_flags, cxx_standard, include_roots,  # noqa: F401
                    nvcc_common_flags, section_cuda_archs)
from .stage import GENERATED_FILES, stage_and_check

# The stable CPython ABI (`<ops_name>.abi3.so`), defined as kernel-builder's CMake does (`USE_SABI 3`);
# torch's own -DPy_LIMITED_API=<its minimum Python> is left out.
PY_LIMITED_API = ("Py_LIMITED_API", "3")

DEV_FLAVOR = "dev"


def stage_dir(cfg: KernelConfig) -> Path:
    return cfg.root / "_build" / "stage"


def sections_to_build(cfg: KernelConfig, backend: str, with_cpu: bool | None = None) -> list[KernelSection]:
    """The backend's sections, plus the CPU ones on a GPU backend when ``with_cpu`` (default:
    ``KBUILD_WITH_CPU``, on). Build variants pass ``with_cpu=False``: kernel-builder variants are one backend."""
    if with_cpu is None:
        with_cpu = os.environ.get("KBUILD_WITH_CPU", "1") != "0"
    sections = list(cfg.sections_for(backend))
    if backend != "cpu" and with_cpu:
        sections += cfg.sections_for("cpu")
    return sections


def _version_text(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{cmd[0]}: unavailable"


def host_compiler() -> str:
    return os.environ.get("CXX", "c++")


def _is_gcc(cxx: str) -> bool:
    return "Free Software Foundation" in subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout


@dataclasses.dataclass
class CompilePlan:
    """Everything that decides the compiled library; its :meth:`stamp` says whether a rebuild is needed."""

    cfg: KernelConfig
    backend: str
    ops_name: str
    stage: Path
    sections: list[KernelSection]
    sources: list[str]  # relative to cfg.root (inside the stage, or kbuild's own extra sources)
    include_dirs: list[str]  # the union of every section's roots
    source_includes: dict[str, list[str]]  # each source's own roots (its section's)
    define_macros: list[tuple[str, str | None]]
    cxx_flags: list[str]
    gpu_flags: list[str]
    cutlass: tuple[str, str] | None  # (version, include dir)

    def toolchain(self) -> dict:
        import torch

        info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "torch_hip": torch.version.hip,
                "python_abi": sys.implementation.cache_tag, "cxx": _version_text([host_compiler(), "--version"])}
        if self.backend == "cuda":
            from torch.utils.cpp_extension import CUDA_HOME

            info["nvcc"] = _version_text([os.path.join(CUDA_HOME or "", "bin", "nvcc"), "--version"])
        return info

    def stamp(self) -> str:
        """sha256 of the compile inputs (the staged source set's build.toml and listed sources, the files
        kbuild generates), the flags and the toolchain."""
        h = hashlib.sha256()
        cfg = self.cfg
        compiled_inputs = {"build.toml", *cfg.torch_src, *(src for k in cfg.kernels for src in k.src)}
        for rel in sorted(compiled_inputs):
            h.update(rel.encode() + b"\0" + (cfg.root / rel).read_bytes() + b"\0")
        for rel, text in sorted(GENERATED_FILES.items()):
            h.update(rel.encode() + b"\0" + text.encode() + b"\0")
        for rel in self.sources:
            if not rel.startswith(self.stage.relative_to(cfg.root).as_posix()):
                h.update(rel.encode() + b"\0" + (cfg.root / rel).read_bytes() + b"\0")
        plan = {"backend": self.backend, "ops": self.ops_name, "sources": self.sources,
                "include": [self.source_includes.get(src, self.include_dirs) for src in self.sources],
                "defines": self.define_macros, "cxx": self.cxx_flags, "gpu": self.gpu_flags,
                "cutlass": self.cutlass, "toolchain": self.toolchain()}
        h.update(json.dumps(plan, sort_keys=True).encode())
        return h.hexdigest()


def plan_build(
    cfg: KernelConfig,
    backend: str,
    ops_name: str,
    *,
    with_cpu: bool | None = None,
    default_rocm_archs: list[str] | None = None,
    extra_sources: list[str] | None = None,
    torch_version: str | None = None,
) -> CompilePlan:
    """Sources, include roots, defines and flags of the library (sources relative to cfg.root, in the stage).

    A CUDA section is compiled for its ``cuda-capabilities`` intersected with torch's CUDA toolkit, or for
    kernel-builder's default list of that toolkit (``KBUILD_CUDA_ARCHS`` replaces it), in the editable build
    and in variants alike. ``default_rocm_archs`` applies when no ROCm section lists its own (build variants
    pass kernel-builder's defaults; the editable build leaves it None, so torch targets the local GPU).
    """
    if torch_version is None:
        from .rules import installed_torch_version

        torch_version = installed_torch_version()
    std = cxx_standard(torch_version)
    stage = stage_dir(cfg)
    stage_rel = stage.relative_to(cfg.root).as_posix()
    sections = sections_to_build(cfg, backend, with_cpu)
    compiled_backends = sorted({s.backend for s in sections} | {backend})

    # Include roots inside the stage (absolute: the compiler may run from setuptools' temp dir): csrc/ (whether
    # it exists or not, as in kernel-builder) and the source's own section's `include` list. Never the kernel
    # dir or the stage root itself.
    def roots(includes) -> list[str]:
        return [str(p) for p in include_roots(stage, includes)]

    source_includes = {f"{stage_rel}/{src}": roots(cfg.torch_include) for src in cfg.torch_compiled_sources}
    for s in sections:
        source_includes.update({f"{stage_rel}/{src}": roots(s.include) for src in s.compiled_sources})
    sources = list(source_includes)
    for src in extra_sources or []:
        source_includes[src] = roots(())
        sources.append(src)
    include_dirs = list(dict.fromkeys(d for dirs in source_includes.values() for d in dirs))
    cutlass = None
    system_includes: list[str] = []
    version = cutlass_mod.required_version([d for s in sections if s.backend == "cuda" for d in s.depends])
    if version and backend == "cuda":
        path = cutlass_mod.locate(version)
        cutlass = (version, str(path))
        system_includes = ["-isystem", str(path)]  # as Nix's compiler wrapper passes a build input's headers

    define_macros = [PY_LIMITED_API]
    for b in compiled_backends:
        define_macros += BACKEND_DEFINES[b]

    cxx = [f"-std={std}", *RELEASE_FLAGS]
    if _is_gcc(host_compiler()):
        cxx.append("-fno-gnu-unique")
    cxx += list(cfg.torch_cxx_flags) + [f for s in sections for f in s.cxx_flags] + system_includes
    gpu: list[str] = [f"-std={std}", *RELEASE_FLAGS, *system_includes]
    if backend == "cuda":
        import torch

        env = [a for a in os.environ.get("KBUILD_CUDA_ARCHS", "").split(";") if a]
        caps = [c for s in sections if s.backend == "cuda"
                for c in section_cuda_archs(s.cuda_capabilities, torch.version.cuda, default=env or None)]
        gpu += cuda_arch_flags(list(dict.fromkeys(caps)))
        gpu += [f for s in sections for f in s.cuda_flags]
    elif backend == "rocm":
        archs = [a for s in sections for a in s.rocm_archs] or list(default_rocm_archs or [])
        gpu += [f"--offload-arch={a}" for a in dict.fromkeys(archs)]
        gpu += [f for s in sections for f in s.hip_flags]

    return CompilePlan(cfg, backend, ops_name, stage, sections, sources, include_dirs, source_includes, define_macros,
                       cxx, gpu, cutlass)


def make_extension(plan: CompilePlan):
    """A torch.utils.cpp_extension Extension named ``<pkg>.<ops_name>``."""
    from torch.utils import cpp_extension

    kwargs = dict(
        name=f"{plan.cfg.python_name}.{plan.ops_name}",
        sources=list(plan.sources),
        include_dirs=list(plan.include_dirs),
        define_macros=list(plan.define_macros),
        py_limited_api=True,
    )
    if plan.backend == "cpu":
        return cpp_extension.CppExtension(extra_compile_args={"cxx": list(plan.cxx_flags)}, **kwargs)
    return cpp_extension.CUDAExtension(extra_compile_args={"cxx": list(plan.cxx_flags), "nvcc": list(plan.gpu_flags)},
                                       **kwargs)


def build_extension_class(stamp_path: Path | None = None, stamp: str | None = None, build_temp: Path | None = None,
                          source_includes: dict[str, list[str]] | None = None):
    """torch's BuildExtension, adjusted to kernel-builder's flags; writes ``stamp`` to ``stamp_path`` once
    the library is built. ``build_temp`` keeps the objects (and ninja's state) between builds: pip's
    editable builds would otherwise compile in a fresh temp dir every time. ``source_includes`` (a
    :class:`CompilePlan`'s) gives each source its own section's include roots in place of the extension's
    union of them: sources are compiled in one batch per distinct list (each batch in its own folder)."""
    from torch.utils import cpp_extension

    class KernelBuilderBuildExtension(cpp_extension.BuildExtension):
        def build_extension(self, ext):
            batches: dict[tuple[str, ...], list[str]] = {}
            for src in ext.sources:
                batches.setdefault(tuple((source_includes or {}).get(src, ())), []).append(src)
            if len(batches) <= 1:
                return super().build_extension(ext)
            union = {d for dirs in batches for d in dirs}
            compile_all = self.compiler.compile

            def compile_by_section(sources, output_dir=None, macros=None, include_dirs=None, *args, **kwargs):
                # torch's own include dirs stay; the kernel's roots become those of each batch's section.
                common = [d for d in include_dirs or [] if d not in union]
                objects = []
                for i, (dirs, batch) in enumerate(batches.items()):
                    wanted = [src for src in sources if src in batch]
                    if wanted:
                        objects += compile_all(wanted, os.path.join(output_dir or ".", f"includes{i}"), macros,
                                               list(dirs) + common, *args, **kwargs)
                return objects

            self.compiler.compile = compile_by_section
            try:
                return super().build_extension(ext)
            finally:
                self.compiler.compile = compile_all

        def _add_compile_flag(self, extension, flag):
            # torch's extension-only define and its own Py_LIMITED_API value: kernel-builder sets neither.
            if flag != "-DTORCH_API_INCLUDE_EXTENSION_H" and not flag.startswith("-DPy_LIMITED_API="):
                super()._add_compile_flag(extension, flag)

        def build_extensions(self):
            import torch

            from .progress import run_ninja

            saved = cpp_extension.COMMON_NVCC_FLAGS, cpp_extension._run_ninja_build
            cpp_extension.COMMON_NVCC_FLAGS = nvcc_common_flags(torch.version.cuda)
            cpp_extension._run_ninja_build = run_ninja  # a short line per file as its compilation starts
            try:
                super().build_extensions()
            finally:
                cpp_extension.COMMON_NVCC_FLAGS, cpp_extension._run_ninja_build = saved

        def run(self):
            if build_temp is not None:
                self.build_temp = str(build_temp)
            super().run()
            if stamp_path is not None and stamp is not None:
                stamp_path.parent.mkdir(parents=True, exist_ok=True)
                stamp_path.write_text(stamp + "\n")

    return KernelBuilderBuildExtension


def prepare(kernel_dir, backend: str | None = None, warn=print):
    """Load build.toml, resolve the backend, stage the sources and check their includes: (cfg, backend)."""
    cfg = load_config(kernel_dir)
    backend = backend or detect_backend()
    if backend not in cfg.backends:
        raise RuntimeError(f"{cfg.name}: build.toml does not list backend {backend!r} (has {list(cfg.backends)})")
    from .rules import installed_torch_version

    stage_and_check(cfg, stage_dir(cfg), torch_version=installed_torch_version(), warn=warn)
    return cfg, backend


def editable_ops_name(cfg: KernelConfig, backend: str) -> str:
    """One fixed namespace per kernel and backend for the editable build, so an edit recompiles only what
    changed (a name change would change every compile command)."""
    return make_ops_name(cfg.python_name, backend, DEV_FLAVOR)


def editable_stamp_path(cfg: KernelConfig) -> Path:
    return cfg.root / "_build" / "editable.stamp"


def editable_plan(cfg: KernelConfig, backend: str) -> CompilePlan:
    return plan_build(cfg, backend, editable_ops_name(cfg, backend))


def editable_up_to_date(kernel_dir) -> tuple[bool, str]:
    """(whether the installed editable build is current, why): same stamp as the last build, its library
    and _ops.py in place, and ``import <pkg>`` resolving to this kernel's torch-ext."""
    import importlib.util

    cfg = load_config(kernel_dir)
    backend = detect_backend()
    try:
        plan = editable_plan(cfg, backend)
    except RuntimeError as e:
        return False, str(e)
    stamp_file = editable_stamp_path(cfg)
    if not stamp_file.is_file():
        return False, "never built"
    stamp = plan.stamp()
    if stamp_file.read_text().strip() != stamp:
        return False, "sources, flags or toolchain changed since the last build"
    so = cfg.package_dir / f"{plan.ops_name}.abi3.so"
    ops_py = cfg.package_dir / "_ops.py"
    if not so.is_file() or not ops_py.is_file() or f"from . import {plan.ops_name}\n" not in ops_py.read_text():
        return False, f"{so.name} or its _ops.py is missing"
    spec = importlib.util.find_spec(cfg.python_name)
    if spec is None or spec.origin is None or Path(spec.origin).resolve() != (cfg.package_dir / "__init__.py").resolve():
        return False, f"`import {cfg.python_name}` does not resolve to {cfg.package_dir} (editable install missing)"
    return True, f"stamp {stamp[:12]}"


def _remove_stale_libraries(cfg: KernelConfig, keep: str) -> None:
    for so in cfg.package_dir.glob(f"_{cfg.python_name}_*.so"):
        if so.name != keep:
            so.unlink()


def setup_kernel(kernel_dir, **setup_kwargs):
    """Entry point for a kernel's setup.py."""
    import setuptools

    cfg, backend = prepare(kernel_dir)
    plan = editable_plan(cfg, backend)
    write_ops_py(cfg.package_dir, plan.ops_name)
    _remove_stale_libraries(cfg, keep=f"{plan.ops_name}.abi3.so")
    os.chdir(cfg.root)  # setuptools wants source paths relative to setup.py
    print(f"kbuild: {cfg.name} backend={backend} ops={plan.ops_name} "
          f"std={plan.cxx_flags[0].removeprefix('-std=')} staged in {plan.stage}"
          + (f", CUTLASS {plan.cutlass[0]} from {plan.cutlass[1]}" if plan.cutlass else ""), flush=True)
    packages = setuptools.find_packages(where="torch-ext", include=[cfg.python_name, f"{cfg.python_name}.*"])
    if shutil.which("ninja") is None:
        print("kbuild: ninja not found; compiling without it (no parallel or incremental builds)", flush=True)
    return setuptools.setup(
        name=cfg.name,
        version=f"{cfg.version}.0.0",
        license=cfg.license,
        packages=packages,
        # The root maps to torch-ext/: setuptools then installs the editable build as a .pth path entry.
        package_dir={"": "torch-ext"},
        ext_modules=[make_extension(plan)],
        cmdclass={"build_ext": build_extension_class(editable_stamp_path(cfg), plan.stamp(),
                                                     cfg.root / "_build" / "editable", plan.source_includes)},
        options={"build": {"build_base": "_build"}, "bdist_wheel": {"py_limited_api": "cp39"}},
        python_requires=">=3.9",
        **setup_kwargs,
    )
