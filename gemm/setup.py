"""Local development build: ``pip install --no-build-isolation -e gemm``.

kernel-builder (``nix build ./gemm``) ignores this file and generates its own build in its sandbox;
both read build.toml. The shared build logic lives in the monorepo's tools/kbuild.
"""

import sys
from pathlib import Path

here = Path(__file__).resolve().parent
tools = here.parent / "tools"
if not (tools / "kbuild").is_dir():
    sys.exit(f"{here.name}: tools/kbuild not found beside this kernel; outside the monorepo build it with `nix build`")
sys.path.insert(0, str(tools))

from kbuild import setup_kernel  # noqa: E402

setup_kernel(here)
