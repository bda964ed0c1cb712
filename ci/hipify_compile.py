"""Hipify a kernel's CUDA sources the way kernel-builder does and compile them for an AMD GPU.

    python ci/hipify_compile.py img2gray/csrc img2gray_cuda/img2gray.cu --out /tmp/asm [--arch gfx942]

Copies the source tree to a temp dir, runs torch's hipify (what kernel-builder's hipify.py calls),
then `clang++-19 -x hip --offload-arch=<arch> --cuda-device-only -O3 -S` on the hipified file and
writes `<stem>.<arch>.s`. Device code only: Debian's ROCm 5.2 device libraries are not linked (-nogpulib),
which is enough to check the ISA, registers, LDS and scratch.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CLANG = shutil.which("clang++-19") or "clang++-19"


def hipify_tree(src_dir: Path, work: Path) -> Path:
    from torch.utils.hipify import hipify_python

    tree = work / src_dir.name
    shutil.copytree(src_dir, tree)
    hipify_python.hipify(project_directory=str(tree), output_directory=str(tree), includes=[f"{tree}/*"],
                         show_detailed=False, show_progress=False, is_pytorch_extension=True)
    return tree


def hipified_path(tree: Path, cu_rel: str) -> Path:
    # kernel-builder's rule: foo.cu -> foo.hip, and "cuda" in the path becomes "hip".
    return tree / Path(cu_rel.replace("cuda", "hip")).with_suffix(".hip")


def compile_to_asm(hip_file: Path, out: Path, arch: str, extra: list[str]) -> Path:
    cmd = [CLANG, "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only", "-nogpulib", "-O3", "-S",
           str(hip_file), "-o", str(out), *extra]
    subprocess.run(cmd, check=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src_dir", type=Path, help="directory holding the CUDA sources and headers")
    ap.add_argument("sources", nargs="+", help=".cu files relative to src_dir")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--arch", default="gfx942")
    ap.add_argument("--flag", action="append", default=[], help="extra clang flag (repeatable)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = hipify_tree(args.src_dir.resolve(), Path(tmp))
        for rel in args.sources:
            hip = hipified_path(tree, rel)
            asm = compile_to_asm(hip, args.out / f"{Path(rel).stem}.{args.arch}.s", args.arch, args.flag)
            print(asm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
