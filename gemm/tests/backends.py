"""The backends the shared correctness suite (test_gemm.py) runs every behaviour on.

    cpu               gemm.gemm on CPU tensors: the exact CPU backend
    cuda              gemm.gemm on an sm_90a GPU, default fp8 tensor-core accumulation
    cuda-exact        the same with GEMM_CUDA_EXACT_ACCUMULATION=1 (fp16 operands, fp32 accumulation)
    gfx942-emulation  the gfx942 HIP kernels executed lane by lane on the CPU SIMT emulator (run_emulated)

A backend says where its inputs live, runs one call into a given ``out`` (any strides, written in
place like the op), checks a result with its accuracy class and says how large a problem it runs in the
suite (the emulator is slow, the GPU is not). GPU backends skip where their GPU is absent; the
emulation backend needs a C++20 compiler and the MFMA layout tables (FP8GEMM_AMD_MFMA_DIR).
"""
import atexit
import functools
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pytest
import torch

from host_cxx import host_cxx
from reference import (
    assert_close_challenge,
    assert_close_fp8_tensor_core,
    reference_gemm,
    reference_gemm_on_device,
)


def _sm90_available():
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)


def _emulation_skip_reason():
    if not sys.platform.startswith("linux"):
        return "the SIMT emulator needs Linux"
    if host_cxx() is None:
        return "no C++ compiler"
    return None


@dataclass
class Backend:
    name: str
    device: str  # where the inputs and out live
    max_macs: float  # the largest M*N*K the suite runs on it
    exact: bool  # exact products summed in fp32: sums that fp32 holds exactly come out exact
    tight: bool  # and every result within one bf16 rounding plus fp32 summation error of the formula
    skip_reason: Callable[[], Optional[str]]
    env: dict  # environment variables the backend needs while it runs

    def run(self, a, b, a_scale, b_scale, out):
        """Computes into ``out`` (on self.device, any strides) and returns it."""
        if self.name == "gfx942-emulation":
            return run_emulated(a, b, a_scale, b_scale, out)
        import gemm

        result = gemm.gemm(a, b, a_scale, b_scale, out=out)
        assert result is out
        if self.device == "cuda":
            torch.cuda.synchronize()
        return out

    def reference(self, a, b, a_scale, b_scale):
        """The float64 formula on the CPU (evaluated on the GPU for GPU inputs: minutes faster)."""
        if self.device == "cuda":
            return reference_gemm_on_device(a, b, a_scale, b_scale).cpu()
        return reference_gemm(a, b, a_scale, b_scale)

    def check(self, out, a, b, a_scale, b_scale, outliers=False):
        """The backend's accuracy class against the float64 reference; NaN/inf positions must match.
        outliers: the inputs hold a few fp8 codes of the largest magnitude (see assert_close_fp8_tensor_core)."""
        if self.name == "cuda":
            assert_close_fp8_tensor_core(out, a, b, a_scale, b_scale, outliers=outliers)
            return
        ref = self.reference(a, b, a_scale, b_scale)
        assert_close_challenge(out, ref)
        if self.tight:
            # The bf16 rounding (2^-9 relative) plus fp32 summation error: at most (127 + K/128) roundings of
            # 2^-24 relative to the sum of |terms| (2^-15 holds up to K = 49152), plus fp32's subnormal step.
            mass = reference_gemm(a.float().abs(), b.float().abs(), a_scale.abs(), b_scale.abs())
            got = out.detach().cpu().to(torch.float64)
            finite = torch.isfinite(ref)
            err = (got - ref).abs()[finite]
            bound = (ref.abs() * 2.0 ** -8 + mass * 2.0 ** -15 + 2.0 ** -120)[finite]
            assert bool((err <= bound).all()), f"max excess {float((err - bound).max()):.3g}"


BACKENDS = {
    "cpu": Backend("cpu", "cpu", 1e9, True, False, lambda: None, {}),
    "cuda": Backend("cuda", "cuda", float("inf"), False, False,
                    lambda: None if _sm90_available() else "needs a CUDA device of compute capability 9.0",
                    {"GEMM_CUDA_EXACT_ACCUMULATION": None}),
    "cuda-exact": Backend("cuda-exact", "cuda", float("inf"), True, False,
                          lambda: None if _sm90_available() else "needs a CUDA device of compute capability 9.0",
                          {"GEMM_CUDA_EXACT_ACCUMULATION": "1"}),
    "gfx942-emulation": Backend("gfx942-emulation", "cpu", 1e8, True, True, _emulation_skip_reason, {}),
}


# ------------------------------------------------------------------------------------------------------
# The gfx942 emulation backend: the one place that knows how the emulator driver is built and called
# (test_gfx942_emulation.py owns the emulator and its own tests; this reuses its build and file helpers).

@functools.lru_cache(maxsize=None)
def _emulator_binary():
    import test_gfx942_emulation as emu

    build = tempfile.mkdtemp(prefix="gemm_gfx942_backend_")
    atexit.register(shutil.rmtree, build, True)
    return emu.compile_program("gfx942_gemm_driver.cpp", os.path.join(build, "driver"), extra_includes=[emu.KERNEL_DIR])


def run_emulated(a, b, a_scale, b_scale, out):
    """The gfx942 kernels on the SIMT emulator: CPU tensors of any strides in, result written into ``out``
    (bf16, any strides) like the op writes it. The driver poisons out's memory first; elements of that
    memory outside the view must still hold the poison afterwards (the kernel wrote nothing else)."""
    import test_gfx942_emulation as emu

    m, k = a.shape
    n = b.shape[0]
    span = 1 + sum((size - 1) * stride for size, stride in zip(out.shape, out.stride()))
    with tempfile.TemporaryDirectory(prefix="gemm_gfx942_case_") as d:
        kv = {"m": m, "n": n, "k": k, "format": 0 if a.dtype == torch.float8_e4m3fnuz else 1}
        for name, t in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
            kv.update(emu.write_tensor(d, name, t))
        kv.update({"out_storage": span, "out_offset": 0, "out_stride0": out.stride(0), "out_stride1": out.stride(1)})
        with open(os.path.join(d, "problem.txt"), "w") as f:
            f.writelines(f"{key} {value}\n" for key, value in kv.items())
        r = emu.run([_emulator_binary(), d])
        assert r.returncode == 0, f"emulated gemm failed (rc {r.returncode}):\n{r.stderr[-4000:]}"
        raw = np.fromfile(os.path.join(d, "out.bin"), np.uint16)
    assert raw.size == span, (raw.size, span)
    memory = torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16)
    written = torch.zeros(span, dtype=torch.bool)
    torch.as_strided(written, out.shape, out.stride()).fill_(True)
    stray = (torch.from_numpy(raw.astype(np.int32))[~written] != 0xFFFF).sum()
    assert stray == 0, f"the kernel wrote {int(stray)} elements of out's memory outside the view"
    out.copy_(torch.as_strided(memory, out.shape, out.stride()))
    return out


def backend_params(cases, ids=None, admit=None):
    """pytest params (backend name, *case) for every backend that admits the case: by default the ones
    whose size budget covers its M*N*K (the case's first three items); ``admit(name, case)`` decides
    instead where a behaviour needs its own selection."""
    admit = admit or (lambda name, case: case[0] * case[1] * case[2] <= BACKENDS[name].max_macs)
    params = []
    for name in BACKENDS:
        for i, case in enumerate(cases):
            if admit(name, case):
                case_id = ids[i] if ids else "-".join(str(x) for x in case)
                params.append(pytest.param(name, *case, id=f"{name}-{case_id}"))
    return params


def use_backend(name, monkeypatch):
    """The Backend called `name`, its environment set for the test; skips where it cannot run here."""
    backend = BACKENDS[name]
    reason = backend.skip_reason()
    if reason:
        pytest.skip(reason)
    for key, value in backend.env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    return backend
