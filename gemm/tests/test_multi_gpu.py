"""gemm on a second GPU of one process: every path runs on the tensors' own device and that device's current
stream, whatever device is current, and allocates nothing on another device.

Skipped below two CUDA devices of compute capability 9.0. Each test runs with cuda:0 current and the tensors
on cuda:1: results against the float64 reference, device 0's memory untouched, a side stream set current on
cuda:1 honoured, a CUDA graph captured on cuda:1 replayed; two threads, one per GPU, calling concurrently;
tensors on two GPUs refused.
"""
import threading
import time

import pytest
import torch

from reference import QUANT_BLOCK, make_inputs, poisoned_out, reference_gemm


def _two_hoppers():
    return torch.cuda.is_available() and torch.cuda.device_count() >= 2 and all(
        torch.cuda.get_device_capability(d) == (9, 0) for d in (0, 1))


pytestmark = pytest.mark.skipif(not _two_hoppers(), reason="needs two CUDA devices of compute capability 9.0")

if _two_hoppers():
    import gemm

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
# (name, M, N, K, dtype, layout, env): one case per path of the sm90 launcher.
PATHS = [
    ("k_major", 256, 576, 1024, FN, "k_major", {}),                    # tile kernel, no preparation pass
    ("challenge_layout", 200, 700, 1000, FN, "mn_major", {}),         # preparation pass (transposes)
    ("fnuz", 64, 640, 512, FNUZ, "k_major", {}),                      # preparation pass (conversion) + flag
    ("exact", 130, 300, 640, FN, "k_major", {"GEMM_CUDA_EXACT_ACCUMULATION": "1"}),  # fp16 copies, CUTLASS
    ("decode", 4, 2048, 4096, FN, "k_major", {}),                     # decode kernel, K split over a cluster
]


def _check(out, a, b, a_scale, b_scale):
    """The fp8 tensor-core bound of test_gemm_cuda.py: 1e-3 + 2e-2 |ref| + 2^-12 sum |terms|, NaNs equal;
    ref is reference.py's float64 formula, sum |terms| the same formula on absolute values."""
    a, b, a_scale, b_scale = (t.cpu() for t in (a, b, a_scale, b_scale))
    ref = reference_gemm(a, b, a_scale, b_scale)
    a64, b64 = a.to(torch.float32).to(torch.float64).abs(), b.to(torch.float32).to(torch.float64).abs()
    sb = b_scale.to(torch.float64).abs().repeat_interleave(QUANT_BLOCK, dim=0)[: b.shape[0]]
    mass = torch.zeros_like(ref)
    for kb in range(a_scale.shape[1]):
        cols = slice(kb * QUANT_BLOCK, (kb + 1) * QUANT_BLOCK)
        mass += a_scale[:, kb].to(torch.float64).abs()[:, None] * sb[None, :, kb] * (a64[:, cols] @ b64[:, cols].T)
    got = out.cpu().to(torch.float64)
    assert torch.equal(torch.isnan(got), torch.isnan(ref))
    keep = ~torch.isnan(ref)
    bound = (1e-3 + 2e-2 * ref.abs() + 2.0 ** -12 * mass)[keep]
    assert bool(((got - ref).abs()[keep] <= bound).all())


def _inputs(m, n, k, dtype, layout, seed, device):
    return make_inputs(m, n, k, dtype, layout, seed, device=device)


@pytest.fixture
def env(monkeypatch):
    def set_env(values):
        for key, value in values.items():
            monkeypatch.setenv(key, value)
    return set_env


@pytest.mark.parametrize("path", PATHS, ids=[p[0] for p in PATHS])
def test_runs_on_the_tensors_device(path, env):
    _, m, n, k, dtype, layout, variables = path
    env(variables)
    torch.cuda.set_device(0)
    a, b, a_scale, b_scale = _inputs(m, n, k, dtype, layout, seed=m, device="cuda:1")
    out = poisoned_out(m, n, device="cuda:1")
    torch.cuda.synchronize(1)
    before = (torch.cuda.memory_allocated(0), torch.cuda.memory_reserved(0))
    gemm.gemm(a, b, a_scale, b_scale, out=out)
    auto = gemm.gemm(a, b, a_scale, b_scale)
    torch.cuda.synchronize(1)
    assert torch.cuda.current_device() == 0
    assert auto.device == torch.device("cuda:1")
    assert (torch.cuda.memory_allocated(0), torch.cuda.memory_reserved(0)) == before
    _check(out, a, b, a_scale, b_scale)
    assert torch.equal(auto, out)


@pytest.mark.parametrize("path", PATHS, ids=[p[0] for p in PATHS])
def test_uses_the_current_stream_of_the_tensors_device(path, env):
    """A side stream made current on cuda:1 (cuda:0 current) is where the call runs: while that stream is
    held up, device 1's default stream sees the output still poisoned."""
    _, m, n, k, dtype, layout, variables = path
    env(variables)
    a, b, a_scale, b_scale = _inputs(m, n, k, dtype, layout, seed=m + 1, device="cuda:1")
    out = poisoned_out(m, n, device="cuda:1")
    side = torch.cuda.Stream(device=1)
    with torch.cuda.device(1):
        torch.cuda.synchronize()
        torch.cuda.set_stream(side)
    torch.cuda.set_device(0)
    try:
        with torch.cuda.device(1):
            torch.cuda._sleep(200_000_000)  # about 0.1 s on `side`, ahead of the call
        gemm.gemm(a, b, a_scale, b_scale, out=out)
        default = torch.cuda.default_stream(1)
        with torch.cuda.stream(default):
            snapshot = out.clone()
        default.synchronize()
        assert torch.isnan(snapshot.float()).all(), "the call ran on device 1's default stream, not its current one"
        side.synchronize()
    finally:
        with torch.cuda.device(1):
            torch.cuda.set_stream(torch.cuda.default_stream(1))
        torch.cuda.set_device(0)
    _check(out, a, b, a_scale, b_scale)


@pytest.mark.parametrize("path", PATHS, ids=[p[0] for p in PATHS])
def test_cuda_graph_captured_on_the_second_device(path, env):
    _, m, n, k, dtype, layout, variables = path
    env(variables)
    a, b, a_scale, b_scale = _inputs(m, n, k, dtype, layout, seed=m + 2, device="cuda:1")
    out = poisoned_out(m, n, device="cuda:1")
    with torch.cuda.device(1):
        gemm.gemm(a, b, a_scale, b_scale, out=out)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            gemm.gemm(a, b, a_scale, b_scale, out=out)
    torch.cuda.set_device(0)
    new = _inputs(m, n, k, dtype, layout, seed=m + 3, device="cuda:1")
    for dst, src in zip((a, b, a_scale, b_scale), new):
        if dst.dtype in (FN, FNUZ):
            dst.view(torch.uint8).copy_(src.view(torch.uint8))
        else:
            dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize(1)
    _check(out, a, b, a_scale, b_scale)


def test_two_threads_one_per_gpu():
    """Concurrent calls from two threads, one per GPU, for about 3 s: every result equals the first one of
    its thread, which matches the float64 reference (all paths are deterministic)."""
    errors = []

    def worker(device):
        try:
            torch.cuda.set_device(device)
            cases = []
            for _, m, n, k, dtype, layout, variables in PATHS:
                if variables:
                    continue  # environment switches are process-wide
                inputs = _inputs(m, n, k, dtype, layout, seed=device * 10 + m, device=f"cuda:{device}")
                first = gemm.gemm(*inputs)
                torch.cuda.synchronize(device)
                _check(first, *inputs)
                cases.append((inputs, first))
            end = time.monotonic() + 3.0
            while time.monotonic() < end:
                for inputs, first in cases:
                    again = gemm.gemm(*inputs)
                    torch.cuda.synchronize(device)
                    assert torch.equal(again, first), f"cuda:{device}: a repeated call differs"
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("odd", ["b", "a_scale", "b_scale", "out"])
def test_tensors_on_two_gpus_are_refused(odd):
    a, b, a_scale, b_scale = _inputs(64, 256, 256, FN, "k_major", seed=5, device="cuda:0")
    out = poisoned_out(64, 256, device="cuda:0")
    args = dict(a=a, b=b, a_scale=a_scale, b_scale=b_scale, out=out)
    args[odd] = args[odd].to("cuda:1")
    with pytest.raises(RuntimeError, match=f"a is on cuda:0 but {odd} is on cuda:1"):
        gemm.gemm(args["a"], args["b"], args["a_scale"], args["b_scale"], out=args["out"])
