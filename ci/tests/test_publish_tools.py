"""Repository-level publishing tools (tools/kbuild): upload plan and dry run, the upload itself against a
fake Hub API (no network anywhere), wheels installed into a fresh venv, the Hub cards."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KBUILD = ROOT / "tools" / "kbuild"
KERNELS = ["img2gray", "gemm"]
sys.path.insert(0, str(ROOT / "tools"))

VARIANT = "torch213-cxx11-cpu-x86_64-linux"
OTHER_VARIANT = "torch213-cxx11-cu130-x86_64-linux"


def _offline_env(**extra):
    # No token, and an endpoint nothing listens on: any network use would fail loudly.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update(HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9", PATH=os.environ.get("PATH", ""), **extra)
    return env


def _fake_kernel(tmp_path: Path, versions=(1,)) -> Path:
    """A kernel dir with build.toml, build variants, benchmarks and a rendered card."""
    kdir = tmp_path / "toykernel"
    kdir.mkdir()
    (kdir / "build.toml").write_text(textwrap.dedent("""\
        [general]
        name = "toykernel"
        version = 1
        edition = 5
        license = "Apache-2.0"
        backends = ["cpu"]

        [general.hub]
        repo-id = "kernels-community/toykernel"

        [torch]
        src = []
    """))
    for variant, version in zip([VARIANT, OTHER_VARIANT], versions):
        v = kdir / "build" / variant
        (v / "sub").mkdir(parents=True)
        (v / "__init__.py").write_text("from ._ops import ops\n")
        (v / "_ops.py").write_text("ops = None\n")
        (v / "_toykernel_cpu_abc1234.abi3.so").write_bytes(b"\x7fELF")
        (v / "sub" / "helper.py").write_text("X = 1\n")
        meta = {"name": "toykernel", "id": "_toykernel_cpu_abc1234", "version": version, "license": "Apache-2.0",
                "python-depends": [], "backend": {"type": "cpu"}}
        (v / "metadata.json").write_text(json.dumps(meta))
    (kdir / "build" / "CARD.md").write_text("# toykernel card\n")
    (kdir / "benchmarks").mkdir()
    (kdir / "benchmarks" / "benchmark.py").write_text("# benchmark\n")
    (kdir / "benchmarks" / "helpers.py").write_text("# not shipped: only benchmark*.py is\n")
    return kdir


def _kbuild(*args, **kwargs):
    return subprocess.run([sys.executable, str(KBUILD), *map(str, args)], capture_output=True, text=True,
                          timeout=kwargs.pop("timeout", 120), **kwargs)


def test_upload_dry_run_lists_every_file_and_the_target(tmp_path):
    kdir = _fake_kernel(tmp_path, versions=(1, 1))
    result = _kbuild("upload", kdir, "--dry-run", env=_offline_env())
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "kernels-community/toykernel" in out and "repo type kernel" in out
    assert "branch main: 1 file(s)" in out and f"README.md  <-  {kdir / 'build' / 'CARD.md'}" in out
    expected_remote = sorted(
        [f"build/{v}/{f}" for v in (VARIANT, OTHER_VARIANT)
         for f in ("__init__.py", "_ops.py", "_toykernel_cpu_abc1234.abi3.so", "metadata.json", "sub/helper.py")]
        + ["benchmarks/benchmark.py"])
    listed = re.findall(r"^  (\S+)  <-  ", out, flags=re.M)
    assert sorted(f for f in listed if f != "README.md") == expected_remote
    assert f"branch v1: {len(expected_remote)} file(s)" in out
    assert "helpers.py" not in out
    assert "dry run: nothing was sent" in out


def test_upload_refuses_variants_of_different_versions(tmp_path):
    kdir = _fake_kernel(tmp_path, versions=(1, 2))
    result = _kbuild("upload", kdir, "--dry-run", env=_offline_env())
    assert result.returncode == 1 and "disagree on the kernel version" in result.stderr


def test_upload_renders_the_card_template_instead_of_sending_it_raw(tmp_path):
    kdir = _fake_kernel(tmp_path)
    (kdir / "build" / "CARD.md").unlink()
    (kdir / "CARD.md").write_text("---\nlicense: {{ license }}\n---\nget_kernel(\"{{ repo_id }}\", version=1)\n")
    result = _kbuild("upload", kdir, "--dry-run", env=_offline_env())
    assert result.returncode == 0, result.stderr
    assert f"README.md  <-  {kdir / 'build' / 'CARD.md'}" in result.stdout
    assert (kdir / "build" / "CARD.md").read_text() == '---\nlicense: apache-2.0\n---\nget_kernel("kernels-community/toykernel", version=1)\n'


def test_upload_without_builds_says_what_to_run(tmp_path):
    kdir = _fake_kernel(tmp_path)
    shutil.rmtree(kdir / "build")
    result = _kbuild("upload", kdir, "--dry-run", env=_offline_env())
    assert result.returncode == 1 and "python tools/kbuild variant" in result.stderr


class FakeHfApi:
    """Records what kbuild.upload asks of huggingface_hub.HfApi."""

    branches = ["main"]
    existing = {}

    def __init__(self, **kwargs):
        self.calls = FakeHfApi.calls

    def create_repo(self, repo_id, repo_type=None, private=None, exist_ok=False):
        self.calls.append(("create_repo", repo_id, repo_type, exist_ok))

    def list_repo_refs(self, repo_id, repo_type=None):
        return type("Refs", (), {"branches": [type("B", (), {"name": b}) for b in FakeHfApi.branches]})

    def create_branch(self, repo_id, branch, repo_type=None, exist_ok=False):
        self.calls.append(("create_branch", repo_id, branch, repo_type))

    def list_repo_files(self, repo_id, repo_type=None, revision=None):
        return FakeHfApi.existing.get(revision, [])

    def create_commit(self, repo_id, operations, commit_message, repo_type=None, revision=None, create_pr=None):
        adds = sorted(op.path_in_repo for op in operations if type(op).__name__ == "CommitOperationAdd")
        deletes = sorted(op.path_in_repo for op in operations if type(op).__name__ == "CommitOperationDelete")
        self.calls.append(("commit", repo_id, repo_type, revision, adds, deletes))


@pytest.mark.parametrize("branch_exists", [False, True])
def test_upload_sends_build_to_version_branch_and_card_to_main(tmp_path, monkeypatch, branch_exists):
    import huggingface_hub

    from kbuild.upload import plan_upload, upload

    kdir = _fake_kernel(tmp_path)
    FakeHfApi.calls = []
    FakeHfApi.branches = ["main", "v1"] if branch_exists else ["main"]
    FakeHfApi.existing = {"v1": [f"build/{VARIANT}/_toykernel_cpu_old0000.abi3.so", f"build/{OTHER_VARIANT}/keep.py",
                                 "benchmarks/benchmark_old.py"]}
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    plan = plan_upload(kdir)
    upload(plan, kdir, use_kernel_builder=False)

    calls = FakeHfApi.calls
    assert calls[0] == ("create_repo", "kernels-community/toykernel", "kernel", True)
    assert (("create_branch", "kernels-community/toykernel", "v1", "kernel") in calls) is (not branch_exists)
    commits = {c[3]: c for c in calls if c[0] == "commit"}
    assert set(commits) == {"main", "v1"} and all(c[2] == "kernel" for c in commits.values())
    assert commits["main"][4] == ["README.md"] and commits["main"][5] == []
    assert commits["v1"][4] == sorted(
        [f"build/{VARIANT}/{f}" for f in ("__init__.py", "_ops.py", "_toykernel_cpu_abc1234.abi3.so", "metadata.json", "sub/helper.py")]
        + ["benchmarks/benchmark.py"])
    if branch_exists:
        # stale files of the uploaded variant and old benchmarks go; other variants stay
        assert commits["v1"][5] == ["benchmarks/benchmark_old.py", f"build/{VARIANT}/_toykernel_cpu_old0000.abi3.so"]
    else:
        assert commits["v1"][5] == []


def test_upload_without_a_token_stops_before_the_network(tmp_path, monkeypatch):
    import huggingface_hub

    from kbuild.upload import plan_upload, upload

    class NoNetwork:
        def __init__(self, **kwargs):
            raise AssertionError("the Hub API was used without a token")

    kdir = _fake_kernel(tmp_path)
    monkeypatch.setattr(huggingface_hub, "HfApi", NoNetwork)
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved login either
    with pytest.raises(RuntimeError, match="no Hugging Face token, nothing was sent: set HF_TOKEN"):
        upload(plan_upload(kdir), kdir, use_kernel_builder=False)
    # the command line says the same and exits 1, after printing the plan
    result = _kbuild("upload", kdir, env=_offline_env(HF_HOME=str(tmp_path / "hf-home")))
    assert result.returncode == 1 and "set HF_TOKEN" in result.stderr and "kernels-community" in result.stderr
    assert "branch v1:" in result.stdout


def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path):
    import torch

    result = _kbuild("wheel", ROOT / "img2gray", "--out", tmp_path / "dist", env=dict(os.environ, KBUILD_BACKEND="cpu"),
                     timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    wheels = list((tmp_path / "dist").glob("*.whl"))
    assert [w.name for w in wheels] == [f"img2gray-1.0.0+torch{major}{minor}cpu-cp39-abi3-manylinux_2_28_x86_64.whl"]

    venv = tmp_path / "venv"
    # --system-site-packages: torch comes from the system; pip too (no ensurepip: keeps the test fast)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    if sys.prefix != sys.base_prefix:  # run from a venv (ci/setup.sh's .venv): its packages too, after the wheel's
        site_dir = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
        outer = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        (Path(site_dir) / "outer_env.pth").write_text("".join(f"{p}\n" for p in outer))
    install = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheels[0])],
                             capture_output=True, text=True, timeout=120)
    assert install.returncode == 0, install.stderr
    check = subprocess.run([str(py), "-c", textwrap.dedent(f"""
        import sys, importlib.metadata as md
        import numpy as np, torch, img2gray
        assert img2gray.__file__.startswith({str(venv)!r}), img2gray.__file__  # the wheel, not the editable install
        assert md.version("img2gray") == "1.0.0+torch{major}{minor}cpu"
        assert "torch=={major}.{minor}.*" in md.requires("img2gray")
        image = torch.randint(0, 256, (3, 17, 29, 3), dtype=torch.uint8)
        rgb = image.numpy().astype(np.float32)
        want = ((np.float32(0.21) * rgb[..., 0] + np.float32(0.72) * rgb[..., 1]) + np.float32(0.07) * rgb[..., 2]).astype(np.uint8)
        out = torch.full((3, 17, 29), 0xA5, dtype=torch.uint8)
        assert img2gray.img2gray(image, out=out) is out and np.array_equal(out.numpy(), want)
        assert img2gray.layers.Grayscale()(image).equal(out)
        print("OK", img2gray.ops)
    """)], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("OK")


def test_img2gray_has_a_card():
    assert (ROOT / "img2gray" / "CARD.md").is_file()


@pytest.mark.parametrize("kernel", [k for k in KERNELS if (ROOT / k / "CARD.md").is_file()])
def test_card_renders_and_shows_loading_by_version(kernel, tmp_path):
    from kbuild.card import render_card
    from kbuild.config import load_config

    cfg = load_config(ROOT / kernel)
    card = render_card(cfg, out_dir=tmp_path).read_text()
    version = tomllib.loads((ROOT / kernel / "build.toml").read_text())["general"]["version"]
    # kernel-builder's card conventions: the Hub's license id (build.toml's, lower case), loading by version
    assert card.startswith("---\n") and "library_name: kernels" in card and f"license: {cfg.license.lower()}\n" in card
    assert f'get_kernel("kernels-community/{kernel}", version={version})' in card
    assert f"--version {version}" in card and "## Available functions" in card
    assert "{{" not in card and "{%" not in card


def test_readme_documents_the_publishing_commands():
    readme = (ROOT / "img2gray" / "README.md").read_text()
    for command in ("python3 tools/kbuild variant img2gray", "python3 tools/kbuild upload img2gray --dry-run",
                    "python3 tools/kbuild wheel img2gray", "HF_TOKEN", "kernels benchmark"):
        assert command in readme, command


def test_cuda_variant_archs_follow_build_toml_or_kernel_builder_defaults(monkeypatch):
    """What a CUDA variant compiles for and records in metadata.json (checked on a CPU machine: pure logic)."""
    import torch
    from kernels.archs import _parse_cuda_arch, _supports_cuda_capability

    from kbuild.config import load_config
    from kbuild.extension import cuda_arch_flags
    from kbuild.variant import compiled_archs

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.delenv("KBUILD_CUDA_ARCHS", raising=False)
    img2gray_archs = compiled_archs(load_config(ROOT / "img2gray"), "cuda")  # no cuda-capabilities: the default list
    assert img2gray_archs == ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX"]
    assert compiled_archs(load_config(ROOT / "gemm"), "cuda") == ["9.0a"]  # build.toml's cuda-capabilities
    assert compiled_archs(load_config(ROOT / "img2gray"), "cpu") is None
    monkeypatch.setattr(torch.version, "cuda", "12.6")
    assert compiled_archs(load_config(ROOT / "img2gray"), "cuda")[-1] == "9.0+PTX"
    monkeypatch.setenv("KBUILD_CUDA_ARCHS", "9.0;10.0")
    assert compiled_archs(load_config(ROOT / "img2gray"), "cuda") == ["9.0", "10.0"]
    # every recorded arch parses with the loader's arch check, and an H200 (9.0) is covered
    assert all(_parse_cuda_arch(a) for a in img2gray_archs + ["9.0a"])
    assert _supports_cuda_capability(img2gray_archs, (9, 0)) and _supports_cuda_capability(["9.0a"], (9, 0))
    flags = cuda_arch_flags(img2gray_archs)
    assert "-gencode=arch=compute_90,code=sm_90" in flags and "-gencode=arch=compute_121,code=compute_121" in flags
    assert cuda_arch_flags(["9.0a"]) == ["-gencode=arch=compute_90a,code=sm_90a"]
