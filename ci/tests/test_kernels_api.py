"""The kernels_ci conftest of each kernel works with the `kernels` API of kernel-builder's pinned revision, whose
get_kernel has no `check_arch`, as well as with the current one: under LOCAL_KERNELS it binds the build through
get_kernel, passing `check_arch=False` only where get_kernel takes it. A stand-in `kernels` package with exactly
the pinned signature (no check_arch: a keyword it does not know is a TypeError) records the call; the real
pinned release is exercised by `tools/kbuild ci-test` (tools/kbuild/citest.py). The stand-in hands back the
editable install of the kernel, so the smoke tests then run against it."""

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

# get_kernel as huggingface/kernels 18c4d686 declares it (kernels/src/kernels/load.py), and the current one.
SIGNATURES = {
    "pinned": "repo_id, revision=None, version=None, backend=None, user_agent=None, trust_remote_code=False",
    "current": "repo_id, *, revision=None, version=None, backend=None, user_agent=None, trust_remote_code=False, "
               "check_arch=True",
}


def _stub_kernels(where: Path, signature: str, log: Path, module: str) -> None:
    pkg = where / "kernels"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(f"""
        import importlib
        import json


        def get_kernel({signature}):
            call = dict(locals())
            with open({str(log)!r}, "a") as f:
                f.write(json.dumps(call) + "\\n")
            return importlib.import_module({module!r})
        """))


@pytest.mark.parametrize("api", list(SIGNATURES))
@pytest.mark.parametrize("kernel", ["img2gray", "gemm"])
def test_conftest_binds_the_build_with_either_get_kernel(kernel, api, tmp_path):
    fake = tmp_path / "site"
    log = tmp_path / "calls.jsonl"
    _stub_kernels(fake, SIGNATURES[api], log, kernel)
    blocker = tmp_path / "nohyp" / "hypothesis"  # kernel-builder's test environment has no hypothesis
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('hypothesis is not installed here')\n")
    repo_id = f"kernels-community/{kernel}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(blocker.parent)]),
               LOCAL_KERNELS=f"{repo_id}={tmp_path / 'variants'}")
    result = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / kernel / "tests"), "-m", "kernels_ci",
                             "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"],
                            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "error" not in summary and "failed" not in summary, summary
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls, "the conftest did not call get_kernel under LOCAL_KERNELS"
    assert all(c["repo_id"] == repo_id and c["version"] == 1 for c in calls), calls
    if api == "pinned":
        assert all("check_arch" not in c for c in calls), calls
    else:
        assert all(c["check_arch"] is False for c in calls), calls


def test_stand_in_matches_the_pinned_release_where_installed():
    """The pinned signature above is the one of the PyPI release tools/kbuild ci-test runs with (checked
    where ci/setup.sh has put it into the kbuild cache)."""
    from kbuild.citest import pinned_kernels_dir

    root = pinned_kernels_dir()
    if not (root / ".installed").is_file():
        if os.environ.get("CI_REQUIRE_NVCC") == "1":  # CI installs every toolchain (ci/setup.sh)
            pytest.fail(f"{root} missing: ci/setup.sh runs tools/kbuild install-pinned-kernels")
        pytest.skip("the pinned kernels release is not installed (tools/kbuild install-pinned-kernels)")
    probe = subprocess.run(
        [sys.executable, "-c", "import inspect, kernels; print(kernels.__file__); "
         "print(list(inspect.signature(kernels.get_kernel).parameters))"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(root)), check=True)
    origin, params = probe.stdout.splitlines()
    assert Path(origin).resolve().is_relative_to(root.resolve())
    stub = {}
    exec(f"def get_kernel({SIGNATURES['pinned']}): pass", stub)
    assert eval(params) == list(inspect.signature(stub["get_kernel"]).parameters)
    assert "check_arch" not in params
