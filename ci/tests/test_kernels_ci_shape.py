"""kernels-community's CI shape: `pytest tests -m kernels_ci` selects each kernel's smoke tests, and the test
tree collects with only torch, numpy, pytest and kernels installed (no hypothesis: modules needing it are left
out, the smoke tests import nothing else)."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB_OK = {"json", "math", "pathlib", "tomllib", "tomli"}


@pytest.mark.parametrize("kernel", ["img2gray", "gemm"])
def test_smoke_tests_import_only_torch_numpy_pytest_and_the_kernel(kernel):
    tree = ast.parse((ROOT / kernel / "tests" / "test_kernels_ci.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported <= {"torch", "numpy", "pytest", kernel} | STDLIB_OK, imported
    assert "kernels_ci" in (ROOT / kernel / "pytest.ini").read_text()


@pytest.mark.parametrize("kernel", ["img2gray", "gemm"])
def test_kernels_ci_selection_runs_without_hypothesis(kernel, tmp_path):
    blocker = tmp_path / "hypothesis"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('hypothesis is not installed here')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_KERNELS",)}
    env.update(PYTHONPATH=str(tmp_path), CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / kernel / "tests"), "-m", "kernels_ci",
                             "-p", "no:hypothesispytest", "-p", "no:cacheprovider"],
                            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "hypothesis is not installed; not collected:" in result.stdout
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "error" not in summary and "failed" not in summary, summary
