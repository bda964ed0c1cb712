"""img2gray's GPU source builds for the targets build.toml claims, checked without a GPU and compiled as
kernel-builder compiles it (staged source set, include roots, defines, C++ standard, the section's flags):
nvcc for sm_90a (PTX moves 16-byte vectors, no FMA) and hipify + clang-19 for gfx942 (same)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KBUILD = ROOT / "tools" / "kbuild"
sys.path.insert(0, str(ROOT / "ci"))
sys.path.insert(0, str(ROOT / "tools"))

# Float multiply-add instructions: the formula must be evaluated with separately rounded mul and add.
GFX_FLOAT_FMA = re.compile(r"\b(v_fma_f32|v_fmac_f32|v_mad_f32|v_mac_f32|v_pk_fma_f32|v_fma_mix)")


def _kbuild(*args):
    return subprocess.run([sys.executable, str(KBUILD), *map(str, args)], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture(scope="module")
def gfx942_asm(tmp_path_factory):
    if shutil.which("clang++-19") is None:
        pytest.skip("clang++-19 not installed (ci/setup.sh installs it)")
    import hipify_compile

    out = tmp_path_factory.mktemp("gfx942")
    hipify_compile.main([str(ROOT / "img2gray"), "img2gray_rocm", "--out", str(out)])
    return (out / "img2gray.gfx942.s").read_text()


def test_gfx942_compiles_with_vector_loads(gfx942_asm):
    assert len(re.findall(r"global_load_dwordx4", gfx942_asm)) >= 3
    assert re.search(r"global_store_dwordx4", gfx942_asm)


def test_gfx942_has_no_float_fma(gfx942_asm):
    assert not GFX_FLOAT_FMA.findall(gfx942_asm), "the formula was contracted to FMA on gfx942"


def test_gfx942_no_scratch(gfx942_asm):
    scratch = [int(v) for v in re.findall(r"\.private_segment_fixed_size:\s+(\d+)", gfx942_asm)]
    assert scratch and max(scratch) == 0


@pytest.fixture(scope="module")
def sm90a_ptx(tmp_path_factory, nvcc):
    work = tmp_path_factory.mktemp("sm90a")
    stage = Path(_kbuild("stage", ROOT / "img2gray", "--out", work / "stage").strip())
    flags = _kbuild("flags", ROOT / "img2gray", "img2gray_cuda", "--stage", stage, "--lang", "cuda").split()
    assert "-std=c++20" in flags or "-std=c++17" in flags
    out = work / "img2gray.ptx"
    subprocess.run([nvcc, "-gencode=arch=compute_90a,code=compute_90a", "-ptx", *flags,
                    str(stage / "csrc" / "img2gray_cuda" / "img2gray.cu"), "-o", str(out)], check=True)
    return out.read_text()


def test_sm90a_vector_loads_and_no_fma(sm90a_ptx):
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.u32", sm90a_ptx)) >= 3
    assert re.search(r"st\.global\.v4\.u32", sm90a_ptx)
    assert not re.search(r"\bfma\.rn\.f32", sm90a_ptx), "the formula was contracted to FMA"


@pytest.mark.parametrize("cuda", ["13.0", "13.2"])
def test_cuda_unit_compiles_to_an_object_for_kernel_builders_default_list(cuda, tmp_path, nvcc):
    """[kernel.img2gray_cuda] declares no cuda-capabilities: kernel-builder compiles it for the toolkit's whole
    default list, device and host pass (g++ here), and so does this compile, with tools/kbuild's flags."""
    import os

    from kbuild.rules import default_cuda_archs
    from kbuild.toolchain import DEFAULT_CUDA, cached_nvcc

    path = nvcc if cuda == DEFAULT_CUDA else cached_nvcc(cuda)
    if not Path(path).is_file():
        if os.environ.get("CI_REQUIRE_NVCC") == "1":
            pytest.fail(f"CI_REQUIRE_NVCC=1 but CUDA {cuda}'s nvcc is not installed (ci/setup.sh installs it)")
        pytest.skip(f"CUDA {cuda}'s nvcc not installed (tools/kbuild install-nvcc --cuda {cuda})")
    stage = Path(_kbuild("stage", ROOT / "img2gray", "--out", tmp_path / "stage").strip())
    flags = _kbuild("flags", ROOT / "img2gray", "img2gray_cuda", "--stage", stage, "--lang", "cuda",
                    "--cuda-version", cuda).split()
    archs = default_cuda_archs(cuda)
    assert archs[-1] == "12.1+PTX" and "7.5" in archs and "10.0" in archs
    gencode = [f for f in flags if f.startswith("-gencode=")]
    want = {f"-gencode=arch=compute_{a.removesuffix('+PTX').replace('.', '')},code=sm_{a.removesuffix('+PTX').replace('.', '')}"
            for a in archs} | {"-gencode=arch=compute_121,code=compute_121"}
    assert set(gencode) == want, gencode
    obj = tmp_path / "img2gray.o"
    result = subprocess.run([str(path), *flags, "-c", str(stage / "csrc" / "img2gray_cuda" / "img2gray.cu"),
                             "-o", str(obj)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    assert obj.stat().st_size > 0
