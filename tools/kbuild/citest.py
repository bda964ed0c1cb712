"""kernels-community's CI test run, locally: what ``nix run .#ci-test`` does after ``nix build``.

kernel-builder's ``ci-test`` (``nix-builder/lib/build.nix``) runs ``python -m pytest <source set>/tests
-m kernels_ci -p no:cacheprovider`` with ``PYTHONPATH`` set to the built variant directory,
``LOCAL_KERNELS=<repo-id>=<dir holding the variant>`` (so ``kernels.get_kernel(<repo-id>, ...)`` loads the
fresh build) and ``LD_LIBRARY_PATH`` unset; exit status 5 (no test selected) counts as success. Here the
source set is kbuild's staged copy (:mod:`kbuild.stage`) and the variant comes from :mod:`kbuild.variant`.
"""

from __future__ import annotations

import os
import subprocess
import sys

from .config import load_config
from .extension import stage_dir
from .variant import build_variant

NO_TESTS_COLLECTED = 5


def run_ci_test(kernel_dir, backend: str | None = None, pytest_args=(), require_tests: bool = False) -> int:
    cfg = load_config(kernel_dir)
    variant = build_variant(kernel_dir, backend=backend)  # stages the source set, tests included
    tests = stage_dir(cfg) / "tests"
    if not tests.is_dir():
        print(f"kbuild: {cfg.name} has no tests/; nothing to run")
        return 1 if require_tests else 0
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PYTHONPATH"] = str(variant.path)
    if cfg.repo_id:
        env["LOCAL_KERNELS"] = f"{cfg.repo_id}={variant.path.parent}"
    cmd = [sys.executable, "-m", "pytest", str(tests), "-m", "kernels_ci", "-p", "no:cacheprovider", *pytest_args]
    print(f"kbuild: PYTHONPATH={env['PYTHONPATH']} LOCAL_KERNELS={env.get('LOCAL_KERNELS', '')} "
          + " ".join(cmd[1:]), flush=True)
    status = subprocess.run(cmd, cwd=stage_dir(cfg), env=env).returncode
    if status == NO_TESTS_COLLECTED:
        print(f"kbuild: no test of {cfg.name} is marked kernels_ci")
        return 1 if require_tests else 0
    return status
