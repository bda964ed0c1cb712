"""The gfx942 activation quantization's own device code (gemm/gemm/act_quant_rocm_kernel.h), executed lane by
lane on the CPU SIMT emulator (gemm/docs/emulation.md), bit for bit against the NumPy reference.

gemm/tests/emulation/gfx942_act_quant_driver.cpp compiles the kernel body with the host compiler
(-DFP8GEMM_SIMT_EMULATION) and runs it with the launcher's grid over the bytes of a torch tensor's storage,
its strides and its leading dimensions as the kernel's mixed radix (no merging, so size-1 and
non-mergeable dimensions reach the kernel). The emulator checks every global access against the
buffers (bounds, alignment of the 16-byte loads and 8-byte stores, races between lanes) and counts the
wide accesses, so the tests also see which load and store path ran. Needs g++ (or clang++) with C++20 and
Linux; no torch extension build, no GPU.
"""
import json
import math
import os
import subprocess

import numpy as np
import pytest
import torch

from act_quant_reference import act_quant_ref, fp8_values, special_values
from emulation_build import SKIP_WITHOUT_HOST_COMPILER, build_driver

RUN_TIMEOUT_S = 300
FORMAT = {"e4m3fnuz": 0, "e4m3fn": 1}
DTYPE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MAX_ROW_DIMS = 4


pytestmark = SKIP_WITHOUT_HOST_COMPILER


@pytest.fixture(scope="session")
def driver(tmp_path_factory):
    return build_driver(tmp_path_factory.mktemp("act_quant_emulation"), "gfx942_act_quant_driver", timeout=600)


def emulate(driver, tmp_path, x, kind, static_scale=None, static_in_memory=True, pad=0, grid=None):
    """Runs the kernel on x (CPU tensor, any strides, at most 4 leading dimensions); returns
    (q uint8 (rows, K), scale float32 (rows, G), the scale buffer (G, ld), the driver's JSON)."""
    assert x.dim() - 1 <= MAX_ROW_DIMS
    k = x.shape[-1]
    lead = list(x.shape[:-1])
    rows = math.prod(lead)
    storage = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage())
    sizes = list(reversed(lead)) or [1]  # innermost first
    strides = list(reversed(x.stride()[:-1])) or [0]
    ld = (rows + 3) // 4 * 4
    mode = 0 if static_scale is None else (1 if static_in_memory else 2)
    bits = int(np.float32(static_scale if static_scale is not None else 1.0).view(np.uint32))
    problem = {"rows": rows, "k": k, "dtype": DTYPE[x.dtype], "format": FORMAT[kind], "mode": mode,
               "static_bits": bits, "row_dims": len(sizes), "x_stride_k": x.stride(-1),
               "x_storage": storage.numel(), "x_view": x.storage_offset(), "x_pad": pad, "scale_ld": ld}
    for d in range(MAX_ROW_DIMS):
        problem[f"row_size{d}"] = sizes[d] if d < len(sizes) else 1
        problem[f"row_stride{d}"] = strides[d] if d < len(strides) else 0
    if grid is not None:
        problem["grid_x"], problem["grid_y"] = grid
    d = tmp_path / f"run_{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    (d / "problem.txt").write_text("".join(f"{key} {value}\n" for key, value in problem.items()))
    storage.view(torch.uint8).numpy().tofile(d / "x.bin")
    env = dict(os.environ)
    env.setdefault("FP8GEMM_SIMT_THREADS", str(max(1, min(os.cpu_count() or 1, 4))))
    r = subprocess.run([driver, str(d)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    assert r.returncode == 0, f"driver failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    q = np.fromfile(d / "q.bin", dtype=np.uint8).reshape(rows, k)
    buffer = np.fromfile(d / "scale.bin", dtype=np.float32).reshape(-1, ld)
    return q, buffer[:, :rows].T, buffer, json.loads(r.stdout)


def check(driver, tmp_path, x, kind, static_scale=None, **kw):
    q, scale, buffer, info = emulate(driver, tmp_path, x, kind, static_scale, **kw)
    k = x.shape[-1]
    want_q, want_s = act_quant_ref(x.float().reshape(-1, k).numpy(), kind,
                                   None if static_scale is None else np.float32(static_scale))
    bad = np.argwhere(q != want_q)
    if bad.size:
        r, c = bad[0]
        raise AssertionError(f"{len(bad)} codes differ; first at ({r}, {c}): x = {x.float().reshape(-1, k)[r, c]!r}, "
                             f"got {q[r, c]:#04x}, want {want_q[r, c]:#04x}")
    np.testing.assert_array_equal(scale.view(np.uint32), want_s.view(np.uint32))
    # The 4-row padding of the scale buffer is never written (it stays 0xff poison).
    assert (buffer[:, scale.shape[0]:].view(np.uint32) == 0xFFFFFFFF).all()
    return info


def activations(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    *lead, k = shape
    rows, groups = math.prod(lead), -(-k // 128)
    span = 10 if dtype == torch.float16 else 40
    exps = torch.randint(-span, span + 1, (rows, groups), generator=gen).repeat_interleave(128, 1)[:, :k]
    x = torch.randn(rows, k, generator=gen) * torch.exp2(exps.float())
    x = torch.where(torch.rand(rows, k, generator=gen) < 0.02, x * 2.0**-12, x)
    return x.to(dtype).reshape(shape)


@pytest.mark.parametrize("kind", FORMAT)
@pytest.mark.parametrize("k", [1, 100, 127, 129, 300, 7000])
def test_matches_reference(driver, tmp_path, kind, k):
    for i, dtype in enumerate(ACT_DTYPES):
        check(driver, tmp_path, activations((5, k), dtype, seed=k + i), kind)


def test_wide_loads_and_stores_where_aligned(driver, tmp_path):
    # 16 rows of 256 columns: every lane's 8 elements are one 16-byte load (two for fp32) and its codes one
    # 8-byte store. Shifted by one element, or K-strided, every load is an element load.
    for dtype, loads_per_chunk in ((torch.bfloat16, 1), (torch.float16, 1), (torch.float32, 2)):
        x = activations((16, 256), dtype, seed=1)
        info = check(driver, tmp_path, x, "e4m3fn")
        chunks = 16 * 256 // 8
        assert info["global_loads_16_bytes"] == loads_per_chunk * chunks, info
        assert info["global_stores_8_bytes"] == chunks, info
        assert info["shfl"] == 4 * 4 * 2, info  # 4 bpermutes per wave, 4 waves per workgroup, 2 workgroups
        info = check(driver, tmp_path, x, "e4m3fnuz", pad=1)
        assert info["global_loads_16_bytes"] == 0 and info["global_stores_8_bytes"] == chunks, info
        info = check(driver, tmp_path, activations((256, 16), dtype, seed=2).T, "e4m3fn")
        assert info["global_loads_16_bytes"] == 0, info


@pytest.mark.parametrize("kind", FORMAT)
def test_strided_inputs(driver, tmp_path, kind):
    for i, dtype in enumerate(ACT_DTYPES):
        base = activations((9, 309), dtype, seed=i)
        views = {
            "transposed": activations((300, 13), dtype, seed=10 + i).T,
            "sliced, unaligned rows": base[:, 3:303],
            "every other row": base[::2, :300],
            "column stride 2": activations((6, 600), dtype, seed=20 + i)[:, ::2],
            "3-D, batch-major": activations((5, 2, 300), dtype, seed=30 + i).transpose(0, 1),
            "4 leading dims with size 1": activations((2, 1, 3, 1, 129), dtype, seed=40 + i).permute(2, 1, 3, 0, 4),
            "expanded rows": activations((4, 1, 300), dtype, seed=50 + i).expand(4, 3, 300),
            "1-D": activations((300,), dtype, seed=60 + i),
        }
        for name, x in views.items():
            try:
                check(driver, tmp_path, x, kind)
            except AssertionError as e:
                raise AssertionError(f"{name}, {dtype}: {e}") from None


@pytest.mark.parametrize("kind", FORMAT)
def test_special_values(driver, tmp_path, kind):
    for dtype in ACT_DTYPES:
        check(driver, tmp_path, special_values(dtype), kind)


@pytest.mark.parametrize("kind", FORMAT)
def test_static_scale(driver, tmp_path, kind):
    x = activations((9, 300), torch.bfloat16, seed=3)
    x[0, 0] = float("nan")
    x[1, 1] = float("inf")
    for value in (0.5, 3.7, 0.0, -2.0, float("inf"), 1e-30):
        for in_memory in (True, False):
            check(driver, tmp_path, x, kind, static_scale=value, static_in_memory=in_memory)


@pytest.mark.parametrize("kind", FORMAT)
def test_rounding_ties_and_subnormals(driver, tmp_path, kind):
    values = fp8_values(kind)
    finite = np.sort(values[~np.isnan(values)])
    mid = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)
    v = np.concatenate([finite.astype(np.float32), mid, np.nextafter(mid, np.float32(0)),
                        np.nextafter(mid, np.float32(np.inf)), np.float32([500.0, 1e-20, 2.0**-11])])
    v = np.concatenate([v, -v])
    check(driver, tmp_path, torch.from_numpy(v).reshape(1, -1), kind, static_scale=1.0)


def test_grid_smaller_than_the_problem(driver, tmp_path):
    # The launcher caps the grid (rows / 16 in x, groups in y); the body's loops cover the rest.
    x = activations((40, 700), torch.bfloat16, seed=4)
    info = check(driver, tmp_path, x, "e4m3fn", grid=(1, 2))
    assert info["grid"] == [1, 2] and info["workgroups"] == 2
