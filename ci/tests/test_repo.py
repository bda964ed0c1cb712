"""Repository-level contracts: flakes parse and pin real revisions, the README's commands are what CI runs."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ["img2gray", "gemm"]
FLAKES = [ROOT / "flake.nix"] + [ROOT / k / "flake.nix" for k in KERNELS]
LOCKS = [ROOT / "flake.lock"] + [ROOT / k / "flake.lock" for k in KERNELS]


@pytest.mark.parametrize("flake", FLAKES, ids=lambda p: str(p.relative_to(ROOT)))
def test_flake_nix_parses_with_nix(flake):
    nix = shutil.which("nix-instantiate")
    if nix is None:
        pytest.skip("nix-instantiate not installed (ci/setup.sh installs Debian's nix-bin)")
    result = subprocess.run([nix, "--parse", str(flake)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = flake.read_text()
    assert 'kernel-builder.url = "github:huggingface/kernels"' in text
    assert "genKernelFlakeOutputs" in text and "inherit self" in text


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_flake_lock_pins_kernel_builder(lock):
    data = json.loads(lock.read_text())
    assert data["version"] == 7 and data["root"] == "root"
    nodes = data["nodes"]
    kb_name = nodes["root"]["inputs"]["kernel-builder"]
    kb = nodes[kb_name]
    assert kb["original"] == {"owner": "huggingface", "repo": "kernels", "type": "github"}
    locked = kb["locked"]
    assert locked["owner"] == "huggingface" and locked["repo"] == "kernels" and locked["type"] == "github"
    assert re.fullmatch(r"[0-9a-f]{40}", locked["rev"])
    assert re.fullmatch(r"sha256-[A-Za-z0-9+/]{43}=", locked["narHash"])
    # Every input kernel-builder names is locked too (follows are lists of node names).
    for name, ref in kb["inputs"].items():
        target = ref if isinstance(ref, str) else None
        if target:
            assert target in nodes and "locked" in nodes[target], f"input {name} is not locked"
            assert re.fullmatch(r"[0-9a-f]{40}", nodes[target]["locked"]["rev"])


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make demo" in readme
    assert re.search(r"^exec make test$", ci, re.M)


def test_generated_files_are_not_committed():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    generated = [f for f in tracked if f.endswith(("/_ops.py", "/registration.h", ".so")) or "/build/" in f]
    assert not generated, f"generated files are tracked: {generated}"
