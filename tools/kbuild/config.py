"""Reading a kernel's build.toml (edition 5) into plain data.

Only what the local builds need is interpreted; validation of the whole schema is left to the
official parser shipped in the ``kernels`` wheel (``kernels._rust.Build.open``), which the tests run.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

# Files that are compiled (everything else listed in `src` is a header kernel-builder must copy).
COMPILED_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".cu", ".hip"}


@dataclasses.dataclass(frozen=True)
class KernelSection:
    """One ``[kernel.<name>]`` table."""

    name: str
    backend: str
    src: tuple[str, ...]
    include: tuple[str, ...] = ()
    depends: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    cuda_capabilities: tuple[str, ...] = ()
    cuda_flags: tuple[str, ...] = ()
    rocm_archs: tuple[str, ...] = ()
    hip_flags: tuple[str, ...] = ()

    @property
    def compiled_sources(self) -> tuple[str, ...]:
        return tuple(s for s in self.src if Path(s).suffix in COMPILED_SUFFIXES)


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    root: Path
    name: str
    version: int
    license: str
    backends: tuple[str, ...]
    repo_id: str | None
    python_depends: tuple[str, ...]
    torch_src: tuple[str, ...]
    torch_include: tuple[str, ...]
    torch_cxx_flags: tuple[str, ...]
    kernels: tuple[KernelSection, ...]
    # [torch] pyext: extensions of the Python/data files in torch-ext/<pkg>/ that a build ships.
    torch_pyext: tuple[str, ...] = ("py", "pyi")
    upstream: str | None = None
    source: str | None = None

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")

    @property
    def package_dir(self) -> Path:
        return self.root / "torch-ext" / self.python_name

    @property
    def torch_compiled_sources(self) -> tuple[str, ...]:
        return tuple(s for s in self.torch_src if Path(s).suffix in COMPILED_SUFFIXES)

    def sections_for(self, backend: str) -> tuple[KernelSection, ...]:
        return tuple(k for k in self.kernels if k.backend == backend and backend in self.backends)

    def archs_for(self, backend: str) -> list[str] | None:
        """Arch list as kernel-builder records it in metadata.json (None for CPU)."""
        archs: list[str] = []
        for k in self.sections_for(backend):
            for a in k.cuda_capabilities if backend == "cuda" else k.rocm_archs if backend == "rocm" else ():
                if a not in archs:
                    archs.append(a)
        return archs or None


def _strings(table: dict, key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: `{key}` must be a list of strings, got {value!r}")
    return tuple(value)


def load_config(kernel_dir: str | Path) -> KernelConfig:
    root = Path(kernel_dir).resolve()
    path = root / "build.toml"
    if not path.is_file():
        raise FileNotFoundError(f"{root} is not a kernel directory: no build.toml")
    with path.open("rb") as f:
        doc = tomllib.load(f)

    general = doc.get("general", {})
    for key in ("name", "version", "license", "backends"):
        if key not in general:
            raise ValueError(f"{path}: [general] is missing `{key}`")
    torch = doc.get("torch")
    if torch is None:
        raise ValueError(f"{path}: kbuild only builds [torch] (AOT) kernels; no [torch] table found")

    sections = []
    for name, table in doc.get("kernel", {}).items():
        where = f"{path}: [kernel.{name}]"
        sections.append(
            KernelSection(
                name=name,
                backend=table["backend"],
                src=_strings(table, "src", where),
                include=_strings(table, "include", where),
                depends=_strings(table, "depends", where),
                cxx_flags=_strings(table, "cxx-flags", where),
                cuda_capabilities=_strings(table, "cuda-capabilities", where),
                cuda_flags=_strings(table, "cuda-flags", where),
                rocm_archs=_strings(table, "rocm-archs", where),
                hip_flags=_strings(table, "hip-flags", where),
            )
        )

    return KernelConfig(
        root=root,
        name=general["name"],
        version=int(general["version"]),
        license=general["license"],
        backends=tuple(general["backends"]),
        repo_id=general.get("hub", {}).get("repo-id"),
        python_depends=_strings(general, "python-depends", f"{path}: [general]"),
        torch_src=_strings(torch, "src", f"{path}: [torch]"),
        torch_include=_strings(torch, "include", f"{path}: [torch]"),
        torch_cxx_flags=_strings(torch, "cxx-flags", f"{path}: [torch]"),
        kernels=tuple(sections),
        torch_pyext=_strings(torch, "pyext", f"{path}: [torch]") if "pyext" in torch else ("py", "pyi"),
        upstream=general.get("upstream"),
        source=general.get("source"),
    )
