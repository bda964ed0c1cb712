"""`kernels benchmark` workloads for gemm (run: `kernels benchmark kernels-community/gemm --version 1`, or
against a local build: `kernels benchmark ./gemm`, which loads gemm/build/<variant>/).

GPU workloads are DeepSeek-V3 linear-layer shapes from the AMD challenge's timed set, in both layouts the
kernel supports (K-major as DeepSeek/vLLM pass them, M/N-major as the challenge does). On the CPU backend
(a reference implementation, orders of magnitude slower) the same workloads run at 1/16 of M and N and
1/8 of K so the suite finishes in seconds; each row is named after the shape that ran.

Each verify_* returns the float64 reference of the formula rounded to bf16; the runner compares it with
self.out using atol 1e-2 (rtol 1e-5). Scales are drawn so outputs have a standard deviation of about
0.15 (|out| < 1 in practice): a correct kernel differs from the reference by at most one bf16 rounding
step (<= 2^-8 below 1) plus the fp8 tensor-core path's accumulation error (~2^-12 of the sum of |terms|,
about 1e-3 here), while a wrong scale block or a dropped K block moves results by ~0.1.
Cross-implementation comparisons live in the monorepo's top-level benchmarks/.
"""

import math

import torch

from kernels.benchmark import Benchmark

BLOCK = 128


def _fp8_dtype() -> torch.dtype:
    # MI300 (ROCm) decodes e4m3fnuz natively; Hopper and the CPU backend take e4m3fn.
    return torch.float8_e4m3fnuz if torch.version.hip else torch.float8_e4m3fn


def _reference(a, b, a_scale, b_scale) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[0]
    kb = math.ceil(k / BLOCK)
    pad = kb * BLOCK - k
    a64 = torch.nn.functional.pad(a.double(), (0, pad)).view(m, kb, BLOCK)
    b64 = torch.nn.functional.pad(b.double(), (0, pad)).view(n, kb, BLOCK)
    partial = torch.einsum("mkc,nkc->kmn", a64, b64)  # per K block
    row_scale = b_scale.double().repeat_interleave(BLOCK, dim=0)[:n]  # (N, KB)
    out = (partial * a_scale.double().T.unsqueeze(2) * row_scale.T.unsqueeze(1)).sum(0)
    return out.to(torch.bfloat16)


class GemmBenchmark(Benchmark):
    seed = 0

    def _problem(self, m: int, n: int, k: int, layout: str) -> None:
        kb, nb = math.ceil(k / BLOCK), math.ceil(n / BLOCK)
        dtype, dev = _fp8_dtype(), self.device
        # std(out) ~ sqrt(KB) * sqrt(128) * scale_std^2 (standard-normal fp8 values): aim at 0.15
        scale_std = math.sqrt(0.15 / (math.sqrt(min(k, BLOCK)) * math.sqrt(kb)))
        if layout == "k_major":
            self.a = torch.randn(m, k, device=dev).to(dtype)
            self.b = torch.randn(n, k, device=dev).to(dtype)
            self.a_scale = torch.randn(m, kb, device=dev) * scale_std
            self.b_scale = torch.randn(nb, kb, device=dev) * scale_std
        else:  # the challenge's M/N-contiguous tensors: transposed views of (K, M) / (K, N) data
            self.a = torch.randn(k, m, device=dev).to(dtype).T
            self.b = torch.randn(k, n, device=dev).to(dtype).T
            self.a_scale = (torch.randn(kb, m, device=dev) * scale_std).T
            self.b_scale = (torch.randn(kb, nb, device=dev) * scale_std).T
        self.out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=dev)

    def _run(self):
        self.kernel.gemm(self.a, self.b, self.a_scale, self.b_scale, out=self.out)

    def _verify(self) -> torch.Tensor:
        return _reference(self.a, self.b, self.a_scale, self.b_scale)



# DeepSeek-V3 shapes (M tokens, N out features, K in features) and layouts; N = 576 is not a multiple of 128
# (the last scale row covers 64 rows of b).
WORKLOADS = [(1024, 1536, 7168, "k_major"), (1024, 1536, 7168, "mn_major"), (6144, 7168, 2048, "k_major"),
             (1024, 576, 7168, "k_major")]


def run_shape(m: int, n: int, k: int, on_gpu: bool):
    """The shape a workload runs at: as listed on a GPU, cut to 1/16 of M and N and 1/8 of K on the CPU."""
    return (m, n, k) if on_gpu else (max(1, m // 16), max(1, n // 16), max(1, k // 8))


def _add_workloads(cls, on_gpu: bool):
    """setup_/benchmark_/verify_ methods named after the shape that actually runs (`kernels benchmark` labels the
    rows with the method names), so the CPU rows say m64_n96_k896 where the GPU ones say m1024_n1536_k7168."""
    for m, n, k, layout in WORKLOADS:
        rm, rn, rk = run_shape(m, n, k, on_gpu)
        name = f"m{rm}_n{rn}_k{rk}_{layout.replace('_', '')}"

        def setup(self, shape=(rm, rn, rk), layout=layout):
            self._problem(*shape, layout)

        setattr(cls, f"setup_{name}", setup)
        setattr(cls, f"benchmark_{name}", lambda self: self._run())
        setattr(cls, f"verify_{name}", lambda self: self._verify())


# `kernels benchmark` runs on torch's GPU where there is one (CUDA or ROCm), else on the CPU.
_add_workloads(GemmBenchmark, on_gpu=torch.cuda.is_available())
