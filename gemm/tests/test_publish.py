"""Publishing: the build variant users get from the Hub, loaded the way they load it.

Builds the CPU variant once (``python tools/kbuild variant gemm --out <tmp>/build``, in a subprocess:
nothing from tools/ is imported here) and checks the layout, metadata.json with the kernels wheel's own
parser, the ABI (kernel_abi_check), offline loading with ``kernels.get_local_kernel`` against the
editable install and the float64 reference, ``kernels benchmark`` on the build, and the FP8 linear layer
with kernelize. Needs the monorepo's tools/ (skipped in a standalone copy of the kernel directory).
"""

import importlib.util
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
    root = tmp_path_factory.mktemp("gemm_hub")
    editable_ops = KERNEL_DIR / "torch-ext" / "gemm" / "_ops.py"
    before = (editable_ops.read_bytes(), editable_ops.stat().st_mtime_ns) if editable_ops.exists() else None
    result = subprocess.run(
        [sys.executable, str(KBUILD), "variant", str(KERNEL_DIR), "--out", str(root / "build"),
         # The ABI is judged by its own test (below), so a host whose glibc is newer than manylinux_2_28
         # fails that one test, not every test built on this fixture.
         "--skip-abi-check"],
        env=_env(), capture_output=True, text=True, timeout=900,
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
    # A fresh interpreter outside the repository root, HF_HUB_OFFLINE=1, no GPU visible.
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                            timeout=timeout, env=_env(CUDA_VISIBLE_DEVICES="", **env))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_variant_layout(variant_dir):
    meta = json.loads((variant_dir / "metadata.json").read_text())
    ops_id = meta["id"]
    assert re.fullmatch(r"_gemm_cpu_[0-9a-z]+(_dirty)?", ops_id), ops_id
    package = KERNEL_DIR / "torch-ext" / "gemm"
    python_files = {p.relative_to(package).as_posix() for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    python_files.discard("_ops.py")
    assert {"__init__.py", "layers.py"} <= python_files
    expected = python_files | {"_ops.py", f"{ops_id}.abi3.so", "metadata.json"}
    actual = {p.relative_to(variant_dir).as_posix() for p in variant_dir.rglob("*") if p.is_file()}
    assert actual == expected
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
    assert meta.backend.backend_type == Backend.CPU and raw["backend"] == {"type": "cpu"}
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
        import torch
        import kernels, gemm
        assert os.environ["HF_HUB_OFFLINE"] == "1" and not torch.cuda.is_available()
        sys.path.insert(0, {str(KERNEL_DIR / "tests")!r})
        from reference import assert_close_challenge, make_inputs, poisoned_out, reference_gemm

        hub = kernels.get_local_kernel(Path({str(hub_repo)!r}), backend="cpu")
        assert hub.__name__.startswith("_gemm_cpu_") and hub.__file__.startswith({str(hub_repo)!r}), hub.__file__
        assert hub.gemm is not gemm.gemm  # two builds, two op namespaces, one process
        cases = [(1, 1, 1), (7, 13, 129), (64, 576, 384), (33, 130, 300)]
        for dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
            for layout in ("mn_major", "k_major"):
                for i, (m, n, k) in enumerate(cases):
                    a, b, sa, sb = make_inputs(m, n, k, dtype=dtype, layout=layout, seed=100 + i)
                    out = poisoned_out(m, n)
                    assert hub.gemm(a, b, sa, sb, out=out) is out
                    assert_close_challenge(out, reference_gemm(a, b, sa, sb))
                    # same source, same flags: bit-identical to the editable install
                    assert torch.equal(out, gemm.gemm(a, b, sa, sb)), (m, n, k, dtype, layout)
        try:
            hub.gemm(torch.zeros(4, 4), torch.zeros(4, 4), torch.ones(4, 1), torch.ones(1, 1))
        except (RuntimeError, ValueError, TypeError) as e:
            assert "a" in str(e) and "float8" in str(e), e
        else:
            raise AssertionError("float32 input was accepted")
        print("OK", hub.__name__)
        """,
        cwd=tmp_path,
    )
    assert out.startswith("OK _gemm_cpu_")


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
    assert len(payload["results"]) == 4 and all(r["verified"] is True for r in payload["results"])


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("gemm_benchmark", KERNEL_DIR / "benchmarks" / "benchmark.py")
    bm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bm)
    return bm


def test_benchmark_reference_is_the_formula():
    sys.path.insert(0, str(KERNEL_DIR / "tests"))
    try:
        from reference import make_inputs, reference_gemm
    finally:
        sys.path.pop(0)
    bm = _benchmark_module()
    for m, n, k, layout in [(5, 200, 300, "k_major"), (9, 130, 128, "mn_major")]:
        a, b, sa, sb = make_inputs(m, n, k, dtype=torch.float8_e4m3fn, layout=layout, seed=7)
        assert torch.equal(bm._reference(a, b, sa, sb), reference_gemm(a, b, sa, sb).to(torch.bfloat16))


def test_benchmark_rows_are_named_after_the_shapes_that_run():
    bm = _benchmark_module()
    names = sorted(n[len("benchmark_"):] for n in dir(bm.GemmBenchmark) if n.startswith("benchmark_"))
    on_gpu = torch.cuda.is_available()
    assert len(names) == len(bm.WORKLOADS)
    for name in names:
        bench = bm.GemmBenchmark()
        bench.device = "cuda" if on_gpu else "cpu"
        getattr(bench, f"setup_{name}")()
        m, n, k = (int(part[1:]) for part in name.split("_")[:3])
        assert tuple(bench.a.shape) == (m, k) and tuple(bench.b.shape) == (n, k), name
        assert tuple(bench.out.shape) == (m, n), name
    if not on_gpu:
        assert "m64_n96_k896_kmajor" in names and "m1024_n1536_k7168_kmajor" not in names


def test_benchmark_verification_catches_wrong_kernels():
    bm = _benchmark_module()

    def right(a, b, sa, sb, out):
        out.copy_(bm._reference(a, b, sa, sb))

    def wrong_scale_block(a, b, sa, sb, out):  # pairs each K block with its neighbour's b scales
        out.copy_(bm._reference(a, b, sa, torch.roll(sb, 1, dims=1)))

    def dropped_last_k_block(a, b, sa, sb, out):
        sa = sa.clone()
        sa[:, -1] = 0
        out.copy_(bm._reference(a, b, sa, sb))

    for name, fn, ok in [("right", right, True), ("scale", wrong_scale_block, False), ("k", dropped_last_k_block, False)]:
        bench = bm.GemmBenchmark()
        bench.kernel, bench.device = type("K", (), {"gemm": staticmethod(fn)})(), "cpu"
        torch.manual_seed(bench.seed)  # as the runner does before setup (the std check below depends on it)
        bench.setup_m64_n96_k896_mnmajor()  # 1024x1536x7168 cut for the CPU
        bench.benchmark_m64_n96_k896_mnmajor()
        ref = bench.verify_m64_n96_k896_mnmajor()
        assert torch.allclose(bench.out, ref, atol=1e-2) is ok, name
    # Outputs stay where bf16 rounding (half an ulp: 2^-8 * 2^floor(log2|x|)) is below the runner's
    # atol of 1e-2, i.e. |out| < 4, while not being so small that the check is vacuous.
    assert ref.float().abs().max() < 4 and 0.08 < ref.float().std() < 0.3


@pytest.mark.skipif(bool(torch.version.cuda or torch.version.hip),
                    reason="LocalLayerRepository loads the installed torch's backend; this test builds the CPU variant")
def test_fp8_linear_layer_with_kernelize(hub_repo, tmp_path):
    out = _run_python(
        f"""
        import math
        from pathlib import Path
        import torch
        from torch import nn
        import kernels
        from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

        @use_kernel_forward_from_hub("Fp8BlockLinear")
        class Fp8Linear(nn.Module):
            # transformers' fine-grained FP8 linear (DeepSeek-V3-style block-quantized weights); its own forward
            # dequantizes the weight (slow path).
            def __init__(self, weight, weight_scale_inv, bias):
                super().__init__()
                self.weight = nn.Parameter(weight, requires_grad=False)
                self.weight_scale_inv = nn.Parameter(weight_scale_inv, requires_grad=False)
                self.bias = nn.Parameter(bias, requires_grad=False)
                self.block_size = (128, 128)

            def forward(self, input):
                n, k = self.weight.shape
                scale = self.weight_scale_inv.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
                return (input.float() @ (self.weight.float() * scale).T + self.bias).to(input.dtype)

        torch.manual_seed(0)
        n, k = 320, 200
        w = torch.randn(n, k).to(torch.float8_e4m3fn)
        ws = torch.rand(math.ceil(n / 128), math.ceil(k / 128)) * 0.02 + 0.01
        model = nn.Sequential(Fp8Linear(w, ws, torch.randn(n) * 0.1))
        x = torch.randn(2, 5, k, dtype=torch.bfloat16)
        slow = model(x)
        mapping = {{"Fp8BlockLinear": {{"cpu": LocalLayerRepository(repo_path=Path({str(hub_repo)!r}), layer_name="Fp8BlockLinear")}}}}
        with use_kernel_mapping(mapping):
            kernelize(model, mode=Mode.INFERENCE, device="cpu", use_fallback=False)
        hub = kernels.get_local_kernel(Path({str(hub_repo)!r}))
        calls = []
        original = hub.layers._matmul_2d
        hub.layers._matmul_2d = lambda *args, **kw: calls.append(tuple(args[0].shape)) or original(*args, **kw)
        fast = model(x)
        assert calls == [(2, 5, k)], calls  # the kernel's layer ran
        assert fast.shape == slow.shape and fast.dtype == x.dtype
        # the layer = per-(token, 128-group) fp8 activation quantization + the block-scaled GEMM
        a, sa = hub.fp8_act_quant(x, 128, w.dtype)
        y = hub.gemm(a.view(-1, k), w, sa.reshape(-1, sa.shape[-1]), ws).reshape(2, 5, n)
        manual = (y.to(x.dtype) + model[0].bias).to(x.dtype)
        assert torch.equal(fast, manual)
        # and close to the dequantized float computation (e4m3 activations: ~3% relative error)
        err = (fast.float() - slow.float()).norm() / slow.float().norm()
        assert err < 0.05, err
        # compile mode: the layer declares can_torch_compile; it must trace without graph breaks
        with use_kernel_mapping(mapping):
            kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device="cpu", use_fallback=False)
        hub.layers._matmul_2d = original
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        assert torch.equal(compiled(x), fast)
        print("OK")
        """,
        cwd=tmp_path,
    )
    assert out.strip() == "OK"


def test_layer_follows_kernels_layer_rules(tmp_path):
    source = (KERNEL_DIR / "torch-ext" / "gemm" / "layers.py").read_text()
    assert "def __init__" not in source
    out = _run_python(
        """
        from torch import nn
        import gemm  # the editable install (run outside the repository root)

        assert "layers" in gemm.__all__
        layer = gemm.layers.Fp8BlockLinear
        assert issubclass(layer, nn.Module) and layer.__init__ is nn.Module.__init__
        own = {name for name in vars(layer) if not name.startswith("__")}
        assert own == {"forward", "can_torch_compile", "has_backward"}, own
        assert layer.can_torch_compile is True and layer.has_backward is False
        print("OK")
        """,
        cwd=tmp_path,
    )
    assert out.strip() == "OK"
