"""After the README's set-up (`pip install --no-build-isolation -e <kernel>`), `import <kernel>` gives the built
package from every working directory: the repository root (where the kernel directories img2gray/ and gemm/
would be namespace packages), each kernel dir and its subfolders (gemm/gemm/ is a HIP source folder named like
the package), and elsewhere. Each check is a fresh interpreter started there, as a user's script would be."""

import concurrent.futures
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = {"img2gray": "img2gray", "gemm": "gemm"}  # package -> the op it must expose

CHECK = """
import importlib, sys
for name, op in {kernels!r}.items():
    mod = importlib.import_module(name)
    assert callable(getattr(mod, op, None)), f"{{name}} from {{getattr(mod, '__path__', mod)}} has no {{op}}"
    assert mod.__file__ == {expected!r}[name], (mod.__file__, {expected!r}[name])
print("OK")
"""


def _directories(tmp_path):
    dirs = [ROOT, tmp_path]
    for kernel in KERNELS:
        kdir = ROOT / kernel
        dirs.append(kdir)
        dirs += sorted(p for p in kdir.iterdir() if p.is_dir() and not p.name.startswith((".", "_")) and p.name != "build")
    return dirs


def test_editable_installs_are_path_entries():
    """The editable install is a .pth path entry to <kernel>/torch-ext: a regular package found on sys.path
    wins over namespace portions, which a meta-path finder consulted after the path finder would not."""
    site_dirs = {Path(p) for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]]}
    for kernel in KERNELS:
        pth = [p for d in site_dirs for p in d.glob(f"__editable__.{kernel}-*.pth")]
        assert pth, f"no editable install of {kernel}: run ci/setup.sh (pip install --no-build-isolation -e {kernel})"
        entries = [line.strip() for p in pth for line in p.read_text().splitlines() if line.strip()]
        assert str(ROOT / kernel / "torch-ext") in entries, entries


def test_import_from_every_directory(tmp_path):
    expected = {name: str(ROOT / name / "torch-ext" / name / "__init__.py") for name in KERNELS}
    code = CHECK.format(kernels=KERNELS, expected=expected)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOCAL_KERNELS")}
    env["CUDA_VISIBLE_DEVICES"] = ""

    def run(cwd):
        return cwd, subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300,
                                   env=env)

    dirs = _directories(tmp_path)
    assert ROOT / "gemm" / "gemm" in dirs
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, dirs))
    failed = [f"{cwd}: {r.stdout}{r.stderr[-1500:]}" for cwd, r in results if r.returncode != 0 or r.stdout.strip() != "OK"]
    if failed:
        pytest.fail(f"`import` gave the wrong module in {len(failed)} of {len(dirs)} directories:\n" + "\n".join(failed))
