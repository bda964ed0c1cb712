"""The toolchains CI compiles with are the ones kernel-builder uses, installed by ci/setup.sh:
CUTLASS exactly at the release gemm's build.toml depends on (headers of another version are refused),
CUDA 13.0's and 13.2's nvcc from PyPI, each compiling a section for the capabilities kernel-builder would."""

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


@pytest.mark.parametrize("cuda", ["13.0", "13.2"])
def test_nvcc_is_the_cuda_release_from_pypi(cuda):
    from kbuild.toolchain import CUDA_TOOLKITS, DEFAULT_CUDA, cached_nvcc, find_nvcc

    nvcc_version = CUDA_TOOLKITS[cuda][0]
    if not cached_nvcc(cuda).is_file():
        if os.environ.get("CI_REQUIRE_NVCC") == "1":
            pytest.fail(f"CI_REQUIRE_NVCC=1 but ci/setup.sh did not install CUDA {cuda}'s nvcc into the kbuild cache")
        pytest.skip(f"nvcc not installed (ci/setup.sh runs tools/kbuild install-nvcc --cuda {cuda})")
    if "NVCC" not in os.environ and cuda == DEFAULT_CUDA:
        assert find_nvcc() == str(cached_nvcc())  # CI compiles with the one it installed
    version = subprocess.run([str(cached_nvcc(cuda)), "--version"], capture_output=True, text=True,
                             check=True).stdout
    assert f"V{nvcc_version}" in version and nvcc_version.startswith(cuda + ".")
    include = cached_nvcc(cuda).parent.parent / "include"
    for header in ("cuda_runtime.h", "cuda.h", "cudaTypedefs.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"):
        assert (include / header).is_file(), header


def test_cuda_capabilities_follow_kernel_builders_intersection():
    """cuda_archs_loose_intersection of the pinned templates, and the default lists by toolkit."""
    from kbuild.rules import cuda_archs_loose_intersection, default_cuda_archs, section_cuda_archs

    assert default_cuda_archs("13.0") == default_cuda_archs("13.2") == [
        "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX"]
    assert default_cuda_archs("12.6") == ["7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0+PTX"]
    assert default_cuda_archs("12.8")[-1] == "12.0+PTX"
    # gemm: 9.0a is kept wherever 9.0 is a target, which every toolkit of the pinned matrix has.
    for cuda in ("12.6", "13.0", "13.2"):
        assert section_cuda_archs(["9.0a"], cuda) == ["9.0a"]
    # img2gray (none declared): the toolkit's whole default list.
    assert section_cuda_archs([], "12.6") == default_cuda_archs("12.6")
    targets = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]
    assert cuda_archs_loose_intersection(["8.0", "9.0"], targets) == ["8.0", "9.0"]  # 8.6, 8.9 run 8.0's SASS
    assert cuda_archs_loose_intersection(["8.0", "9.0+PTX"], targets) == ["8.0", "9.0+PTX"]
    assert cuda_archs_loose_intersection(["7.0"], ["7.5", "8.0"]) == ["7.0"]
    assert cuda_archs_loose_intersection(["10.0a"], targets) == ["10.0a"]
    with pytest.raises(ValueError, match="nothing after the intersection"):
        section_cuda_archs(["10.0a"], "12.6")
