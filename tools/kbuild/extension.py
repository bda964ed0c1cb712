"""The pip path: one setuptools extension per kernel, built from build.toml.

``pip install --no-build-isolation -e <kernel>`` runs the kernel's setup.py, which calls
:func:`setup_kernel`. It compiles ``[torch].src`` plus every ``[kernel.*]`` section of the backend that
matches the installed torch into ``torch-ext/<pkg>/<ops_name>.abi3.so`` and generates ``_ops.py`` and
``registration.h``, as kernel-builder's generated CMake does. On a GPU backend the CPU sections are
compiled into the same library too (``KBUILD_WITH_CPU=0`` turns that off), so one editable install
serves CPU and GPU tensors; kernel-builder's variants stay one backend each.
"""

from __future__ import annotations

import os
from pathlib import Path

from .backend import detect_backend
from .config import KernelConfig, KernelSection, load_config
from .generate import ops_name as make_ops_name
from .generate import unique_id, write_ops_py, write_registration_h

# Macros the binding uses to register one impl per compiled backend (kernel-builder's names).
BACKEND_DEFINES = {
    "cpu": [("CPU_KERNEL", None)],
    "cuda": [("CUDA_KERNEL", None), ("USE_CUDA", "1")],
    "rocm": [("ROCM_KERNEL", None), ("USE_ROCM", "1")],
}

# Stable CPython ABI 3.9, as kernel-builder builds (`<ops_name>.abi3.so`).
PY_LIMITED_API = ("Py_LIMITED_API", "0x03090000")


def cutlass_include_dir() -> str:
    """CUTLASS/CuTe headers for sections that depend on cutlass_*: $CUTLASS_INCLUDE_DIR, else the
    headers shipped in PyPI's nvidia-cutlass (``cutlass_library/source/include``)."""
    env = os.environ.get("CUTLASS_INCLUDE_DIR")
    if env:
        return env
    try:
        import cutlass_library
    except ImportError as e:
        raise RuntimeError(
            "this kernel depends on CUTLASS: `pip install nvidia-cutlass==4.2.0.0` or set CUTLASS_INCLUDE_DIR"
        ) from e
    path = Path(cutlass_library.__file__).parent / "source" / "include"
    if not (path / "cutlass").is_dir():
        raise RuntimeError(f"nvidia-cutlass is installed but {path} holds no CUTLASS headers")
    return str(path)


def cuda_arch_flags(capabilities: list[str]) -> list[str]:
    """``9.0a`` → ``-gencode=arch=compute_90a,code=sm_90a``; ``X.Y+PTX`` also embeds PTX."""
    flags = []
    for cap in capabilities:
        ptx = cap.endswith("+PTX")
        num = cap.removesuffix("+PTX").replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def sections_to_build(cfg: KernelConfig, backend: str, with_cpu: bool | None = None) -> list[KernelSection]:
    """The backend's sections, plus the CPU ones on a GPU backend when ``with_cpu`` (default:
    ``KBUILD_WITH_CPU``, on). Build variants pass ``with_cpu=False``: kernel-builder variants are one backend."""
    if with_cpu is None:
        with_cpu = os.environ.get("KBUILD_WITH_CPU", "1") != "0"
    sections = list(cfg.sections_for(backend))
    if backend != "cpu" and with_cpu:
        sections += cfg.sections_for("cpu")
    return sections


def make_extension(
    cfg: KernelConfig,
    backend: str,
    ops_name: str,
    generated_dir: Path,
    *,
    with_cpu: bool | None = None,
    default_cuda_capabilities: list[str] | None = None,
    extra_sources: list[str] | None = None,
):
    """A torch.utils.cpp_extension Extension named ``<pkg>.<ops_name>`` (sources relative to cfg.root).

    ``default_cuda_capabilities`` is used when no CUDA section lists ``cuda-capabilities`` (build variants
    pass kernel-builder's default list; the editable build leaves it None, so torch targets the local GPU).
    ``extra_sources`` (absolute paths) are compiled in as well.
    """
    from torch.utils import cpp_extension

    sections = sections_to_build(cfg, backend, with_cpu)
    compiled_backends = sorted({s.backend for s in sections})

    sources = [s for s in cfg.torch_src if Path(s).suffix in (".cpp", ".cc", ".cxx", ".c")]
    for s in sections:
        sources += s.compiled_sources
    sources += list(extra_sources or [])
    # Include dirs are absolute: the compiler may run from setuptools' temp dir.
    include_dirs = [str(generated_dir), str(cfg.root)]
    for inc in list(cfg.torch_include) + [i for s in sections for i in s.include]:
        if str(cfg.root / inc) not in include_dirs:
            include_dirs.append(str(cfg.root / inc))
    if any(d.startswith("cutlass") for s in sections for d in s.depends):
        include_dirs.append(cutlass_include_dir())

    define_macros = [PY_LIMITED_API]
    for b in compiled_backends:
        define_macros += BACKEND_DEFINES[b]

    cxx = ["-O3"] + list(cfg.torch_cxx_flags) + [f for s in sections for f in s.cxx_flags]
    gpu: list[str] = ["-O3"]
    if backend == "cuda":
        caps = [c for s in sections for c in s.cuda_capabilities] or list(default_cuda_capabilities or [])
        gpu += cuda_arch_flags(list(dict.fromkeys(caps)))
        gpu += [f for s in sections for f in s.cuda_flags]
        gpu += ["-std=c++17"] if not any(f.startswith("-std=") for f in gpu) else []
    elif backend == "rocm":
        archs = [a for s in sections for a in s.rocm_archs]
        gpu += [f"--offload-arch={a}" for a in dict.fromkeys(archs)]
        gpu += [f for s in sections for f in s.hip_flags]

    kwargs = dict(
        name=f"{cfg.python_name}.{ops_name}",
        sources=sources,
        include_dirs=include_dirs,
        define_macros=define_macros,
        py_limited_api=True,
    )
    if backend == "cpu":
        return cpp_extension.CppExtension(extra_compile_args={"cxx": cxx}, **kwargs)
    return cpp_extension.CUDAExtension(extra_compile_args={"cxx": cxx, "nvcc": gpu}, **kwargs)


def prepare(
    kernel_dir,
    backend: str | None = None,
    uid: str | None = None,
    flavor: str = "dev",
    ops_py_dir: Path | None = None,
):
    """Resolve backend and ops name, write the generated files; returns (cfg, backend, ops_name, gen_dir).

    ``flavor`` keeps editable builds (``dev``) and build variants (``""``) of the same tree in separate
    op namespaces, so both can be loaded in one process. ``_ops.py`` goes to ``ops_py_dir`` (default: the
    package in torch-ext, for the editable install); build variants write theirs into the variant dir and
    must leave the editable install's file alone.
    """
    cfg = load_config(kernel_dir)
    backend = backend or detect_backend()
    if backend not in cfg.backends:
        raise RuntimeError(f"{cfg.name}: build.toml does not list backend {backend!r} (has {list(cfg.backends)})")
    uid = uid or unique_id(cfg.root)
    name = make_ops_name(cfg.python_name, backend, uid + (f"_{flavor}" if flavor else ""))
    gen_dir = cfg.root / "_build" / "generated" / name
    write_registration_h(gen_dir)
    write_ops_py(Path(ops_py_dir) if ops_py_dir is not None else cfg.package_dir, name)
    return cfg, backend, name, gen_dir


def setup_kernel(kernel_dir, **setup_kwargs):
    """Entry point for a kernel's setup.py."""
    import setuptools
    from torch.utils.cpp_extension import BuildExtension

    cfg, backend, name, gen_dir = prepare(kernel_dir)
    os.chdir(cfg.root)  # setuptools wants source paths relative to setup.py
    print(f"kbuild: {cfg.name} backend={backend} ops={name}")
    return setuptools.setup(
        name=cfg.name,
        version=f"{cfg.version}.0.0",
        license=cfg.license,
        packages=[cfg.python_name] + [
            f"{cfg.python_name}.{p.relative_to(cfg.package_dir).as_posix().replace('/', '.')}"
            for p in sorted(cfg.package_dir.rglob("__init__.py"))
            if p.parent != cfg.package_dir
        ],
        package_dir={cfg.python_name: f"torch-ext/{cfg.python_name}"},
        ext_modules=[make_extension(cfg, backend, name, gen_dir)],
        cmdclass={"build_ext": BuildExtension},
        options={"build": {"build_base": "_build"}, "bdist_wheel": {"py_limited_api": "cp39"}},
        python_requires=">=3.9",
        **setup_kwargs,
    )
