"""kernels-community's CI test run, locally: what ``nix run .#ci-test`` does after ``nix build``.

kernel-builder's ``ci-test`` (``nix-builder/lib/build.nix``) runs ``python -m pytest <source set>/tests
-m kernels_ci -p no:cacheprovider`` with ``PYTHONPATH`` set to the built variant directory,
``LOCAL_KERNELS=<repo-id>=<dir holding the variant>`` (so ``kernels.get_kernel(<repo-id>, ...)`` loads the
fresh build) and ``LD_LIBRARY_PATH`` unset; exit status 5 (no test selected) counts as success. Here the
source set is kbuild's staged copy (:mod:`kbuild.stage`) and the variant comes from :mod:`kbuild.variant`.

The tests run twice: with the installed ``kernels`` (the current API), and with the oldest API we support,
that of the ``kernels`` at the revision our flake.lock files pin, which is what kernel-builder's test
environment imports: :data:`PINNED_KERNELS` from PyPI, installed into the kbuild cache
(:func:`install_pinned_kernels`) and put first on ``PYTHONPATH``, with ``hypothesis`` hidden, as that
environment has only torch, numpy, pytest and ``kernels``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .config import load_config
from .cutlass import cache_dir
from .extension import stage_dir
from .toolchain import install_wheels
from .variant import build_variant

NO_TESTS_COLLECTED = 5

# The PyPI release with the get_kernel of huggingface/kernels 18c4d686 (the flake.lock pin, 0.17.0.dev0):
# `get_kernel(repo_id, revision, version, backend, user_agent, trust_remote_code)`, no `check_arch`
# (0.16.1 added it), and LOCAL_KERNELS overrides.
PINNED_KERNELS_VERSION = "0.16.0"
PINNED_KERNELS = (f"kernels=={PINNED_KERNELS_VERSION}", f"kernels-data=={PINNED_KERNELS_VERSION}")

KERNELS_APIS = ("current", "pinned")


def pinned_kernels_dir() -> Path:
    return cache_dir() / f"kernels-{PINNED_KERNELS_VERSION}"


def install_pinned_kernels(log=print) -> Path:
    """``pip install --target`` :data:`PINNED_KERNELS` into the kbuild cache (nothing if already there)."""
    root = pinned_kernels_dir()
    install_wheels(root, PINNED_KERNELS, f"kernels {PINNED_KERNELS_VERSION}", log)
    return root


def run_ci_test(kernel_dir, backend: str | None = None, pytest_args=(), require_tests: bool = False,
                apis=KERNELS_APIS) -> int:
    cfg = load_config(kernel_dir)
    variant = build_variant(kernel_dir, backend=backend)  # stages the source set, tests included
    tests = stage_dir(cfg) / "tests"
    if not tests.is_dir():
        print(f"kbuild: {cfg.name} has no tests/; nothing to run")
        return 1 if require_tests else 0
    status = 0
    for api in apis:
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        path = [str(variant.path)]
        args = []
        with tempfile.TemporaryDirectory(prefix="kbuild-ci-test-") as tmp:
            if api == "pinned":
                # kernel-builder's test environment: kernels of the pin, no hypothesis.
                path.append(str(install_pinned_kernels(log=lambda m: print(f"kbuild: {m}", flush=True))))
                blocker = Path(tmp) / "hypothesis"
                blocker.mkdir()
                (blocker / "__init__.py").write_text("raise ImportError('hypothesis is not in this environment')\n")
                path.append(tmp)
                args = ["-p", "no:hypothesispytest"]
            env["PYTHONPATH"] = os.pathsep.join(path)
            if cfg.repo_id:
                env["LOCAL_KERNELS"] = f"{cfg.repo_id}={variant.path.parent}"
            version = subprocess.run(
                [sys.executable, "-c", "from importlib.metadata import version; print(version('kernels'))"],
                env=env, capture_output=True, text=True).stdout.strip() or "not installed"
            cmd = [sys.executable, "-m", "pytest", str(tests), "-m", "kernels_ci", "-p", "no:cacheprovider", *args,
                   *pytest_args]
            print(f"kbuild: kernels {version} ({api} API): PYTHONPATH={env['PYTHONPATH']} "
                  f"LOCAL_KERNELS={env.get('LOCAL_KERNELS', '')} " + " ".join(cmd[1:]), flush=True)
            if api == "pinned" and version != PINNED_KERNELS_VERSION:
                print(f"kbuild: expected kernels {PINNED_KERNELS_VERSION} first on PYTHONPATH, found {version}")
                status = 1
                continue
            result = subprocess.run(cmd, cwd=stage_dir(cfg), env=env).returncode
        if result == NO_TESTS_COLLECTED:
            print(f"kbuild: no test of {cfg.name} is marked kernels_ci")
            result = 1 if require_tests else 0
        status = status or result
    return status
