#!/usr/bin/env python3
"""The gemm kernel on an H200 against what its users would otherwise run, in one device call.

    python3 benchmarks/gemm_bench.py [--suites challenge,deepgemm,decode,finegrained] [--tune]
                                     [--calibrate-decode] [--reps N] [--out DIR]
    python3 benchmarks/gemm_bench.py --render DIR/gemm_h200.json [--out DIR]     (tables and plot, no GPU)

Suites (every result of ours is checked against a float64 reference before it is timed):
  challenge    the 18 timed shapes of the AMD challenge: ours on K-major inputs and on challenge-layout
               (M/N-contiguous) inputs, torch._scaled_mm blockwise (1x128 / 128x128 scales) and per-tensor
               (less work: a ceiling reference); median kernel time with the L2 flushed before each call.
  deepgemm     DeepGEMM's 18 dense-model shapes, K-major, against torch blockwise and DeepGEMM's published
               H800 TFLOPS (README of deepseek-ai/DeepGEMM, 2025-04-09).
  decode       M in {1..64} on DeepSeek-V3 linear shapes: kernel time from CUDA-graph replays, L2 flushed
               before each replay and back to back (10 calls per graph), weight bytes per second against
               the device-to-device copy bandwidth measured in the same run; torch blockwise where it
               accepts the shape and torch's bf16 mm of the same shape.
  finegrained  matmul_2d from bf16 activations (fp8_act_quant + the GEMM) on DeepSeek-V3 linear shapes for
               M in {1, 16, 64, 512, 4096}, with the quantization alone (its share), against torch doing
               the same job (per-group quantization, eager and compiled, then blockwise _scaled_mm) and
               against our unfused path (plain-torch quantization + gemm.gemm).
  sustained    DeepGEMM's M = 4096 shapes called back to back for a few seconds each (ours, torch blockwise,
               torch per-tensor) while nvidia-smi samples the SM clock, power and clock-limit reasons: the
               TFLOP/s the board sustains and the dense FP8 tensor peak at the clock it holds; where Nsight
               Compute (ncu) is installed, one call of ours per shape profiled at unlocked clocks (tensor-pipe
               utilisation, issue activity, the largest stall reasons).
--tune times every tile / CUTLASS configuration on the challenge shapes (how gemm_cuda.cu's table is made);
--calibrate-decode times every decode plan (rows per CTA x K split) against the cost model's choice.
Writes gemm_h200.json, gemm_h200.md and gemm_h200.png to --out (default benchmarks/out/, ignored by git).
"""
import argparse
import csv
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEAK_FP8_TFLOPS = 1979.0  # dense FP8 peak of the H200 SXM (NVIDIA datasheet)
FP8_TC_REL = 2.0 ** -12   # Hopper's fp8 tensor cores keep ~13 fraction bits inside a K block
RTOL, ATOL = 2e-2, 1e-3   # the challenge's tolerance

CHALLENGE_SHAPES = [(m, n, k) for m in (1024, 6144)
                    for (n, k) in ((1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048),
                                   (4608, 7168), (7168, 2304), (512, 7168), (4096, 512))]
# DeepGEMM README (deepseek-ai/DeepGEMM, 2025-04-09): dense GEMM TFLOPS on H800 SXM5, NVCC 12.8.
DEEPGEMM_PUBLISHED = {
    (64, 2112, 7168): 206, (64, 24576, 1536): 289, (64, 32768, 512): 219, (64, 7168, 16384): 336,
    (64, 4096, 7168): 287, (64, 7168, 2048): 295, (128, 2112, 7168): 352, (128, 24576, 1536): 535,
    (128, 32768, 512): 358, (128, 7168, 16384): 645, (128, 4096, 7168): 533, (128, 7168, 2048): 510,
    (4096, 2112, 7168): 1127, (4096, 24576, 1536): 1212, (4096, 32768, 512): 775, (4096, 7168, 16384): 1520,
    (4096, 4096, 7168): 1410, (4096, 7168, 2048): 1168,
}
DECODE_NK = [(1536, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048),
             (36864, 7168), (7168, 18432)]
DECODE_M = [1, 2, 4, 8, 16, 32, 64]
FINEGRAINED_M = [1, 16, 64, 512, 4096]
# Interleaved rounds of the finegrained suite's timings (Timer.graphs).
FINEGRAINED_ROUNDS = 3
SUSTAINED_SHAPES = [s for s in DEEPGEMM_PUBLISHED if s[0] == 4096]
# Dense FP8 wgmma FLOPs per SM and clock on Hopper: 1979 TFLOP/s = 132 SMs x 1830 MHz x 8192 (NVIDIA datasheet).
FP8_FLOP_PER_SM_CLOCK = 8192
# nvidia-smi's clock event reason bits.
CLOCK_REASONS = {0x1: "idle", 0x2: "application clocks", 0x4: "power cap", 0x8: "hw slowdown", 0x20: "sw thermal",
                 0x40: "hw thermal", 0x80: "power brake", 0x100: "display clocks"}
TILE_KERNELS = ["tile128x128", "tile64x128", "tile128x192", "tile128x64", "tile192x128", "tile192x144", "tile64x64",
                "tile64x32", "tile256x128", "tile64x48", "tile64x96", "tile128x96"]


def cdiv(a, b):
    return (a + b - 1) // b


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


# ----------------------------------------------------------------------------------------------
# Inputs, reference, checks
# ----------------------------------------------------------------------------------------------
def make_inputs(torch, m, n, k, layout, gen, dtype=None):
    """a (m, k), b (n, k) fp8 e4m3fn from standard normals, scales standard normal.
    kmajor:   a, b K-contiguous; a_scale M-contiguous, b_scale K-contiguous with a 4-padded row stride
              (the layouts torch._scaled_mm's blockwise recipe takes; ours reads them in place);
    deepseek: everything row-major (a_scale (m, kb) contiguous), what vLLM / DeepSeek pass;
    mnmajor:  the AMD challenge layout: a, b, a_scale, b_scale M/N-contiguous."""
    dtype = dtype or torch.float8_e4m3fn
    kb, nb = cdiv(k, 128), cdiv(n, 128)
    dev = "cuda"

    def fp8(*shape):
        return torch.randn(*shape, device=dev, generator=gen, dtype=torch.bfloat16).to(dtype)

    if layout == "mnmajor":
        return dict(a=fp8(k, m).t(), b=fp8(k, n).t(), a_scale=torch.randn(kb, m, device=dev, generator=gen).t(),
                    b_scale=torch.randn(kb, nb, device=dev, generator=gen).t())
    a, b = fp8(m, k), fp8(n, k)
    if layout == "deepseek":
        return dict(a=a, b=b, a_scale=torch.randn(m, kb, device=dev, generator=gen),
                    b_scale=torch.randn(nb, kb, device=dev, generator=gen))
    return dict(a=a, b=b, a_scale=torch.randn(kb, m, device=dev, generator=gen).t(),
                b_scale=torch.randn(nb, cdiv(kb, 4) * 4, device=dev, generator=gen)[:, :kb])


def torch_layout(torch, inp):
    """The same values in the layouts torch._scaled_mm blockwise takes (copies where needed)."""
    a, b, sa, sb = inp["a"], inp["b"], inp["a_scale"], inp["b_scale"]
    nb, kb = sb.shape
    sb_pad = torch.zeros((nb, cdiv(kb, 4) * 4), device=sb.device, dtype=sb.dtype)
    sb_pad[:, :kb] = sb
    return dict(a=a.contiguous(), b=b.contiguous(), a_scale=sa.t().contiguous().t(), b_scale=sb_pad[:, :kb])


def reference(torch, inp):
    """(ref, mass) in float64 on the GPU: the formula, and the same formula on |terms|."""
    a, b, sa, sb = inp["a"], inp["b"], inp["a_scale"], inp["b_scale"]
    m, k = a.shape
    n = b.shape[0]
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    sbr = sb.to(torch.float64).repeat_interleave(128, dim=0)[:n]
    ref = torch.zeros((m, n), dtype=torch.float64, device=a.device)
    mass = torch.zeros_like(ref)
    for kb in range(cdiv(k, 128)):
        cols = slice(kb * 128, min(k, kb * 128 + 128))
        part = a64[:, cols] @ b64[:, cols].t()
        scale = sa[:, kb].to(torch.float64)[:, None] * sbr[None, :, kb]
        ref += scale * part
        mass += scale.abs() * (a64[:, cols].abs() @ b64[:, cols].abs().t())
    return ref, mass


def check(torch, out, ref_mass):
    """The fp8 tensor-core bound: |out - ref| <= atol + rtol |ref| + 2^-12 sum|terms|, NaNs equal."""
    ref, mass = ref_mass
    o = out.to(torch.float64)
    if not torch.equal(torch.isnan(o), torch.isnan(ref)):
        return False
    keep = ~torch.isnan(ref)
    return bool(((o - ref).abs()[keep] <= (ATOL + RTOL * ref.abs() + FP8_TC_REL * mass)[keep]).all())


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------
class Timer:
    """The L2 (60 MB on the H200) is flushed by reading a 512 MB buffer: it then holds only clean lines,
    so the timed call pays no write-back of a flush's dirty lines (what zeroing a buffer would leave)."""

    def __init__(self, torch, reps):
        self.torch = torch
        self.reps = reps
        self.flush_buf = torch.ones(128 << 20, dtype=torch.int32, device="cuda")
        self.flush_sum = torch.empty((), dtype=torch.int64, device="cuda")

    def flush(self):
        self.torch.sum(self.flush_buf, dim=0, dtype=self.torch.int64, out=self.flush_sum)

    def events(self, fn, flush=True):
        """Median µs of fn between CUDA events, the L2 flushed before each call (the host enqueues fn
        while the GPU reads the flush buffer, so launch overhead is hidden)."""
        torch = self.torch
        for _ in range(3):
            fn()
        times = []
        for _ in range(self.reps):
            if flush:
                self.flush()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        return statistics.median(times)

    def _capture(self, fn, calls):
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        for _ in range(2):
            g.replay()
        return g

    def _replays(self, g, calls, flush):
        """Median µs per call over `reps` replays of g."""
        torch = self.torch
        times = []
        for _ in range(self.reps):
            if flush:
                self.flush()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            g.replay()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3 / calls)
        return statistics.median(times)

    def graph(self, fn, calls=1, flush=True):
        """Median µs per call of a CUDA graph holding `calls` back-to-back calls of fn."""
        g = self._capture(fn, calls)
        us = self._replays(g, calls, flush)
        del g
        return us

    def graphs(self, fns, rounds=3, flush=True):
        """{name: µs} for a dict of callables, each captured in its own CUDA graph (one call) and replayed in
        `rounds` interleaved rounds of `reps` replays: the median of its rounds' medians. Clocks that drift
        during the measurement (a long GEMM under the power cap heats the GPU) then weigh on all alike."""
        graphs = {name: self._capture(fn, 1) for name, fn in fns.items()}
        per_round = {name: [] for name in fns}
        for _ in range(rounds):
            for name, g in graphs.items():
                per_round[name].append(self._replays(g, 1, flush))
        del graphs
        return {name: statistics.median(v) for name, v in per_round.items()}

    _flush_names = None  # the flush's kernel names, learned by the first kernels() call

    def kernels(self, fn, flush=True):
        """Mean µs per call of the GPU kernels fn launches, from the profiler's kernel records (launch gaps
        excluded), the L2 flushed before each call; the flush's own kernels are left out by name."""
        torch = self.torch
        if self._flush_names is None:
            self._flush_names = {e.name for e in kernel_records(torch, self.flush)}
        flush_names = self._flush_names
        fn()
        torch.cuda.synchronize()

        def body():
            for _ in range(self.reps):
                if flush:
                    self.flush()
                fn()

        return sum(e.device_time for e in kernel_records(torch, body) if e.name not in flush_names) / self.reps


def kernel_records(torch, body):
    """The GPU kernel records (name, device_time in µs) of the torch.profiler trace of body(), run to completion."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        body()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == DeviceType.CUDA]


def copy_bandwidth(torch, timer):
    """Device-to-device copy of 2 GiB: bytes read plus written per second."""
    src = torch.empty(2 << 30, dtype=torch.int8, device="cuda")
    dst = torch.empty_like(src)
    us = timer.events(lambda: dst.copy_(src), flush=False)
    return 2 * (2 << 30) / (us * 1e-6)


class env_var:
    def __init__(self, name, value):
        self.name, self.value, self.old = name, value, None

    def __enter__(self):
        self.old = os.environ.get(self.name)
        if self.value is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.value

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.old


def tflops(m, n, k, us):
    return 2.0 * m * n * k / (us * 1e-6) / 1e12 if us else float("nan")


# ----------------------------------------------------------------------------------------------
# Suites
# ----------------------------------------------------------------------------------------------
def try_time(fn, timer_fn):
    """timer_fn(fn) for a baseline, or None where it refuses the shape (torch's blockwise cuBLAS path
    raises for M = 1, for example)."""
    try:
        fn()
    except RuntimeError:
        return None
    return timer_fn(fn)


def ours(gemm, inp, out):
    a, b, sa, sb = inp["a"], inp["b"], inp["a_scale"], inp["b_scale"]
    return lambda: gemm.gemm(a, b, sa, sb, out=out)


def torch_blockwise(torch, tinp):
    a, b, sa, sb = tinp["a"], tinp["b"], tinp["a_scale"], tinp["b_scale"]
    return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)


def torch_tensorwise(torch, tinp):
    a, b = tinp["a"], tinp["b"]
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def run_checked(torch, fn, out, ref):
    out.fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    return check(torch, out, ref)


def suite_smoke(torch, gemm, log):
    """A few checked calls through every kernel family, each in its own try, before anything long runs."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = [((m, n, k), cfg) for (m, n, k) in ((1, 576, 7168), (16, 7168, 2048), (64, 257, 1000), (33, 4100, 7000))
             for cfg in (None, "decode,splitk,1,64", "decode,splitk,3,128", "decode,splitk,8,128")]
    cases += [((1024, 7168, 256), c) for c in (None, "tile128x128,dp,1,8", "tile64x128,dp,1,8", "tile128x64,dp,1,8",
                                               "tile192x128,dp,1,8", "cutlass128x128,dp,1,1")]
    rows = []
    for (m, n, k), cfg in cases:
        inp = make_inputs(torch, m, n, k, "deepseek", gen)
        out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        with env_var("GEMM_CUDA_CONFIG", cfg):
            try:
                ok = run_checked(torch, ours(gemm, inp, out), out, reference(torch, inp))
            except RuntimeError as e:
                ok = False
                log(f"smoke {m}x{n}x{k} {cfg}: {e}")
        rows.append(dict(m=m, n=n, k=k, cfg=cfg, ok=ok))
        log(f"smoke {m}x{n}x{k} {cfg or 'dispatch'}: ok={ok}")
    return rows


def suite_challenge(torch, gemm, timer, shapes, log):
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(1)
    for (m, n, k) in shapes:
        inp = make_inputs(torch, m, n, k, "kmajor", gen)
        ref = reference(torch, inp)
        out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        f = ours(gemm, inp, out)
        ok = run_checked(torch, f, out, ref)
        r = dict(m=m, n=n, k=k, ok=ok, ours_us=timer.events(f))
        tinp = torch_layout(torch, inp)
        tb = torch_blockwise(torch, tinp)
        r["torch_us"] = try_time(tb, timer.events)
        if r["torch_us"] is not None:
            r["torch_ok"] = check(torch, tb(), ref)
        r["torch_tensorwise_us"] = try_time(torch_tensorwise(torch, tinp), timer.events)
        mn = {key: v for key, v in zip(("a", "b", "a_scale", "b_scale"),
                                        (inp["a"].t().contiguous().t(), inp["b"].t().contiguous().t(),
                                         inp["a_scale"], inp["b_scale"].t().contiguous().t()))}
        out_mn = torch.empty_like(out)
        f_mn = ours(gemm, mn, out_mn)
        r["ours_mn_ok"] = run_checked(torch, f_mn, out_mn, ref)
        r["ours_mn_us"] = timer.events(f_mn)
        r["speedup"] = r["torch_us"] / r["ours_us"] if r["torch_us"] else None
        r["tflops"] = tflops(m, n, k, r["ours_us"])
        rows.append(r)
        log(f"challenge {m}x{n}x{k}: ours {r['ours_us']:.1f} us ({r['tflops']:.0f} TFLOPS, ok={ok}), torch "
            f"{r['torch_us'] or float('nan'):.1f}, x{r['speedup'] or float('nan'):.3f}; MN {r['ours_mn_us']:.1f}")
        del inp, ref, tinp, mn
    return rows


def suite_deepgemm(torch, gemm, timer, log):
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(2)
    for (m, n, k), published in DEEPGEMM_PUBLISHED.items():
        inp = make_inputs(torch, m, n, k, "kmajor", gen)
        ref = reference(torch, inp)
        out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        f = ours(gemm, inp, out)
        ok = run_checked(torch, f, out, ref)
        us = timer.events(f)
        tb = torch_blockwise(torch, torch_layout(torch, inp))
        t_us = try_time(tb, timer.events)
        r = dict(m=m, n=n, k=k, ok=ok, ours_us=us, tflops=tflops(m, n, k, us), torch_us=t_us,
                 torch_tflops=tflops(m, n, k, t_us) if t_us else None, deepgemm_h800_tflops=published)
        r["vs_deepgemm"] = r["tflops"] / published
        # The profiler's kernel time (L2 flushed), as DeepGEMM's own table is measured: no launch gaps.
        r["ours_kernel_us"] = timer.kernels(f)
        r["kernel_tflops"] = tflops(m, n, k, r["ours_kernel_us"])
        r["vs_deepgemm_kernel"] = r["kernel_tflops"] / published
        r["torch_kernel_us"] = try_time(tb, timer.kernels)
        rows.append(r)
        log(f"deepgemm {m}x{n}x{k}: ours {us:.1f} us {r['tflops']:.0f} TFLOPS (ok={ok}) vs DeepGEMM {published}, "
            f"torch {r['torch_tflops'] or float('nan'):.0f}")
        del inp, ref
    return rows


def _clock_reason_field():
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        try:
            if subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv"], capture_output=True,
                              timeout=20).returncode == 0:
                return field
        except (OSError, subprocess.TimeoutExpired):
            return None
    return None


def _reasons(mask):
    names = [name for bit, name in CLOCK_REASONS.items() if mask & bit]
    return ", ".join(names) or "none"


def run_sustained(torch, fn, seconds, reason_field):
    """fn called back to back for `seconds` while nvidia-smi samples every 50 ms: µs per call, and the median
    SM clock (MHz), its minimum, the median power (W) and the clock-limit reasons seen, over the samples of the
    last three quarters (the first quarter is the ramp)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    mon = None
    if reason_field:
        mon = subprocess.Popen(["nvidia-smi", f"--query-gpu=clocks.sm,power.draw,{reason_field}",
                                "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
        time.sleep(0.3)
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        calls += 10
        torch.cuda.synchronize()
    r = dict(us=(time.perf_counter() - t0) / calls * 1e6)
    if mon:
        mon.terminate()
        samples = []
        for line in mon.communicate()[0].splitlines():
            parts = [x.strip() for x in line.split(",")]
            try:
                samples.append((float(parts[0]), float(parts[1]), int(parts[2], 16)))
            except (ValueError, IndexError):
                pass
        samples = samples[len(samples) // 4:]
        if samples:
            mask = 0
            for _, _, m in samples:
                mask |= m
            r.update(sm_clock_mhz=statistics.median(x[0] for x in samples), sm_clock_min_mhz=min(x[0] for x in samples),
                     power_w=statistics.median(x[1] for x in samples), clock_reasons=_reasons(mask), samples=len(samples))
    return r


def ncu_metrics(ncu):
    """The metrics asked of Nsight Compute: time, SM clock, issue activity, the tensor pipes' busy cycles and
    every per-issue stall ratio this ncu knows for the device."""
    fixed = ["gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
             "smsp__issue_active.avg.pct_of_peak_sustained_active", "sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    try:
        listing = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return fixed
    names = {line.split()[0] for line in listing.splitlines() if line.strip() and "__" in line.split()[0]}
    tensor = sorted(n + ".avg.pct_of_peak_sustained_elapsed" for n in names
                    if n.startswith("sm__pipe_tensor") and n.endswith("cycles_active"))
    stalls = sorted(n + ".ratio" for n in names
                    if n.startswith("smsp__average_warps_issue_stalled_") and n.endswith("_per_issue_active"))
    return fixed + tensor + stalls


def ncu_profile(m, n, k, metrics):
    """One call of ours at m x n x k (the third, after two warm-ups) under Nsight Compute with the clocks left
    to the board: {metric: value} of the GEMM kernel, or {"error": text}."""
    ncu = shutil.which("ncu")
    cmd = [ncu, "--clock-control", "none", "-k", "regex:[Gg]emm", "-s", "2", "-c", "1", "--csv", "--page", "raw",
           "--metrics", ",".join(metrics), sys.executable, os.path.abspath(__file__), "--profile-one", f"{m},{n},{k}"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        return {"error": "ncu timed out"}
    rows = [line for line in res.stdout.splitlines() if line.startswith('"')]
    if res.returncode != 0 or len(rows) < 3:
        return {"error": (res.stderr or res.stdout)[-600:]}
    head, units, values = list(csv.reader(rows[:3]))
    out = {"kernel": values[head.index("Kernel Name")] if "Kernel Name" in head else None}
    for name, unit, value in zip(head, units, values):
        if name in metrics:
            try:
                out[name] = (float(value.replace(",", "")), unit)
            except ValueError:
                pass
    return out


_TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
_RATE_UNITS = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9, "cycle/second": 1.0, "cycle/usecond": 1e6,
               "cycle/nsecond": 1e9}


def ncu_derived(r):
    """From a sustained row's ncu record: kernel µs, SM clock, TFLOP/s, the largest tensor-pipe busy share,
    the tensor peak at that clock and the share of it DeepGEMM's published number needs; None without them."""
    p = r.get("ncu") or {}
    t, clk = p.get("gpu__time_duration.sum"), p.get("sm__cycles_elapsed.avg.per_second")
    if not t or not clk or t[1].lower() not in _TIME_UNITS or clk[1].lower() not in _RATE_UNITS:
        return None
    us, hz = t[0] * _TIME_UNITS[t[1].lower()], clk[0] * _RATE_UNITS[clk[1].lower()]
    peak = peak_at_clock(r["sms"], hz)
    tensor = [v[0] for key, v in p.items() if key.startswith("sm__pipe_tensor") and isinstance(v, (list, tuple))]
    stalls = sorted(((v[0], key[len("smsp__average_warps_issue_stalled_"):-len("_per_issue_active.ratio")])
                     for key, v in p.items() if key.startswith("smsp__average_warps_issue_stalled_")
                     and isinstance(v, (list, tuple))), reverse=True)[:4]
    issue = p.get("smsp__issue_active.avg.pct_of_peak_sustained_active")
    return dict(kernel=(p.get("kernel") or "?").replace("void ", "").split("(")[0], us=us, sm_clock_mhz=hz / 1e6,
                tflops=tflops(r["m"], r["n"], r["k"], us), tensor_busy_pct=max(tensor) if tensor else None,
                issue_busy_pct=issue[0] if issue else None, top_stalls=stalls, peak_at_clock_tflops=peak,
                deepgemm_needs=r["deepgemm_h800_tflops"] / peak)


def peak_at_clock(sms, hz):
    """The dense FP8 tensor peak (TFLOP/s) of `sms` SMs at an SM clock of `hz`."""
    return sms * FP8_FLOP_PER_SM_CLOCK * hz / 1e12


def profile_one(torch, gemm, shape):
    m, n, k = (int(x) for x in shape.split(","))
    inp = make_inputs(torch, m, n, k, "kmajor", torch.Generator(device="cuda").manual_seed(3))
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    f = ours(gemm, inp, out)
    for _ in range(3):
        f()
    torch.cuda.synchronize()


def suite_sustained(torch, gemm, log, seconds=2.0):
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(4)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    field = _clock_reason_field()
    ncu = shutil.which("ncu")
    metrics = ncu_metrics(ncu) if ncu else None
    for (m, n, k) in SUSTAINED_SHAPES:
        inp = make_inputs(torch, m, n, k, "kmajor", gen)
        out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        f = ours(gemm, inp, out)
        ok = run_checked(torch, f, out, reference(torch, inp))
        tinp = torch_layout(torch, inp)
        r = dict(m=m, n=n, k=k, ok=ok, sms=sms, deepgemm_h800_tflops=DEEPGEMM_PUBLISHED[(m, n, k)], impls={})
        for name, fn in (("ours", f), ("torch blockwise", torch_blockwise(torch, tinp)),
                         ("torch per-tensor", torch_tensorwise(torch, tinp))):
            s = run_sustained(torch, fn, seconds, field)
            s["tflops"] = tflops(m, n, k, s["us"])
            if "sm_clock_mhz" in s:
                s["peak_at_clock_tflops"] = peak_at_clock(sms, s["sm_clock_mhz"] * 1e6)
                s["share_of_peak"] = s["tflops"] / s["peak_at_clock_tflops"]
            r["impls"][name] = s
            log(f"sustained {m}x{n}x{k} {name}: {json.dumps(s)}")
        if ncu:
            r["ncu"] = ncu_profile(m, n, k, metrics)
            d = ncu_derived(r)
            log(f"ncu {m}x{n}x{k}: {json.dumps(d)}" if d else f"ncu {m}x{n}x{k}: {json.dumps(r['ncu'])[:800]}")
        rows.append(r)
        del inp, tinp
    return rows


def launch_floor(torch, timer):
    """µs of a one-element fill by the same graph methods: what a launch costs whatever the kernel does."""
    x = torch.empty(1, device="cuda")
    f = lambda: x.fill_(1.0)  # noqa: E731
    return dict(flushed_us=timer.graph(f, 1, True), b2b_us=timer.graph(f, 10, False), kernel_us=timer.kernels(f))


class StreamRead:
    """The bare streaming-read kernels of stream_read.cu, built with nvcc into out_dir and called through
    ctypes: ceiling(ptr, nbytes) is the fastest kernel time (profiler, L2 flushed) over a few launch shapes,
    what reading those bytes once costs on this GPU with no GEMM around it."""

    # (CTAs per SM, threads, loads in flight per thread) and (CTAs per SM, chunk bytes, stages): the best of a
    # wider sweep on the H200 over the decode weights' sizes.
    VEC = ((4, 512, 4), (4, 256, 8), (2, 512, 4), (4, 512, 8))
    BULK = ((1, 16384, 12), (2, 16384, 6), (4, 16384, 3), (8, 8192, 3))

    def __init__(self, torch, timer, out_dir):
        import ctypes
        from torch.utils.cpp_extension import CUDA_HOME
        self.torch, self.timer, self.ctypes = torch, timer, ctypes
        nvcc = shutil.which("nvcc") or (os.path.join(CUDA_HOME, "bin", "nvcc") if CUDA_HOME else None)
        if not nvcc or not os.path.exists(nvcc):
            raise RuntimeError("nvcc not found")
        major, minor = torch.cuda.get_device_capability()
        arch = f"sm_{major}{minor}{'a' if major >= 9 else ''}"
        lib = os.path.join(out_dir, "stream_read.so")
        subprocess.run([nvcc, "-std=c++17", "-O3", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC",
                        os.path.join(HERE, "stream_read.cu"), "-o", lib], check=True, capture_output=True)
        self.lib = ctypes.CDLL(lib)
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.sink = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.bulk = major >= 9

    def ceiling(self, ptr, nbytes):
        """(µs, launch shape) of the fastest bare read of nbytes (a multiple of 16) from ptr."""
        c, torch = self.ctypes, self.torch
        args = (c.c_void_p(ptr), c.c_longlong(nbytes), c.c_void_p(self.sink.data_ptr()))
        stream = lambda: c.c_void_p(torch.cuda.current_stream().cuda_stream)  # noqa: E731
        cands = [(f"vec {g}x{self.sms} CTAs x {t} threads, {u} loads",
                  lambda g=g, t=t, u=u: self.lib.stream_read_vec_launch(*args, self.sms * g, t, u, stream()))
                 for g, t, u in self.VEC]
        if self.bulk:
            cands += [(f"bulk {g}x{self.sms} CTAs, {s} x {ch // 1024} KB ring",
                       lambda g=g, ch=ch, s=s: self.lib.stream_read_bulk_launch(*args, self.sms * g, ch, s, stream()))
                      for g, ch, s in self.BULK]
        best = None
        for name, f in cands:
            if f() != 0:
                continue
            torch.cuda.synchronize()
            us = self.timer.kernels(f)
            if best is None or us < best[0]:
                best = (us, name)
        return best


def suite_decode(torch, gemm, timer, copy_bw, log, ms=DECODE_M, nks=DECODE_NK, out_dir=None):
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(3)
    try:
        reader = StreamRead(torch, timer, out_dir or os.path.join(HERE, "out"))
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        log(f"decode: no streaming-read ceiling ({e})")
        reader = None
    for (n, k) in nks:
        w_bf16 = None
        ceiling = None
        for m in ms:
            inp = make_inputs(torch, m, n, k, "deepseek", gen)
            ref = reference(torch, inp)
            out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
            f = ours(gemm, inp, out)
            ok = run_checked(torch, f, out, ref)
            if ceiling is None and reader is not None:
                ceiling = reader.ceiling(inp["b"].data_ptr(), n * k)
                if ceiling:
                    log(f"decode {n}x{k}: streaming-read ceiling {ceiling[0]:.2f} us "
                        f"({100 * n * k / (ceiling[0] * 1e-6) / copy_bw:.0f} % of copy BW; {ceiling[1]})")
            r = dict(m=m, n=n, k=k, weight_mb=n * k / 1e6, ok=ok, ours_flushed_us=timer.graph(f, 1, True),
                     ours_b2b_us=timer.graph(f, 10, False), ours_kernel_us=timer.kernels(f))
            if ceiling:
                r.update(ceiling_us=ceiling[0], ceiling_bw_share=n * k / (ceiling[0] * 1e-6) / copy_bw,
                         ceiling_kernel=ceiling[1])
            tinp = torch_layout(torch, inp)
            tb = torch_blockwise(torch, tinp)
            r["torch_flushed_us"] = try_time(tb, lambda fn: timer.graph(fn, 1, True))
            r["torch_b2b_us"] = try_time(tb, lambda fn: timer.graph(fn, 10, False)) if r["torch_flushed_us"] else None
            if w_bf16 is None:
                w_bf16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            y = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            mm = lambda: torch.mm(x, w_bf16.t(), out=y)  # noqa: E731
            r["bf16_flushed_us"] = timer.graph(mm, 1, True)
            r["bf16_b2b_us"] = timer.graph(mm, 10, False)
            for key in ("flushed", "b2b", "kernel"):
                us = r[f"ours_{key}_us"]
                r[f"ours_{key}_bw_share"] = n * k / (us * 1e-6) / copy_bw
            rows.append(r)
            log(f"decode {m}x{n}x{k}: ours {r['ours_flushed_us']:.1f} / {r['ours_b2b_us']:.1f} / {r['ours_kernel_us']:.1f} us "
                f"({100 * r['ours_flushed_bw_share']:.0f} / {100 * r['ours_b2b_bw_share']:.0f} / "
                f"{100 * r['ours_kernel_bw_share']:.0f} % of copy BW, ok={ok}), "
                f"torch {r['torch_flushed_us'] or float('nan'):.1f}, bf16 mm {r['bf16_flushed_us']:.1f}")
            del inp, ref, tinp
    return rows


def _torch_group_quant(torch, x, dtype):
    """The unfused path Fp8BlockLinear ran before matmul_2d, in plain torch (pad-free split of the whole
    128-wide groups and the partial last one; float, amax, divide, clamp, cast, concatenate): (M, K) ->
    (fp8 (M, K), float32 (M, ceil(K/128)))."""
    m, k = x.shape
    x = x.float()
    fp8_max = torch.finfo(dtype).max

    def groups(v, width):
        scale = v.abs().amax(dim=-1).clamp_min(1e-12) / fp8_max
        return (v / scale.unsqueeze(-1)).clamp(-fp8_max, fp8_max).to(dtype), scale

    full, tail = k // 128, k % 128
    qs, scales = [], []
    if full:
        q, s = groups(x[:, : full * 128].reshape(m, full, 128), 128)
        qs.append(q.reshape(m, full * 128))
        scales.append(s)
    if tail:
        q, s = groups(x[:, full * 128 :].reshape(m, 1, tail), tail)
        qs.append(q.reshape(m, tail))
        scales.append(s)
    return (qs[0], scales[0]) if len(qs) == 1 else (torch.cat(qs, 1), torch.cat(scales, 1))


def _refused(fn):
    """Whether torch refuses the shape: its blockwise _scaled_mm raises RuntimeError or, in newer releases,
    ValueError (for M = 1, for example)."""
    try:
        fn()
    except (RuntimeError, ValueError):
        return True
    return False


def suite_finegrained(torch, gemm, timer, log, ms=FINEGRAINED_M, nks=DECODE_NK):
    """matmul_2d from bf16 activations (one quantization kernel, then the GEMM as its programmatic dependent)
    against torch doing the same job and against our unfused path, on DeepSeek-V3 linear shapes. Times are
    CUDA-graph replays with the L2 flushed before each (µs per call), all of a shape measured in interleaved
    rounds (Timer.graphs):
      matmul_2d        gemm.matmul_2d(x, w, ws, [128, 128]) end to end, bf16 out;
      quant            gemm.fp8_act_quant(x) alone (its share of matmul_2d's time is reported), and its kernel's
                       own run time from the profiler's records (L2 flushed; no launch in it);
      gemm             gemm.gemm on fp8_act_quant's outputs alone: matmul_2d - gemm is the time quantization adds
                       to matmul_2d (the GEMM's launch and set-up overlap the quantization's tail there);
      torch            per-group quantization in eager torch (float, amax, divide, clamp, cast, the scale
                       transposed to the layout _scaled_mm takes), then torch._scaled_mm blockwise (1x128
                       activation scales, 128x128 weight scales); None where torch refuses the shape;
      torch_compiled   the same with the quantization under torch.compile (one fused Triton kernel);
      unfused          _torch_group_quant (the plain-torch quantization the layer used before) + gemm.gemm.
    matmul_2d is checked against a float64 reference of its own quantization then the GEMM before it is timed;
    torch's result is compared with it (relative Frobenius difference, logged)."""
    if not hasattr(gemm, "matmul_2d"):
        log("finegrained: this build has no matmul_2d")
        return []
    fp8 = torch.float8_e4m3fn
    fp8_max = torch.finfo(fp8).max
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(4)
    for (n, k) in nks:
        kb = cdiv(k, 128)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen).to(fp8)
        ws = torch.rand(cdiv(n, 128), kb, device="cuda", generator=gen) + 0.5
        # torch's blockwise recipe takes the weight scales K-major with a 4-padded row stride.
        ws_torch = torch.zeros((cdiv(n, 128), cdiv(kb, 4) * 4), device="cuda")
        ws_torch[:, :kb] = ws
        ws_torch = ws_torch[:, :kb]

        torch._dynamo.reset()  # a fresh compile cache per weight shape (kb is a constant of the traced code)

        def torch_quant(x):
            g = x.float().unflatten(-1, (kb, 128))  # every DeepSeek-V3 K is a multiple of 128
            sc = (g.abs().amax(-1) / fp8_max).clamp_min(1e-12)
            qq = (g / sc[..., None]).clamp(-fp8_max, fp8_max).to(fp8).flatten(-2)
            return qq, sc.t().contiguous().t()  # scale_a M-major, as _scaled_mm's 1x128 recipe takes it

        torch_quant_compiled = torch.compile(torch_quant, fullgraph=True)

        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            fused = lambda: gemm.matmul_2d(x, w, ws, [128, 128])  # noqa: E731
            quant = lambda: gemm.fp8_act_quant(x, 128, fp8)  # noqa: E731
            y = fused()
            q, s = gemm.fp8_act_quant(x, 128, fp8)
            ref = reference(torch, dict(a=q, b=w, a_scale=s, b_scale=ws))
            ok = check(torch, y, ref)

            def torch_job(quantize=torch_quant):
                qq, sc = quantize(x)
                return torch._scaled_mm(qq, w.t(), scale_a=sc, scale_b=ws_torch.t(), out_dtype=torch.bfloat16)

            def torch_job_compiled():
                return torch_job(torch_quant_compiled)

            def unfused():
                qq, sc = _torch_group_quant(torch, x, fp8)
                return gemm.gemm(qq, w, sc, ws)

            jobs = dict(matmul_2d=fused, quant=quant, unfused=unfused, gemm=lambda: gemm.gemm(q, w, s, ws),
                        torch=torch_job, torch_compiled=torch_job_compiled)
            refused = {key for key in ("torch", "torch_compiled") if _refused(jobs[key])}
            times = timer.graphs({key: fn for key, fn in jobs.items() if key not in refused}, FINEGRAINED_ROUNDS)
            r = dict(m=m, n=n, k=k, ok=ok, rounds=FINEGRAINED_ROUNDS, quant_kernel_us=timer.kernels(quant),
                     **{f"{key}_us": times.get(key) for key in jobs})
            r["quant_share"] = r["quant_us"] / r["matmul_2d_us"]
            r["quant_kernel_share"] = r["quant_kernel_us"] / r["matmul_2d_us"]
            r["quant_added_share"] = max(0.0, r["matmul_2d_us"] - r["gemm_us"]) / r["matmul_2d_us"]
            r["torch_rel_diff"] = None
            if r["torch_us"] is not None:
                t_out = torch_job().float()
                r["torch_rel_diff"] = float((t_out - y.float()).norm() / y.float().norm().clamp_min(1e-30))
            r["tflops"] = tflops(m, n, k, r["matmul_2d_us"])
            for key in ("torch", "torch_compiled", "unfused"):
                us = r[f"{key}_us"]
                r[f"speedup_vs_{key}"] = us / r["matmul_2d_us"] if us else None
            rows.append(r)
            log(f"finegrained {m}x{n}x{k}: matmul_2d {r['matmul_2d_us']:.1f} us ({r['tflops']:.0f} TFLOP/s, quant "
                f"{r['quant_us']:.1f} us = {100 * r['quant_share']:.0f} %, gemm alone {r['gemm_us']:.1f} us, "
                f"ok={ok}), torch "
                f"{fmt(r['torch_us'])} / compiled quant {fmt(r['torch_compiled_us'])}, unfused {r['unfused_us']:.1f}, "
                f"torch vs ours {fmt(r['torch_rel_diff'], '.2e')}")
            del x, y, q, s, ref
        del w, ws, ws_torch
    return rows


def shape(r):
    """A result row's shape as the tables write it: MxNxK."""
    return f"{r['m']}x{r['n']}x{r['k']}"


def decode_summary(rows):
    """The decode criteria over the decode rows, on kernel time (profiler, L2 flushed): weight bytes per second
    at least 80 % of the copy bandwidth for M <= 16 and at least 65 % for M = 32 and 64, on weights of at
    least 8 MB, with the read ceiling's share beside every miss; and faster (graph replay, L2 flushed) than
    torch blockwise where it runs and than bf16 mm."""
    def ceiling(r):
        return f", ceiling {100 * r['ceiling_bw_share']:.0f} %" if "ceiling_bw_share" in r else ""

    lines = []
    big = [r for r in rows if r["weight_mb"] >= 8.0]
    for sel, bound, what in ((lambda r: r["m"] <= 16, 0.80, "M <= 16"), (lambda r: r["m"] >= 32, 0.65, "M = 32, 64")):
        part = [r for r in big if sel(r)]
        miss = [r for r in part if r["ours_kernel_bw_share"] < bound]
        below = ", ".join(f"{shape(r)} ({100 * r['ours_kernel_bw_share']:.0f} %{ceiling(r)})" for r in miss)
        lines.append(f"- {what}, weight >= 8 MB: kernel time at >= {100 * bound:.0f} % of the copy bandwidth on "
                     f"{len(part) - len(miss)} of {len(part)}" + (f"; below on {below}" if miss else ""))
        unreachable = [r for r in miss if r.get("ceiling_bw_share", 1.0) < bound]
        if unreachable:
            lines.append(f"  - of these, the bare streaming read of the same bytes is itself below {100 * bound:.0f} % "
                         f"on {len(unreachable)}")
    for key, what in (("torch_flushed_us", "torch blockwise"), ("bf16_flushed_us", "torch bf16 mm")):
        ran = [r for r in rows if r.get(key)]
        slower = [f"{shape(r)} ({r['ours_flushed_us']:.1f} vs {r[key]:.1f} µs)" for r in ran
                  if r["ours_flushed_us"] >= r[key]]
        lines.append(f"- faster than {what} on {len(ran) - len(slower)} of the {len(ran)} shapes it runs"
                     + (f"; not on {', '.join(slower)}" if slower else ""))
    return lines


def finegrained_summary(rows):
    """The issue's criteria over the finegrained rows: faster than torch wherever torch runs, and the
    quantization's share at most 15 % of matmul_2d for M >= 512 and N >= 2048 (stated for every shape)."""
    lines = []
    for key, what in (("torch", "torch (eager quantization + blockwise `_scaled_mm`)"),
                      ("torch_compiled", "torch with its quantization compiled")):
        ran = [r for r in rows if r[f"{key}_us"] is not None]
        slower = [shape(r) for r in ran if r["matmul_2d_us"] >= r[f"{key}_us"]]
        lines.append(f"- faster than {what} on {len(ran) - len(slower)} of the {len(ran)} shapes it runs"
                     + (f"; not on {', '.join(slower)}" if slower else ""))
    big = [r for r in rows if r["m"] >= 512 and r["n"] >= 2048]
    for key, what in (("quant_share", "the quantization timed alone in its own graph (its launch included)"),
                      ("quant_kernel_share", "the quantization kernel's run time (profiler, L2 flushed)"),
                      ("quant_added_share", "the time quantization adds to matmul_2d (matmul_2d - gemm alone)")):
        if any(key not in r for r in big):
            continue
        over = [f"{shape(r)} ({100 * r[key]:.1f} %)" for r in big if r[key] > 0.15]
        lines.append(f"- {what}: <= 15 % of matmul_2d for M >= 512 and N >= 2048 on {len(big) - len(over)} "
                     f"of {len(big)} shapes" + (f"; above on {', '.join(over)}" if over else ""))
    return lines


def tune(torch, gemm, timer, shapes, log):
    """Every tile / CUTLASS configuration on each shape (GEMM_CUDA_CONFIG), checked, then timed."""
    cands = []
    for kern in TILE_KERNELS:
        for split in ("dp,1", "streamk,1"):
            for group in (4, 8):
                cands.append(f"{kern},{split},{group}")
    cands += ["cutlass128x128,streamk,1,1", "cutlass128x128,dp,1,1"]
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(5)
    for (m, n, k) in shapes:
        inp = make_inputs(torch, m, n, k, "kmajor", gen)
        ref = reference(torch, inp)
        out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        f = ours(gemm, inp, out)
        times = {"dispatch": timer.events(f)}
        for c in cands:
            with env_var("GEMM_CUDA_CONFIG", c):
                if run_checked(torch, f, out, ref):
                    times[c] = timer.events(f)
                else:
                    times[c] = None
                    log(f"tune {m}x{n}x{k} {c}: WRONG RESULT")
        best = min((c for c in times if c != "dispatch" and times[c]), key=lambda c: times[c])
        rows.append(dict(m=m, n=n, k=k, times=times, best=best))
        log(f"tune {m}x{n}x{k}: dispatch {times['dispatch']:.1f} us, best {best} {times[best]:.1f} us")
        del inp, ref
    return rows


def calibrate_decode(torch, gemm, timer, log):
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(6)
    for (n, k) in DECODE_NK:
        for m in (1, 16, 32, 64):
            inp = make_inputs(torch, m, n, k, "deepseek", gen)
            ref = reference(torch, inp)
            out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
            f = ours(gemm, inp, out)
            times = {"auto": timer.graph(f, 1, True)}
            cands = [f"decode,splitk,{split},{rows_per}" for rows_per in (64, 128) for split in (1, 2, 3, 4, 6, 8)]
            if m >= 32:
                cands += ["tile64x128,dp,1,8", "tile64x128,splitk,2,8", "tile64x128,splitk,4,8", "tile64x128,streamk,1,8"]
            for c in cands:
                with env_var("GEMM_CUDA_CONFIG", c):
                    if not run_checked(torch, f, out, ref):
                        log(f"calibrate {m}x{n}x{k} {c}: WRONG RESULT")
                        continue
                    times[c] = timer.graph(f, 1, True)
            best = min((c for c in times if c != "auto"), key=lambda c: times[c])
            rows.append(dict(m=m, n=n, k=k, times=times, best=best))
            log(f"calibrate {m}x{n}x{k}: auto {times['auto']:.1f} us, best {best} {times[best]:.1f} us")
            del inp, ref
    return rows


# ----------------------------------------------------------------------------------------------
# Environment and outputs
# ----------------------------------------------------------------------------------------------
def env_info(torch):
    info = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), torch=torch.__version__,
                cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0), python=platform.python_version())
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
        info["driver"], info["max_sm_clock"], info["power_limit"] = [x.strip() for x in q.split(",")]
    except Exception as e:  # nvidia-smi missing: keep the run
        info["driver"] = f"unknown ({e})"
    return info


def fmt(x, spec=".1f"):
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def render_md(data):
    e = data["env"]
    lines = [f"# gemm on the {e['gpu']}", "",
             f"{e['date']}, driver {e.get('driver')}, torch {e['torch']}, CUDA {e['cuda']}; "
             f"`python3 benchmarks/gemm_bench.py` ({data.get('runs', 'one device call')}). Every result of ours "
             f"passed the float64 reference check before it was timed.", ""]
    if data.get("copy_bandwidth"):
        fl = data.get("launch_floor", {})
        lines += [f"Device-to-device copy bandwidth in the same run: {data['copy_bandwidth'] / 1e12:.2f} TB/s. "
                  f"A one-element fill timed the same ways (the floor of each method): "
                  f"{fmt(fl.get('flushed_us'))} µs flushed graph, {fmt(fl.get('b2b_us'))} µs back to back, "
                  f"{fmt(fl.get('kernel_us'), '.2f')} µs kernel.", ""]
    ch = data.get("challenge")
    if ch:
        lines += ["## Challenge shapes (K-major, L2 flushed before each call)", "",
                  "| M x N x K | ours µs | TFLOP/s | torch blockwise µs | speedup | torch per-tensor µs | ours, challenge layout µs |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in ch:
            lines.append(f"| {r['m']}x{r['n']}x{r['k']} | {fmt(r['ours_us'])} | {fmt(r['tflops'], '.0f')} | "
                         f"{fmt(r['torch_us'])} | {fmt(r['speedup'], '.3f')} | {fmt(r['torch_tensorwise_us'])} | "
                         f"{fmt(r['ours_mn_us'])} |")
        sp = [r["speedup"] for r in ch if r["speedup"]]
        lines += ["", f"Geomean speedup over torch blockwise: **{geomean(sp):.3f}x** (min {min(sp):.3f}x, "
                      f"{len(sp)} shapes).", ""]
    dg = data.get("deepgemm")
    if dg:
        lines += ["## DeepGEMM's dense shapes (K-major, L2 flushed)", "",
                  "Events: CUDA events around the call; kernel: the profiler's kernel time (launch gaps excluded, "
                  "how DeepGEMM's table is measured). TFLOP/s and the ratio to DeepGEMM's published H800 number, "
                  "both ways.", "",
                  "| M x N x K | ours µs, events / kernel | ours TFLOP/s, events / kernel | "
                  "DeepGEMM H800 (published) | ours / DeepGEMM, events / kernel | "
                  "torch blockwise µs, events / kernel |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in dg:
            lines.append(f"| {r['m']}x{r['n']}x{r['k']} | {fmt(r['ours_us'])} / {fmt(r.get('ours_kernel_us'))} | "
                         f"{fmt(r['tflops'], '.0f')} / {fmt(r.get('kernel_tflops'), '.0f')} | "
                         f"{r['deepgemm_h800_tflops']} | {fmt(r['vs_deepgemm'], '.2f')} / "
                         f"{fmt(r.get('vs_deepgemm_kernel'), '.2f')} | {fmt(r['torch_us'])} / "
                         f"{fmt(r.get('torch_kernel_us'))} |")
        lines.append("")
    de = data.get("decode")
    if de:
        lines += ["## Decode-sized M", "",
                  "Times in µs: CUDA-graph replay with the L2 flushed before each replay / graph of 10 back-to-back "
                  "calls / kernel time from the profiler's records (L2 flushed, launch gaps excluded). Weight bytes "
                  "per second as a share of the copy bandwidth, same three ways. Read ceiling: the fastest bare "
                  "streaming read of the same weight bytes (`benchmarks/stream_read.cu`: 16-byte loads or bulk "
                  "copies, several launch shapes; kernel time, L2 flushed), what reading the weight once costs "
                  "with no GEMM at all, and its share of the copy bandwidth. torch blockwise refuses M = 1 and "
                  "M = 2 (—).", "",
                  "| M x N x K | weight MB | ours µs | share of copy BW | read ceiling µs (share) | "
                  "torch blockwise µs | bf16 mm µs |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in de:
            ceiling = f"{fmt(r['ceiling_us'])} ({100 * r['ceiling_bw_share']:.0f} %)" if "ceiling_us" in r else "—"
            lines.append(f"| {r['m']}x{r['n']}x{r['k']} | {r['weight_mb']:.1f} | {fmt(r['ours_flushed_us'])} / "
                         f"{fmt(r['ours_b2b_us'])} / {fmt(r.get('ours_kernel_us'))} | "
                         f"{100 * r['ours_flushed_bw_share']:.0f} / {100 * r['ours_b2b_bw_share']:.0f} / "
                         f"{100 * r.get('ours_kernel_bw_share', float('nan')):.0f} % | {ceiling} | "
                         f"{fmt(r['torch_flushed_us'])} / {fmt(r['torch_b2b_us'])} | "
                         f"{fmt(r['bf16_flushed_us'])} / {fmt(r['bf16_b2b_us'])} |")
        lines += [""] + decode_summary(de) + [""]
    fg = data.get("finegrained")
    if fg:
        rounds = fg[0].get("rounds")
        how = (f"; each shape's graph times in {rounds} interleaved rounds, the median of the rounds' medians"
               if rounds else "")
        lines += [f"## matmul_2d from bf16 activations (CUDA-graph replay, L2 flushed{how})", "",
                  "matmul_2d = fp8_act_quant + the GEMM (its programmatic dependent); quantization = fp8_act_quant "
                  "alone in its own graph / its kernel's run time from the profiler, and their shares of matmul_2d's "
                  "time; added = matmul_2d - gemm.gemm alone on the quantized "
                  "input, the time quantization adds to matmul_2d, and its share; torch = its per-group "
                  "quantization (eager, or compiled into one kernel) + blockwise `_scaled_mm` (— where torch refuses the shape); unfused = the "
                  "plain-torch quantization + gemm.gemm. Times in µs.", "",
                  "| M x N x K | matmul_2d µs | TFLOP/s | quantization µs: graph / kernel (shares) | added µs (share) | torch µs | "
                  "torch, compiled quantization µs | unfused µs | speedup vs torch |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in fg:
            added = (f"{fmt(r['matmul_2d_us'] - r['gemm_us'])} ({100 * r['quant_added_share']:.0f} %)"
                     if "gemm_us" in r else "—")
            quant = (f"{fmt(r['quant_us'])} / {fmt(r['quant_kernel_us'])} ({100 * r['quant_share']:.0f} / "
                     f"{100 * r['quant_kernel_share']:.0f} %)" if "quant_kernel_us" in r
                     else f"{fmt(r['quant_us'])} ({100 * r['quant_share']:.0f} %)")
            lines.append(f"| {r['m']}x{r['n']}x{r['k']} | {fmt(r['matmul_2d_us'])} | {fmt(r['tflops'], '.0f')} | "
                         f"{quant} | {added} | {fmt(r['torch_us'])} | "
                         f"{fmt(r.get('torch_compiled_us'))} | {fmt(r['unfused_us'])} | "
                         f"{fmt(r.get('speedup_vs_torch'), '.2f')} |")
        lines += [""] + finegrained_summary(fg) + [""]
    su = data.get("sustained")
    if su:
        lines += render_sustained(su)
    for key, title in (("tune", "Tuning sweep (µs per configuration)"), ("calibrate_decode", "Decode plans (µs)")):
        if data.get(key):
            lines += [f"## {title}", ""]
            for r in data[key]:
                best = r["best"]
                first = "dispatch" if "dispatch" in r["times"] else "auto"
                lines.append(f"- {r['m']}x{r['n']}x{r['k']}: {first} {r['times'][first]:.1f}, best `{best}` "
                             f"{r['times'][best]:.1f}")
            lines.append("")
    return "\n".join(lines)


def render_sustained(rows):
    lines = ["## Sustained load: clocks, power and the tensor peak they allow", "",
             "Each GEMM called back to back for 2 s; nvidia-smi samples every 50 ms (the first quarter, the ramp, "
             "left out). Peak at clock: the dense FP8 tensor peak at the median SM clock held (SMs x 8192 FLOP per "
             "clock), and the share of it reached.", "",
             "| M x N x K | GEMM | TFLOP/s | SM clock MHz, median (min) | power W | clock limited by | peak at clock "
             "TFLOP/s | share of it |",
             "|---|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        for name, s in r["impls"].items():
            lines.append(f"| {r['m']}x{r['n']}x{r['k']} | {name} | {fmt(s['tflops'], '.0f')} | "
                         f"{fmt(s.get('sm_clock_mhz'), '.0f')} ({fmt(s.get('sm_clock_min_mhz'), '.0f')}) | "
                         f"{fmt(s.get('power_w'), '.0f')} | {s.get('clock_reasons', '—')} | "
                         f"{fmt(s.get('peak_at_clock_tflops'), '.0f')} | {fmt(s.get('share_of_peak'), '.2f')} |")
    prof = [(r, ncu_derived(r)) for r in rows]
    prof = [(r, d) for r, d in prof if d]
    if prof:
        lines += ["", "Nsight Compute, one call of ours (the third; clocks left to the board, so one call's clock, "
                  "higher than under sustained load). Needed for DeepGEMM: its published H800 TFLOP/s as a share of "
                  "the tensor peak at this clock.", "",
                  "| M x N x K | kernel | µs | SM clock MHz | TFLOP/s | tensor pipe busy % | issue slots busy % | "
                  "largest stalls (warps per issue) | needed for DeepGEMM |",
                  "|---|---|---:|---:|---:|---:|---:|---|---:|"]
        for r, d in prof:
            lines.append(f"| {r['m']}x{r['n']}x{r['k']} | `{d['kernel']}` | {fmt(d['us'])} | "
                         f"{fmt(d['sm_clock_mhz'], '.0f')} | {fmt(d['tflops'], '.0f')} | {fmt(d['tensor_busy_pct'])} | "
                         f"{fmt(d['issue_busy_pct'])} | "
                         f"{', '.join(f'{name} {v:.2f}' for v, name in d['top_stalls']) or '—'} | "
                         f"{100 * d['deepgemm_needs']:.0f} % |")
    lines.append("")
    return lines


def render_png(data, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [k for k in ("challenge", "deepgemm", "decode", "finegrained") if data.get(k)]
    if not panels:
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 4 * len(panels)))
    axes = [axes] if len(panels) == 1 else axes
    for ax, key in zip(axes, panels):
        rows = data[key]
        labels = [f"{r['m']}x{r['n']}x{r['k']}" for r in rows]
        if key == "challenge":
            ax.bar(labels, [r["speedup"] or 0 for r in rows])
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_ylabel("speedup over torch blockwise")
        elif key == "deepgemm":
            ax.bar(labels, [r["tflops"] for r in rows], label="ours (H200)")
            ax.plot(labels, [r["deepgemm_h800_tflops"] for r in rows], "r_", ms=20, mew=2, label="DeepGEMM (H800, published)")
            ax.set_ylabel("TFLOP/s")
            ax.legend()
        elif key == "decode":
            for m in sorted({r["m"] for r in rows}):
                sub = [r for r in rows if r["m"] == m]
                ax.plot([f"{r['n']}x{r['k']}" for r in sub], [100 * r["ours_flushed_bw_share"] for r in sub], "o-",
                        label=f"M={m}")
            ax.axhline(80, color="k", lw=0.8, ls="--")
            ax.set_ylabel("% of copy bandwidth (L2 flushed)")
            ax.legend(ncol=4, fontsize=8)
            labels = None
        else:
            ax.bar(labels, [(r["torch_us"] or 0) / r["matmul_2d_us"] for r in rows])
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_ylabel("speedup over torch quantize + blockwise")
        ax.set_title(key)
        ax.tick_params(axis="x", rotation=75, labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_outputs(data, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "gemm_h200.json"), "w") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(out_dir, "gemm_h200.md"), "w") as f:
        f.write(render_md(data) + "\n")
    try:
        render_png(data, os.path.join(out_dir, "gemm_h200.png"))
    except ImportError as e:
        print(f"no plot: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suites", default="challenge,deepgemm,decode,finegrained")
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--calibrate-decode", action="store_true")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--render", metavar="JSON")
    ap.add_argument("--profile-one", metavar="M,N,K", help=argparse.SUPPRESS)  # the process ncu profiles
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            write_outputs(json.load(f), args.out)
        return 0

    import torch

    import gemm

    if args.profile_one:
        profile_one(torch, gemm, args.profile_one)
        return 0

    log_path = os.path.join(args.out, "gemm_h200.log")
    os.makedirs(args.out, exist_ok=True)
    logf = open(log_path, "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    timer = Timer(torch, args.reps)
    data = dict(env=env_info(torch))
    log(json.dumps(data["env"]))
    suites = [s for s in args.suites.split(",") if s]
    if "smoke" in suites:
        data["smoke"] = suite_smoke(torch, gemm, log)
    if "decode" in suites or "finegrained" in suites:
        data["copy_bandwidth"] = copy_bandwidth(torch, timer)
        data["launch_floor"] = launch_floor(torch, timer)
        log(f"copy bandwidth {data['copy_bandwidth'] / 1e12:.3f} TB/s; launch floor {data['launch_floor']}")
    if "challenge" in suites:
        data["challenge"] = suite_challenge(torch, gemm, timer, CHALLENGE_SHAPES, log)
    if "deepgemm" in suites:
        data["deepgemm"] = suite_deepgemm(torch, gemm, timer, log)
    if "decode" in suites:
        data["decode"] = suite_decode(torch, gemm, timer, data["copy_bandwidth"], log, out_dir=args.out)
    if "finegrained" in suites:
        data["finegrained"] = suite_finegrained(torch, gemm, timer, log)
    if "sustained" in suites:
        data["sustained"] = suite_sustained(torch, gemm, log)
    if args.tune:
        data["tune"] = tune(torch, gemm, timer, CHALLENGE_SHAPES, log)
    if args.calibrate_decode:
        data["calibrate_decode"] = calibrate_decode(torch, gemm, timer, log)
    write_outputs(data, args.out)
    bad = [f"{s}:{r['m']}x{r['n']}x{r['k']}" for s in ("smoke", "challenge", "deepgemm", "decode", "finegrained", "sustained")
           for r in data.get(s, []) if not r["ok"] or r.get("ours_mn_ok") is False]
    log(f"wrote {args.out}; {len(bad)} failed checks {bad[:10]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
