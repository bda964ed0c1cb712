"""ABI check of build variants, as ``kernel-builder check-abi`` does: every ``.so`` must only use
symbol versions allowed by manylinux_2_28 (GLIBC <= 2.28, GLIBCXX <= 3.4.24, CXXABI <= 1.3.11) and only
the CPython stable ABI of Python 3.9. Uses the PyPI package ``kernel-abi-check`` (its Python bindings)."""

from __future__ import annotations

from pathlib import Path

MANYLINUX = "manylinux_2_28"
PYTHON_ABI = "3.9"


def check_object(path: Path, manylinux: str = MANYLINUX, python_abi: str = PYTHON_ABI) -> list[str]:
    """Violations of one shared object, one readable line each (empty: clean)."""
    try:
        from kernel_abi_check import ObjectFile
    except ImportError as e:
        raise RuntimeError("the ABI check needs `pip install kernel-abi-check==0.14.1`") from e
    obj = ObjectFile(str(path))
    problems = []
    for v in obj.check_manylinux(manylinux):
        problems.append(f"{path.name}: {manylinux} forbids {v.name} ({v.dep}_{v.version})")
    for v in obj.check_python_abi(python_abi):
        problems.append(f"{path.name}: not in the Python {python_abi} stable ABI: {v!r}")
    return problems


def check_variant(variant_dir: Path, manylinux: str = MANYLINUX, python_abi: str = PYTHON_ABI) -> tuple[list[Path], list[str]]:
    """(shared objects checked, violations) for one variant directory."""
    objects = sorted(p for p in Path(variant_dir).rglob("*") if p.suffix in (".so", ".pyd"))
    problems: list[str] = []
    for so in objects:
        problems += check_object(so, manylinux, python_abi)
    return objects, problems
