"""The toolchains CI compiles with are the ones kernel-builder uses, installed by ci/setup.sh:
CUTLASS exactly at the release gemm's build.toml depends on (headers of another version are refused),
CUDA 13.0's nvcc from PyPI."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from kbuild import cutlass  # noqa: E402


def test_build_toml_names_a_cutlass_kernel_builder_provides_with_the_blockwise_collectives():
    cfg = tomllib.loads((ROOT / "gemm" / "build.toml").read_text())
    depends = cfg["kernel"]["gemm_cuda"]["depends"]
    version = cutlass.required_version(depends)
    assert version == "4.4.2"  # cutlass_4_4; the sm90 FP8-blockwise collectives need CUTLASS >= 4.2
    assert cutlass.KERNEL_BUILDER_CUTLASS["cutlass_4_0"] == "4.0.0"  # older than 4.2: no blockwise collectives


def test_dependency_names_map_to_kernel_builder_releases():
    assert cutlass.required_version(["torch"]) is None
    assert cutlass.required_version(["torch", "cutlass_4_5"]) == "4.5.2"
    assert cutlass.required_version(["cutlass_3_9"]) == "3.9.2"
    with pytest.raises(RuntimeError, match="unknown CUTLASS dependency 'cutlass_4_2'"):
        cutlass.required_version(["cutlass_4_2"])
    with pytest.raises(RuntimeError, match="several CUTLASS releases"):
        cutlass.required_version(["cutlass_4_4", "cutlass_4_5"])


def _fake_cutlass(path: Path, major: int, minor: int, patch: int) -> Path:
    (path / "cutlass").mkdir(parents=True)
    (path / "cutlass" / "version.h").write_text(
        f"#define CUTLASS_MAJOR {major}\n#define CUTLASS_MINOR {minor}\n#define CUTLASS_PATCH {patch}\n")
    return path


def test_headers_of_another_version_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTLASS_INCLUDE_DIR", str(_fake_cutlass(tmp_path / "inc", 4, 2, 0)))
    with pytest.raises(RuntimeError, match=r"holds CUTLASS 4\.2\.0, but build.toml depends on cutlass_4_4, which is "
                                           r"CUTLASS 4\.4\.2 in kernel-builder"):
        cutlass.locate("4.4.2")
    monkeypatch.setenv("CUTLASS_INCLUDE_DIR", str(_fake_cutlass(tmp_path / "inc2", 4, 4, 2)))
    assert cutlass.locate("4.4.2") == tmp_path / "inc2"


def test_missing_headers_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.delenv("CUTLASS_INCLUDE_DIR", raising=False)
    monkeypatch.setenv("KBUILD_CACHE", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"cutlass_4_4 .*fetch-cutlass.*CUTLASS_INCLUDE_DIR"):
        cutlass.locate("4.4.2")


def test_cached_cutlass_is_the_release_tag_byte_for_byte():
    """ci/setup.sh fetched it (tools/kbuild fetch-cutlass): 822 files whose tree hash is that of
    `git archive v4.4.2 include` of NVIDIA/cutlass."""
    include = cutlass.cache_dir() / "cutlass-4.4.2" / "include"
    if not include.is_dir():
        pytest.skip("CUTLASS 4.4.2 not fetched (ci/setup.sh runs tools/kbuild fetch-cutlass)")
    source = cutlass.WHEEL_SOURCES["4.4.2"]
    assert cutlass.tree_hash(include) == (source.files, source.tree_sha256)
    assert cutlass.header_version(include) == "4.4.2"


def test_nvcc_is_cuda_13_0_from_pypi():
    from kbuild.toolchain import NVCC_VERSION, cached_nvcc, find_nvcc

    if not cached_nvcc().is_file():
        if os.environ.get("CI_REQUIRE_NVCC") == "1":
            pytest.fail("CI_REQUIRE_NVCC=1 but ci/setup.sh did not install nvcc into the kbuild cache")
        pytest.skip("nvcc not installed (ci/setup.sh runs tools/kbuild install-nvcc)")
    if "NVCC" not in os.environ:
        assert find_nvcc() == str(cached_nvcc())  # CI compiles with the one it installed
    version = subprocess.run([str(cached_nvcc()), "--version"], capture_output=True, text=True, check=True).stdout
    assert f"V{NVCC_VERSION}" in version and NVCC_VERSION.startswith("13.0.")
    include = cached_nvcc().parent.parent / "include"
    for header in ("cuda_runtime.h", "cuda.h", "cudaTypedefs.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"):
        assert (include / header).is_file(), header
