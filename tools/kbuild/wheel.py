"""The tutorial's "legacy Python wheel" route: one installable wheel per kernel and variant.

The wheel packages a build variant (same ``.so``, ``_ops.py`` and Python files) as the importable package
``<pkg>``; its local version names the variant (``img2gray-1.0.0+torch213cpu-cp39-abi3-manylinux_2_28_x86_64.whl``)
and it requires the torch minor it was compiled against. It is tagged manylinux_2_28 only after the
variant passed the ABI check.
"""

from __future__ import annotations

import base64
import hashlib
import platform
import re
import zipfile
from pathlib import Path

from .config import load_config
from .variant import Variant

PYTHON_TAG = "cp39"
ABI_TAG = "abi3"


def local_version_label(variant_name: str) -> str:
    """``torch213-cxx11-cpu-x86_64-linux`` → ``torch213cpu``; ``torch211-cxx11-cu130-…`` → ``torch211cu130``."""
    parts = variant_name.split("-")
    return parts[0] + parts[2]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(kernel_dir, variant: Variant, out_dir: Path, manylinux: str = "manylinux_2_28") -> Path:
    import torch

    cfg = load_config(kernel_dir)
    dist = re.sub(r"[-_.]+", "_", cfg.name)
    version = f"{cfg.version}.0.0+{local_version_label(variant.name)}"
    plat = f"{manylinux}_{platform.machine()}"
    tag = f"{PYTHON_TAG}-{ABI_TAG}-{plat}"
    torch_minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    dist_info = f"{dist}-{version}.dist-info"

    metadata = "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {cfg.name}",
        f"Version: {version}",
        f"Summary: {cfg.name} kernel ({variant.backend}, build variant {variant.name}, ops {variant.ops_name})",
        f"License: {cfg.license}",
        "Requires-Python: >=3.9",
        f"Requires-Dist: torch=={torch_minor}.*",
        *[f"Requires-Dist: {d}" for d in cfg.python_depends],
        "",
    ])
    wheel_meta = "\n".join(["Wheel-Version: 1.0", "Generator: kbuild", "Root-Is-Purelib: false", f"Tag: {tag}", ""])

    entries: list[tuple[str, bytes]] = []
    for f in sorted(p for p in variant.path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        entries.append((f"{cfg.python_name}/{f.relative_to(variant.path).as_posix()}", f.read_bytes()))
    entries += [
        (f"{dist_info}/METADATA", metadata.encode()),
        (f"{dist_info}/WHEEL", wheel_meta.encode()),
        (f"{dist_info}/top_level.txt", f"{cfg.python_name}\n".encode()),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    record += f"{dist_info}/RECORD,,\n"

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
        zf.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), record)
    return path
