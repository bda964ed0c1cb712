"""Hipify a kernel section's CUDA sources the way kernel-builder does and compile them for an AMD GPU.

    python ci/hipify_compile.py img2gray img2gray_rocm --out /tmp/asm [--arch gfx942]

Stages the kernel's Nix source set (tools/kbuild), copies it into a build folder and runs torch's hipify
there with kernel-builder's arguments (``cmake/hipify.py``: the project tree copied to the output dir,
the section's ``.cu`` files as extra files, ``hipify_extra_files_only``), so ``x_cuda/y.cu`` becomes
``x_hip/y.hip``. Each hipified file is compiled with ``clang++-19 -x hip --offload-arch=<arch>
--cuda-device-only -nogpulib -O3 -S`` plus the section's flags under kernel-builder's rules (include roots
in the staged source tree, defines, C++ standard, ``hip-flags``), into ``<out>/<stem>.<arch>.s``. Device
code only: Debian's ROCm 5.2 device libraries are not linked, which is enough to check the ISA, registers,
LDS and scratch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

CLANG = shutil.which("clang++-19") or "clang++-19"


def kbuild(*args: str) -> str:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "kbuild"), *args], check=True, capture_output=True,
                          text=True).stdout


def hipify_like_kernel_builder(stage: Path, build: Path, sources: list[str]) -> dict[str, Path]:
    """{CUDA source: hipified file} for ``sources`` (relative to the staged tree)."""
    from torch.utils.hipify.hipify_python import hipify

    shutil.copytree(stage, build, dirs_exist_ok=True)
    old = os.getcwd()
    os.chdir(build)  # kernel-builder's custom command runs in the build dir, with relative source paths
    try:
        extra = [os.path.abspath(s) for s in sources]
        result = hipify(project_directory=str(stage), output_directory=str(build), header_include_dirs=[],
                        includes=[os.path.join(str(stage), "*")], extra_files=extra, show_detailed=False,
                        show_progress=False, is_pytorch_extension=True, hipify_extra_files_only=True)
    finally:
        os.chdir(old)
    return {rel: Path(result[abs_].hipified_path if abs_ in result and result[abs_].hipified_path else abs_)
            for rel, abs_ in zip(sources, extra)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel_dir", type=Path)
    ap.add_argument("section", help="the [kernel.<name>] table whose .cu sources are hipified (a ROCm section)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--arch", default="gfx942")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(kbuild("stage", str(args.kernel_dir), "--out", f"{tmp}/stage").strip())
        flags = kbuild("flags", str(args.kernel_dir), args.section, "--stage", str(stage), "--lang", "hip").split()
        sources = [s for s in kbuild("sources", str(args.kernel_dir), args.section).split() if s.endswith(".cu")]
        if not sources:
            raise SystemExit(f"[kernel.{args.section}] lists no .cu source to hipify")
        for rel, hip in hipify_like_kernel_builder(stage, Path(tmp) / "build", sources).items():
            asm = args.out / f"{Path(rel).stem}.{args.arch}.s"
            cmd = [CLANG, "-x", "hip", f"--offload-arch={args.arch}", "--cuda-device-only", "-nogpulib", "-O3", "-S",
                   *flags, str(hip), "-o", str(asm)]
            subprocess.run(cmd, check=True)
            print(asm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
