"""ci/setup.sh's Python part under an externally managed Python (PEP 668, as Debian 12's and Ubuntu 24.04's are):
it makes the project's virtual environment and installs into it, and a refused pip step shows pip's own error.

The externally managed Python is a throwaway one: this interpreter's binary copied into a fresh prefix whose
stdlib folder links the real one's files and holds the EXTERNALLY-MANAGED marker (a venv would not do: pip
ignores the marker inside a virtual environment), with pip in its site-packages so that its refusal is pip's own.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "tabulate==0.10.0"  # small, in ci/requirements.txt: the package index CI uses has it


@pytest.fixture(scope="module")
def managed_python(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("managed-python")
    base = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    exe = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    if not exe.is_file() or not (base / "lib" / version / "os.py").is_file():
        pytest.skip(f"this Python's layout is not the usual <prefix>/lib/{version} one ({exe}, {base})")
    (prefix / "bin").mkdir()
    shutil.copy2(exe, prefix / "bin" / "python3")
    stdlib = prefix / "lib" / version
    stdlib.mkdir(parents=True)
    for entry in (base / "lib" / version).iterdir():
        if entry.name not in ("site-packages", "dist-packages", "EXTERNALLY-MANAGED", "__pycache__"):
            (stdlib / entry.name).symlink_to(entry)
    (stdlib / "EXTERNALLY-MANAGED").write_text(
        "[externally-managed]\nError=This Python is managed by the system: use a virtual environment.\n")
    python = prefix / "bin" / "python3"
    probe = subprocess.run([str(python), "-c", "import site, sys, sysconfig, ensurepip, venv; "
                            "print(sys.prefix == sys.base_prefix, sysconfig.get_path('stdlib'), site.getsitepackages()[0])"],
                           capture_output=True, text=True, timeout=120, env=_env(prefix))
    if probe.returncode != 0:
        pytest.skip(f"the copied interpreter does not start on its own: {probe.stderr[-500:]}")
    in_base, stdlib_seen, site_dir = probe.stdout.split()
    assert (in_base, stdlib_seen) == ("True", str(stdlib)), probe.stdout
    # pip where this interpreter looks for packages (Debian's python: <prefix>/local/lib/python3.X/dist-packages)
    import pip

    Path(site_dir).mkdir(parents=True, exist_ok=True)
    (Path(site_dir) / "pip").symlink_to(Path(pip.__file__).parent)
    return prefix


def _env(prefix, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHON", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "STEP_LOG")}
    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin"
    env.update(extra)
    return env


def _setup(prefix, tmp_path, **extra):
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(PACKAGE + "\n")
    env = _env(prefix, SKIP_APT="1", SETUP_ONLY="python", SETUP_REQUIREMENTS=str(reqs),
               VENV_DIR=str(tmp_path / "venv"), **extra)
    return subprocess.run(["bash", str(ROOT / "ci" / "setup.sh")], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env=env)


def test_the_throwaway_python_refuses_pip_install(managed_python):
    result = subprocess.run([str(managed_python / "bin" / "python3"), "-m", "pip", "install", PACKAGE],
                            capture_output=True, text=True, timeout=300, env=_env(managed_python))
    assert result.returncode != 0 and "externally-managed-environment" in result.stderr, result.stderr[-2000:]


def test_setup_makes_a_venv_and_installs_into_it(managed_python, tmp_path):
    result = _setup(managed_python, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    venv_python = tmp_path / "venv" / "bin" / "python"
    assert f"creating {tmp_path / 'venv'}" in result.stdout
    assert "[setup] Python packages: ok" in result.stdout
    where = subprocess.run([str(venv_python), "-c", "import tabulate, sys; print(tabulate.__file__, sys.prefix)"],
                           capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert where.stdout.split()[0].startswith(str(tmp_path / "venv")), where.stdout
    # Run again: the venv and the package are there, nothing is made or installed twice.
    again = _setup(managed_python, tmp_path)
    assert again.returncode == 0 and "exists" in again.stdout and "all installed" in again.stdout, again.stdout


def test_a_refused_pip_install_shows_pips_error(managed_python, tmp_path):
    # PYTHON set to the managed interpreter itself: no venv is made, and pip's refusal must reach the output.
    result = _setup(managed_python, tmp_path, PYTHON=str(managed_python / "bin" / "python3"))
    assert result.returncode != 0
    assert "pip failed" in result.stdout and "externally-managed-environment" in result.stdout, result.stdout[-3000:]
