"""Publishing: the build variant users get from the Hub, loaded the way they load it.

Builds the CPU variant once (``python tools/kbuild variant img2gray --out <tmp>/build``, in a subprocess:
nothing from tools/ is imported here) and checks the layout, metadata.json with the kernels wheel's own
parser, the ABI (kernel_abi_check), offline loading with ``kernels.get_local_kernel`` against the
editable install and a NumPy reference, ``kernels benchmark`` on the build, and the layer with kernelize.
Needs the monorepo's tools/ (skipped in a standalone copy of the kernel directory).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch

KERNEL_DIR = Path(__file__).resolve().parents[1]
KBUILD = KERNEL_DIR.parent / "tools" / "kbuild"
BUILD_TOML = tomllib.loads((KERNEL_DIR / "build.toml").read_text())

pytestmark = pytest.mark.skipif(not KBUILD.is_dir(), reason="needs the monorepo's tools/kbuild (not shipped with the kernel)")


def _env(**extra):
    env = dict(os.environ, HF_HUB_OFFLINE="1", KBUILD_BACKEND="cpu", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def _expected_variant() -> str:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return f"torch{major}{minor}-cxx11-cpu-x86_64-linux"


@pytest.fixture(scope="module")
def hub_repo(tmp_path_factory) -> Path:
    """A directory laid out like the Hub repo's version branch: build/<variant>/ and benchmarks/."""
    root = tmp_path_factory.mktemp("img2gray_hub")
    editable_ops = KERNEL_DIR / "torch-ext" / "img2gray" / "_ops.py"
    before = (editable_ops.read_bytes(), editable_ops.stat().st_mtime_ns) if editable_ops.exists() else None
    result = subprocess.run(
        [sys.executable, str(KBUILD), "variant", str(KERNEL_DIR), "--out", str(root / "build"),
         # The ABI is judged by its own test (below), so a host whose glibc is newer than manylinux_2_28
         # fails that one test, not every test built on this fixture.
         "--skip-abi-check"],
        env=_env(), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    after = (editable_ops.read_bytes(), editable_ops.stat().st_mtime_ns) if editable_ops.exists() else None
    assert before == after, "a variant build must leave the editable install's _ops.py alone"
    shutil.copytree(KERNEL_DIR / "benchmarks", root / "benchmarks")
    return root


@pytest.fixture(scope="module")
def variant_dir(hub_repo) -> Path:
    return hub_repo / "build" / _expected_variant()


def _run_python(code: str, cwd: Path, timeout: int = 300, **env) -> str:
    # A fresh interpreter, outside the repository root (where img2gray/ would shadow the package),
    # with HF_HUB_OFFLINE=1 and no GPU visible: the loader must need neither.
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                            timeout=timeout, env=_env(CUDA_VISIBLE_DEVICES="", **env))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_variant_layout(variant_dir):
    meta = json.loads((variant_dir / "metadata.json").read_text())
    ops_id = meta["id"]
    assert re.fullmatch(r"_img2gray_cpu_[0-9a-z]+(_dirty)?", ops_id), ops_id
    package = KERNEL_DIR / "torch-ext" / "img2gray"
    python_files = {p.relative_to(package).as_posix() for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    python_files.discard("_ops.py")  # the editable install's; the variant has its own
    expected = python_files | {"_ops.py", f"{ops_id}.abi3.so", "metadata.json"}
    actual = {p.relative_to(variant_dir).as_posix() for p in variant_dir.rglob("*") if p.is_file()}
    assert actual == expected
    # flat layout: no nested package, and _ops.py binds the variant's own namespace
    assert not (variant_dir / "img2gray").exists()
    ops_py = (variant_dir / "_ops.py").read_text()
    assert f"from . import {ops_id}\n" in ops_py and f"torch.ops.{ops_id}" in ops_py


def test_metadata_parses_with_kernels_parser(variant_dir):
    from kernels._rust import Backend, Digest, DigestAlgorithm, Metadata

    meta = Metadata.read_from_file(str(variant_dir / "metadata.json"))
    raw = json.loads((variant_dir / "metadata.json").read_text())
    assert raw["name"] == BUILD_TOML["general"]["name"]
    assert meta.id == raw["id"] and (variant_dir / f"{meta.id}.abi3.so").is_file()
    assert meta.version == BUILD_TOML["general"]["version"]
    assert meta.license == BUILD_TOML["general"]["license"]
    assert meta.python_depends == BUILD_TOML["general"].get("python-depends", [])
    assert meta.backend.backend_type == Backend.CPU
    assert raw["backend"] == {"type": "cpu"}
    # the digest names every other file and matches them
    assert set(meta.digest.files) == {p.name for p in variant_dir.iterdir()} - {"metadata.json"}
    meta.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, str(variant_dir)))


def test_every_shared_object_passes_the_abi_check(variant_dir):
    from kernel_abi_check import ObjectFile

    objects = list(variant_dir.rglob("*.so"))
    assert len(objects) == 1
    for so in objects:
        obj = ObjectFile(str(so))
        violations = obj.check_manylinux("manylinux_2_28")
        # Fails on hosts whose toolchain links newer glibc symbols (seen on Ubuntu 24.04, glibc 2.39:
        # __isoc23_strtoul, arc4random, pthread_once@GLIBC_2.34). Publishable builds come from `nix build`.
        assert violations == [], f"{so.name} is not manylinux_2_28 on this host's toolchain: {violations}"
        assert obj.check_python_abi("3.9") == []


def test_get_local_kernel_offline_matches_editable_and_reference(hub_repo, tmp_path):
    out = _run_python(
        f"""
        import os, sys
        from pathlib import Path
        import numpy as np
        import torch
        import kernels, img2gray
        assert os.environ["HF_HUB_OFFLINE"] == "1" and not torch.cuda.is_available()
        sys.path.insert(0, {str(KERNEL_DIR / "tests")!r})
        from img2gray_reference import gray_reference

        hub = kernels.get_local_kernel(Path({str(hub_repo)!r}), backend="cpu")
        assert hub.__name__.startswith("_img2gray_cpu_") and hub.__file__.startswith({str(hub_repo)!r}), hub.__file__
        assert hub.img2gray is not img2gray.img2gray  # two builds, two op namespaces, one process
        g = torch.Generator().manual_seed(1234)
        for shape in [(1, 1), (7, 13), (33, 65), (2, 3, 31, 17), (1080, 1921)]:
            image = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8, generator=g)
            planar = torch.randint(0, 256, (*shape[:-2], 3, *shape[-2:]), dtype=torch.uint8, generator=g)
            for layout, x in [("hwc", image), ("chw-view", planar.movedim(-3, -1))]:
                want = torch.from_numpy(gray_reference(x))
                got = hub.img2gray(x)
                assert torch.equal(got, want), (shape, layout)
                assert torch.equal(img2gray.img2gray(x), got), (shape, layout)
                poisoned = torch.full(x.shape[:-1], 0xA5, dtype=torch.uint8)
                assert hub.img2gray(x, out=poisoned) is poisoned and torch.equal(poisoned, want), (shape, layout)
        # bad input is a Python error from the hub build too, never a crash
        try:
            hub.img2gray(torch.zeros(4, 4, 4, dtype=torch.uint8))
        except RuntimeError as e:
            assert "3 channels" in str(e), e
        else:
            raise AssertionError("RGBA input was accepted")
        print("OK", hub.__name__)
        """,
        cwd=tmp_path,
    )
    assert out.startswith("OK _img2gray_cpu_")


@pytest.mark.skipif(bool(torch.version.cuda or torch.version.hip),
                    reason="`kernels benchmark` loads the installed torch's backend (no --backend option); this test "
                           "builds the CPU variant. benchmarks/run_publish_h200.sh runs it on the CUDA variant")
def test_kernels_benchmark_cli_runs_the_shipped_benchmark(hub_repo, tmp_path):
    kernels_cli = shutil.which("kernels") or str(Path(sys.executable).with_name("kernels"))
    result = subprocess.run(
        [kernels_cli, "benchmark", str(hub_repo), "--iterations", "2", "--warmup", "0", "--output", str(tmp_path / "bench.json")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env(CUDA_VISIBLE_DEVICES=""),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    payload = json.loads((tmp_path / "bench.json").read_text())
    workloads = {r["workload"]: r for r in payload["results"]}
    assert set(workloads) == {"Img2GrayBenchmark.full_hd", "Img2GrayBenchmark.uhd_4k", "Img2GrayBenchmark.batch8_odd"}
    assert all(r["verified"] is True for r in workloads.values())


def test_benchmark_verification_catches_a_wrong_kernel():
    # The shipped benchmark's verify_* must be able to fail: run it against a kernel that is off by one.
    import importlib.util

    spec = importlib.util.spec_from_file_location("img2gray_benchmark", KERNEL_DIR / "benchmarks" / "benchmark.py")
    bm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bm)

    class OffByOne:
        @staticmethod
        def img2gray(image, out):
            out.copy_(bm._reference(image).add_(1))

    bench = bm.Img2GrayBenchmark()
    bench.kernel, bench.device = OffByOne(), "cpu"
    bench._image(2, 31, 17)
    bench.benchmark_batch8_odd()
    assert not torch.allclose(bench.out, bench.verify_batch8_odd(), atol=1e-2)
    bench.kernel = type("Right", (), {"img2gray": staticmethod(lambda image, out: out.copy_(bm._reference(image)))})()
    bench.benchmark_batch8_odd()
    assert torch.allclose(bench.out, bench.verify_batch8_odd(), atol=1e-2)


@pytest.mark.skipif(bool(torch.version.cuda or torch.version.hip),
                    reason="LocalLayerRepository loads the installed torch's backend; this test builds the CPU variant")
def test_layer_replaces_forward_with_kernelize(hub_repo, tmp_path):
    out = _run_python(
        f"""
        from pathlib import Path
        import torch
        from torch import nn
        from kernels import (LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub,
                             use_kernel_mapping)

        @use_kernel_forward_from_hub("Grayscale")
        class ToGray(nn.Module):
            # The model's own (slow) forward; kernelize swaps in the hub layer's.
            def forward(self, image):
                rgb = image.float()
                return (rgb[..., 0] * 0.21 + rgb[..., 1] * 0.72 + rgb[..., 2] * 0.07).trunc().to(torch.uint8)

        model = nn.Sequential(ToGray())
        mapping = {{"Grayscale": {{"cpu": LocalLayerRepository(repo_path=Path({str(hub_repo)!r}), layer_name="Grayscale")}}}}
        image = torch.randint(0, 256, (3, 37, 41, 3), dtype=torch.uint8)
        with use_kernel_mapping(mapping):
            kernelize(model, mode=Mode.INFERENCE, device="cpu", use_fallback=False)
        layer_forward = model[0].forward
        assert "_img2gray_cpu_" in layer_forward.__func__.__module__, layer_forward.__func__.__module__
        calls = []
        import kernels
        hub = kernels.get_local_kernel(Path({str(hub_repo)!r}))
        original = hub.layers._img2gray
        hub.layers._img2gray = lambda x: calls.append(x.shape) or original(x)
        got = model(image)
        assert calls == [image.shape], calls  # the kernel ran, not the model's forward
        assert torch.equal(got, original(image))
        # compile mode: the layer declares can_torch_compile; it must trace without graph breaks
        with use_kernel_mapping(mapping):
            kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device="cpu", use_fallback=False)
        hub.layers._img2gray = original
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        assert torch.equal(compiled(image), got)
        print("OK")
        """,
        cwd=tmp_path,
    )
    assert out.strip() == "OK"


def test_layer_follows_kernels_layer_rules():
    from torch import nn

    from img2gray import layers  # the editable install

    assert "layers" in __import__("img2gray").__all__
    layer = layers.Grayscale
    assert issubclass(layer, nn.Module) and layer.__init__ is nn.Module.__init__
    own = set(vars(layer)) - {"__module__", "__doc__", "__qualname__", "__annotations__", "__firstlineno__", "__static_attributes__"}
    assert own == {"forward", "can_torch_compile", "has_backward"}
    assert layer.can_torch_compile is True and layer.has_backward is False
