import inspect
import os
import re
import sys
from pathlib import Path

import pytest
import torch

KERNEL_DIR = Path(__file__).resolve().parents[1]


def _build_toml():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(KERNEL_DIR / "build.toml", "rb") as f:
        return tomllib.load(f)


def _bind_local_build():
    """Under LOCAL_KERNELS naming this kernel's repo (kernels-community's CI, kernel-builder's test shell,
    `python tools/kbuild ci-test`), every `import gemm` of these tests gets that build, loaded the way users
    load it: kernels.get_kernel(repo_id, version=...). The arch check is left to the tests, which skip with
    a reason on a GPU the build does not cover."""
    overrides = dict(e.split("=", 1) for e in os.environ.get("LOCAL_KERNELS", "").split(":") if "=" in e)
    general = _build_toml()["general"]
    repo_id = general.get("hub", {}).get("repo-id")
    if repo_id not in overrides:
        return None
    from kernels import get_kernel

    kwargs = {}
    # `check_arch` exists from kernels 0.16.1 on; the releases before it (kernel-builder's pinned test
    # environment among them) check no arch at all.
    if "check_arch" in inspect.signature(get_kernel).parameters:
        kwargs["check_arch"] = False
    sys.modules["gemm"] = get_kernel(repo_id, version=general["version"], **kwargs)
    return f"gemm: {sys.modules['gemm'].__file__} (LOCAL_KERNELS {repo_id}={overrides[repo_id]})"


_LOCAL_BUILD = _bind_local_build()

# Modules that need hypothesis are left out where it is not installed (kernels-community's CI gives the
# tests torch, numpy, pytest and kernels only); the kernels_ci smoke tests need none of it.
try:
    from hypothesis import HealthCheck, settings
except ImportError:
    settings = None
    _WITHOUT_HYPOTHESIS = sorted(
        p.name for p in Path(__file__).parent.glob("test_*.py")
        if re.search(r"^\s*(from|import)\s+hypothesis\b", p.read_text(), re.M))
else:
    _WITHOUT_HYPOTHESIS = []
    # CI runs a fixed number of examples without deadlines (timings on shared 2-core runners vary);
    # GEMM_HYPOTHESIS_EXAMPLES raises it for a longer local soak.
    settings.register_profile(
        "gemm",
        max_examples=int(os.environ.get("GEMM_HYPOTHESIS_EXAMPLES", "40")),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        # Fresh random draws on every run; GEMM_HYPOTHESIS_DERANDOMIZE=1 replays a fixed sequence.
        derandomize=os.environ.get("GEMM_HYPOTHESIS_DERANDOMIZE", "0") == "1",
    )
    settings.load_profile("gemm")
collect_ignore = list(_WITHOUT_HYPOTHESIS)


def pytest_report_header(config):
    lines = [_LOCAL_BUILD] if _LOCAL_BUILD else []
    if _WITHOUT_HYPOTHESIS:
        lines.append("hypothesis is not installed; not collected: " + ", ".join(_WITHOUT_HYPOTHESIS))
    return lines


@pytest.fixture
def restore_num_threads():
    threads = torch.get_num_threads()
    yield threads
    torch.set_num_threads(threads)
