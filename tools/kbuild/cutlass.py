"""CUTLASS headers for sections that depend on ``cutlass_*``: the version kernel-builder provides, and nothing else.

kernel-builder maps each dependency name to one CUTLASS release (``nix-builder/pkgs/cutlass``); a local
build must compile against the same headers. They come from ``$CUTLASS_INCLUDE_DIR`` when set, else from
the kbuild cache (``<cache>/cutlass-<version>/include``), which :func:`fetch` fills from a PyPI wheel that
ships that release's ``include/`` byte for byte (verified by a tree hash of the 822 files of CUTLASS
v4.4.2's ``include/``). Headers of any other version are refused: ``cutlass/version.h`` is read.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

# build.toml dependency -> the CUTLASS release kernel-builder builds against.
KERNEL_BUILDER_CUTLASS = {
    "cutlass_2_10": "2.10.0",
    "cutlass_3_5": "3.5.1",
    "cutlass_3_6": "3.6.0",
    "cutlass_3_8": "3.8.0",
    "cutlass_3_9": "3.9.2",
    "cutlass_4_0": "4.0.0",
    "cutlass_4_4": "4.4.2",
    "cutlass_4_5": "4.5.2",
}


@dataclass(frozen=True)
class WheelSource:
    requirement: str  # what `pip download --no-deps` fetches
    sha256: str  # of the wheel file
    prefix: str  # folder inside the wheel holding CUTLASS's include/
    files: int  # number of files under it
    tree_sha256: str  # :func:`tree_hash` of CUTLASS's include/ at the release tag


# Releases CI can fetch without git. flashinfer-python 0.6.8 ships CUTLASS v4.4.2's include/ unchanged:
# `git archive v4.4.2 include` of NVIDIA/cutlass has the same 822 files and the same tree hash.
WHEEL_SOURCES = {
    "4.4.2": WheelSource(
        requirement="flashinfer-python==0.6.8",
        sha256="e96d09b810cedd5f26a6764fface84b0d39dc60cbcc6167dc61bde3e949b3ed0",
        prefix="flashinfer/data/cutlass/include/",
        files=822,
        tree_sha256="d6c61952db998946acdd1d2b58588aa9056681e85b95f7e762511daab43b5323",
    ),
}


def cache_dir() -> Path:
    """``$KBUILD_CACHE``, else ``.cache/`` at the repository root (ignored by git; ci/setup.sh fills it)."""
    env = os.environ.get("KBUILD_CACHE")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[2] / ".cache"


def required_version(depends) -> str | None:
    """The CUTLASS release a list of build.toml dependencies names (None: no CUTLASS)."""
    names = sorted({d for d in depends if d.startswith("cutlass")})
    if not names:
        return None
    unknown = [d for d in names if d not in KERNEL_BUILDER_CUTLASS]
    if unknown:
        raise RuntimeError(f"unknown CUTLASS dependency {unknown[0]!r}; kernel-builder provides "
                           + ", ".join(f"{k} ({v})" for k, v in KERNEL_BUILDER_CUTLASS.items()))
    versions = {KERNEL_BUILDER_CUTLASS[d] for d in names}
    if len(versions) > 1:
        raise RuntimeError(f"build.toml depends on several CUTLASS releases at once: {names}")
    return versions.pop()


def header_version(include_dir: Path) -> str | None:
    """``MAJOR.MINOR.PATCH`` from ``cutlass/version.h`` (None if there is none)."""
    path = Path(include_dir) / "cutlass" / "version.h"
    if not path.is_file():
        return None
    text = path.read_text(errors="replace")
    parts = [re.search(rf"#define\s+CUTLASS_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def tree_hash(include_dir: Path) -> tuple[int, str]:
    """(file count, sha256 over every file's relative path and content hash, in path order)."""
    root = Path(include_dir)
    h = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return len(files), h.hexdigest()


def _dependency_name(version: str) -> str:
    return next((k for k, v in KERNEL_BUILDER_CUTLASS.items() if v == version), f"CUTLASS {version}")


def locate(version: str) -> Path:
    """The include dir of CUTLASS ``version``: ``$CUTLASS_INCLUDE_DIR`` (checked) or the cache."""
    dep = _dependency_name(version)
    env = os.environ.get("CUTLASS_INCLUDE_DIR")
    if env:
        path = Path(env)
        found = header_version(path)
        if found != version:
            raise RuntimeError(
                f"CUTLASS_INCLUDE_DIR={env} holds CUTLASS {found or '(no cutlass/version.h)'}, but build.toml depends "
                f"on {dep}, which is CUTLASS {version} in kernel-builder: point it at CUTLASS {version}'s include/")
        return path
    path = cache_dir() / f"cutlass-{version}" / "include"
    found = header_version(path)
    if found == version:
        return path
    how = ("`python tools/kbuild fetch-cutlass <kernel>` (ci/setup.sh runs it)" if version in WHEEL_SOURCES
           else f"a checkout of NVIDIA/cutlass at tag v{version}")
    raise RuntimeError(
        f"build.toml depends on {dep} (CUTLASS {version} in kernel-builder) and no such headers were found"
        + (f" ({path} holds CUTLASS {found})" if found else "")
        + f": get them with {how}, or set CUTLASS_INCLUDE_DIR to CUTLASS {version}'s include/")


def fetch(version: str, log=print) -> Path:
    """Put CUTLASS ``version``'s include/ into the cache from its PyPI wheel (nothing if already there)."""
    dest = cache_dir() / f"cutlass-{version}"
    if header_version(dest / "include") == version and (dest / ".verified").is_file():
        log(f"CUTLASS {version} headers: cached in {dest / 'include'}")
        return dest / "include"
    source = WHEEL_SOURCES.get(version)
    if source is None:
        raise RuntimeError(f"no known wheel ships CUTLASS {version}'s headers; set CUTLASS_INCLUDE_DIR to a checkout "
                           f"of NVIDIA/cutlass at tag v{version}")
    with tempfile.TemporaryDirectory(prefix="kbuild-cutlass-") as tmp:
        log(f"CUTLASS {version} headers: pip download --no-deps {source.requirement}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                        "-d", tmp, source.requirement], check=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"pip download {source.requirement} gave {wheels}")
        digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
        if digest != source.sha256:
            raise RuntimeError(f"{wheels[0].name} has sha256 {digest}, expected {source.sha256}")
        staging = Path(tmp) / "include"
        with zipfile.ZipFile(wheels[0]) as zf:
            for name in zf.namelist():
                if name.startswith(source.prefix) and not name.endswith("/"):
                    target = staging / name[len(source.prefix):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(name))
        count, tree = tree_hash(staging)
        if (count, tree) != (source.files, source.tree_sha256):
            raise RuntimeError(f"{source.requirement}'s {source.prefix} is not CUTLASS v{version}'s include/ "
                               f"({count} files, tree {tree}; expected {source.files}, {source.tree_sha256})")
        if header_version(staging) != version:
            raise RuntimeError(f"{source.requirement} ships CUTLASS {header_version(staging)}, not {version}")
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        shutil.move(str(staging), dest / "include")
        (dest / ".verified").write_text(f"{source.requirement} sha256 {source.sha256}\n"
                                        f"include/: {count} files, tree sha256 {tree} (= CUTLASS v{version})\n")
    log(f"CUTLASS {version} headers: {count} files in {dest / 'include'}, identical to tag v{version}")
    return dest / "include"
