import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))


@pytest.fixture(scope="session")
def nvcc():
    """The nvcc ci/setup.sh installs (tools/kbuild's find_nvcc): skipped where there is none, a failure in CI
    (CI_REQUIRE_NVCC=1)."""
    from kbuild.toolchain import find_nvcc

    path = find_nvcc()
    if path is None or not Path(path).exists():
        if os.environ.get("CI_REQUIRE_NVCC") == "1":
            pytest.fail("CI_REQUIRE_NVCC=1 but no nvcc: ci/setup.sh installs CUDA 13.0's nvcc from PyPI")
        pytest.skip("nvcc not installed (ci/setup.sh installs it)")
    return path
