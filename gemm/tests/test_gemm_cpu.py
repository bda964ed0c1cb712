"""Properties of the CPU backend alone: threads, bit-reproducibility, its two micro-kernels, its fma, and
the documented fp32 behaviour outside the guaranteed range. What every backend must do is in test_gemm.py."""
import os
import subprocess

import pytest
import torch

import gemm
from host_cxx import host_cxx
from reference import FP8_DTYPES, LAYOUTS, assert_close_challenge, make_inputs, poisoned_out, reference_gemm

FN = torch.float8_e4m3fn


def run(a, b, a_scale, b_scale):
    out = poisoned_out(a.shape[0], b.shape[0])
    result = gemm.gemm(a, b, a_scale, b_scale, out=out)
    assert result is out
    return out


def thread_cpu_ticks():
    """CPU time (user + system, in clock ticks) that each OS thread of this process has used so far."""
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:  # the thread has ended
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 of proc(5) onwards
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    return ticks


def busy_threads(call, min_ticks=2, attempts=3):
    """How many threads each used at least ``min_ticks`` of CPU time while ``call`` ran (the most seen in
    ``attempts`` runs: on a loaded machine a helper thread may start late and find the work done)."""
    most = 0
    for _ in range(attempts):
        before = thread_cpu_ticks()
        call()
        after = thread_cpu_ticks()
        most = max(most, sum(after[t] - before.get(t, 0) >= min_ticks for t in after))
    return most


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_work_runs_on_the_requested_number_of_threads(restore_num_threads):
    # A compute-bound call (about 0.1 s of work per thread at 2 threads): with torch.set_num_threads(2)
    # two OS threads must accumulate CPU time, with 1 only the calling thread. No timing threshold.
    a, b, a_scale, b_scale = make_inputs(768, 1024, 2048, FN, "k_major", seed=13)
    out = poisoned_out(768, 1024)
    call = lambda: gemm.gemm(a, b, a_scale, b_scale, out=out)  # noqa: E731
    torch.set_num_threads(2)
    call()  # starts torch's inter-op pool
    assert busy_threads(call) >= 2
    torch.set_num_threads(1)
    assert busy_threads(call, attempts=1) == 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bits_do_not_depend_on_thread_count_or_layout(layout, restore_num_threads):
    # With 1 thread one worker computes every tile; with more, tiles (of other sizes: they follow the
    # thread count) are spread over the workers: the bits must not change.
    a, b, a_scale, b_scale = make_inputs(200, 333, 1000, torch.float8_e4m3fnuz, layout, seed=11)
    torch.set_num_threads(1)
    single = run(a, b, a_scale, b_scale)
    torch.set_num_threads(max(2, restore_num_threads))
    multi = run(a, b, a_scale, b_scale)
    other = run(a.T.contiguous().T if layout == "k_major" else a.contiguous(), b.contiguous(), a_scale, b_scale)
    assert torch.equal(single, multi)
    assert torch.equal(single, other)


@pytest.mark.parametrize("dtype", FP8_DTYPES)
def test_portable_path_matches_simd_path(dtype, monkeypatch):
    # The portable (non-AVX2) micro-kernel runs on other CPUs; it must give the same bits.
    a, b, a_scale, b_scale = make_inputs(50, 300, 700, dtype, "mn_major", seed=12)
    default = run(a, b, a_scale, b_scale)
    monkeypatch.setenv("FP8GEMM_CPU_GENERIC", "1")
    portable = run(a, b, a_scale, b_scale)
    assert torch.equal(default, portable)
    assert_close_challenge(portable, reference_gemm(a, b, a_scale, b_scale))


def test_fma_emulation_is_correctly_rounded(tmp_path):
    # The portable path's fp32 fma emulation (targets without hardware FMA), bit for bit vs libm.
    here = os.path.dirname(os.path.abspath(__file__))
    cxx = host_cxx()
    if cxx is None:
        pytest.fail("no C++ compiler found (set CXX)")
    exe = str(tmp_path / "fma_selftest")
    cmd = [cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-DFP8GEMM_EMULATE_FMA",
           "-I", os.path.join(os.path.dirname(here), "gemm_cpu"), os.path.join(here, "fma_f32_selftest.cpp"),
           "-o", exe, "-lm"]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr


# Outside the guaranteed range (README, "Numerical range") the CPU result is what the documented fp32
# order gives, even where the float64 formula is finite.
def _uniform(m, n, k, value, a_scale, b_scale):
    a = torch.full((m, k), value).to(FN)
    b = torch.full((n, k), value).to(FN)
    kb = (k + 127) // 128
    return a, b, torch.full((m, kb), a_scale), torch.full(((n + 127) // 128, kb), b_scale)


def test_scale_product_overflow_gives_inf():
    # 1e20 * 1e19 = 1e39 is beyond fp32 (3.4e38): s = inf, inf * partial = inf. The formula: 1e39 * 2^-12.
    a, b, a_scale, b_scale = _uniform(2, 3, 1, 2.0 ** -6, 1e20, 1e19)
    assert torch.isfinite(reference_gemm(a, b, a_scale, b_scale)).all()
    assert torch.equal(run(a, b, a_scale, b_scale).float(), torch.full((2, 3), float("inf")))


def test_scale_product_overflow_times_zero_data_gives_nan():
    # All-zero data with scales 1e30: s = inf, inf * 0 = NaN, where the formula gives 0.
    a, b, a_scale, b_scale = _uniform(2, 3, 200, 0.0, 1e30, 1e30)
    assert torch.equal(reference_gemm(a, b, a_scale, b_scale), torch.zeros(2, 3, dtype=torch.float64))
    assert run(a, b, a_scale, b_scale).isnan().all()


def test_sum_beyond_fp32_gives_inf():
    # Two blocks adding 2^127 each: the fp32 accumulator overflows to inf; the formula gives 2^128.
    a, b, a_scale, b_scale = _uniform(1, 1, 256, 1.0, 2.0 ** 60, 2.0 ** 60)  # s = 2^120, partial = 2^7
    assert torch.equal(run(a, b, a_scale, b_scale).float(), torch.full((1, 1), float("inf")))
    assert reference_gemm(a, b, a_scale, b_scale).item() == 2.0 ** 128


def test_tiny_scale_products_lose_precision_as_fp32_subnormals():
    # s = 2^-75 * 2^-75 = 2^-150 rounds to 0 in fp32 (below half the smallest subnormal, 2^-149): the
    # result is 0 where the formula gives 2^-150 * 128 = 2^-143.
    a, b, a_scale, b_scale = _uniform(1, 1, 128, 1.0, 2.0 ** -75, 2.0 ** -75)
    assert reference_gemm(a, b, a_scale, b_scale).item() == 2.0 ** -143
    assert run(a, b, a_scale, b_scale).float().item() == 0.0
