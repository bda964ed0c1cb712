#!/usr/bin/env python3
"""Dense FP8 block-scaled GEMMs on one GPU, in one process, on identical inputs: gemm (ours), DeepGEMM's
fp8_gemm_nt, CUTLASS 4.4's blockwise kernel inside our build, torch blockwise and per-tensor _scaled_mm.

    python3 benchmarks/deepgemm_bench.py [--suites deepgemm,challenge,deepseek,prefill,decode] [--reps N]
                                         [--decode-reps N] [--max-shapes N] [--budget-s S] [--out DIR]
    python3 benchmarks/deepgemm_bench.py --render DIR/deepgemm_h100.json [--out DIR]   (table only, no GPU)

Inputs (per shape, the same tensors for everyone): a (m, k), b (n, k) e4m3fn K-contiguous, 1x128 activation
scales and 128x128 weight scales in float32 (benchmarks/gemm_bench.py's make_inputs; --layout kmajor gives
ours its M-contiguous a_scale, --layout deepseek the row-major one). DeepGEMM gets its required scale layout
(sfa MN-major and TMA-aligned, sfb contiguous) prepared once outside the timing, so its calls do no
transform. Every output is checked against a float64 reference before it is timed; a failed check is
recorded and that implementation is not timed.

Timing (each implementation, each shape): the L2 is flushed by reading a 512 MB buffer before each call;
event time = median of CUDA events around the call; kernel time = the GPU kernels' time per call from
torch.profiler's kernel records (launch gaps excluded, the flush's kernels left out).

Suites: deepgemm = DeepGEMM's 18 dense shapes; challenge = the 18 timed challenge shapes; deepseek = DeepSeek-V3
linear shapes at M = 4096 and two small-M ones; prefill = M = 256, 512 and 2048 on the DeepSeek-V3 weights of
K = 7168 (a few hundred to a few thousand tokens); decode = M in 1..64 on the DeepSeek-V3 linear shapes. A shape
already measured by an earlier suite of the run is not measured again.

DeepGEMM compiles each kernel configuration on its first call (nvcc); before timing, worker processes of this
script fill its JIT cache (DG_JIT_CACHE_DIR) in parallel. Without an importable deep_gemm everything else
still runs and the tables say why DeepGEMM is missing.

Writes deepgemm_<gpu>.json, deepgemm_<gpu>.md (and the run's log) to --out (default benchmarks/out/).
"""
import argparse
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gemm_bench as gb  # noqa: E402
import worker_pool  # noqa: E402

IMPLS = ("ours", "deepgemm", "cutlass", "torch_blockwise", "torch_tensorwise")
CUTLASS_CONFIG = "cutlass128x128,dp,1,1"
PREFILL_M = (256, 512, 2048)
DEFAULT_SUITES = "deepgemm,challenge,deepseek,prefill,decode"
SUITE_TITLES = {
    "deepgemm": "DeepGEMM's 18 dense shapes",
    "challenge": "The 18 challenge shapes",
    "deepseek": "DeepSeek-V3 shapes",
    "prefill": "Prefill-sized M (256-2048) on DeepSeek-V3 weights of K = 7168",
    "decode": "Decode-sized M (1-64) on DeepSeek-V3 linear shapes",
}
TIMING_TEXT = ("L2 flushed by reading a 512 MB buffer before each call. Kernel time: the GPU kernels' time per "
               "call from torch.profiler's kernel records (launch gaps excluded, the flush's kernels left out); "
               "event time: median of CUDA events around the call. Every output was checked against a float64 "
               "reference before it was timed (✗: check failed, not timed; —: refused the shape or not available).")


def _packed_commit(dg):
    """The commit pack_deepgemm.sh wrote next to the package (DEEPGEMM_COMMIT), if any."""
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(dg.__file__))), "DEEPGEMM_COMMIT")) as f:
            return f.read().strip() or "unknown"
    except OSError:
        return "not recorded (an archive without DEEPGEMM_COMMIT)"


def suite_shapes(name):
    if name == "deepgemm":
        return list(gb.DEEPGEMM_PUBLISHED)
    if name == "challenge":
        return list(gb.CHALLENGE_SHAPES)
    if name == "decode":
        return [(m, n, k) for (n, k) in gb.DECODE_NK for m in gb.DECODE_M]
    if name == "prefill":
        return [(m, n, k) for (n, k) in gb.DECODE_NK if k == 7168 for m in PREFILL_M]
    if name == "deepseek":
        shapes = [(4096, 7168, 18432), (16, 2112, 7168), (64, 24576, 1536)] + [(4096, n, k) for (n, k) in gb.DECODE_NK]
        return list(dict.fromkeys(shapes))
    raise ValueError(f"--suites: unknown suite {name!r} (expected one of {', '.join(SUITE_TITLES)})")


def err_text(e, prefix=""):
    """One line of at most 240 characters: tables and logs stay readable."""
    return " ".join(f"{prefix}{type(e).__name__}: {e}".split())[:240]


def gpu_tag(gpu):
    g = (gpu or "").upper()
    for tag in ("H100", "H200", "H800", "H20", "B200"):
        if tag in g:
            return tag.lower()
    return "".join(c for c in (gpu or "gpu").lower() if c.isalnum())[:16] or "gpu"


# ----------------------------------------------------------------------------------------------
# DeepGEMM
# ----------------------------------------------------------------------------------------------
def import_deepgemm():
    """(module, None) or (None, error text)."""
    try:
        import deep_gemm
        if not hasattr(deep_gemm, "fp8_gemm_nt"):
            return None, f"deep_gemm {getattr(deep_gemm, '__version__', '?')} has no fp8_gemm_nt"
        return deep_gemm, None
    except Exception as e:  # ImportError, or its extension failing to load
        return None, err_text(e)


def deepgemm_info(dg):
    info = dict(version=getattr(dg, "__version__", None), file=getattr(dg, "__file__", None),
                commit=os.environ.get("DG_COMMIT") or _packed_commit(dg),
                jit_cache_dir=os.environ.get("DG_JIT_CACHE_DIR"))
    root = os.path.dirname(os.path.dirname(os.path.abspath(dg.__file__)))
    try:
        with open(os.path.join(root, "third-party", "cutlass", "include", "cutlass", "version.h")) as f:
            v = {}
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "#define" and parts[1] in ("CUTLASS_MAJOR", "CUTLASS_MINOR",
                                                                              "CUTLASS_PATCH"):
                    v[parts[1]] = parts[2]
            info["cutlass"] = ".".join(v.get(x, "?") for x in ("CUTLASS_MAJOR", "CUTLASS_MINOR", "CUTLASS_PATCH"))
    except OSError:
        pass
    for getter in ("get_num_sms", "get_pdl", "get_tc_util"):
        try:
            info[getter[4:]] = getattr(dg, getter)()
        except Exception:
            pass
    return info


def deepgemm_sfa(torch, dg, sfa, m, k):
    """DeepGEMM's sfa in the layout its sm90 kernel reads (MN-major, TMA-aligned), made outside the timing:
    (tensor, how). The call then skips its own transform (checked: the layout function returns it as is)."""
    errors = []
    if hasattr(dg, "transform_sf_into_required_layout"):
        try:
            t = dg.transform_sf_into_required_layout(sfa, m, k, (1, 128, 128), is_sfa=True)
            return t, "transform_sf_into_required_layout(sfa, m, k, (1, 128, 128), is_sfa=True)"
        except Exception as e:
            errors.append(err_text(e, "transform_sf_into_required_layout: "))
    if hasattr(dg, "get_mn_major_tma_aligned_tensor"):
        try:
            return dg.get_mn_major_tma_aligned_tensor(sfa), "get_mn_major_tma_aligned_tensor(sfa)"
        except Exception as e:
            errors.append(err_text(e, "get_mn_major_tma_aligned_tensor: "))
    return sfa, "none: fp8_gemm_nt transforms sfa inside each (timed) call" + (f" ({'; '.join(errors)})"[:300]
                                                                                if errors else "")


def in_call_transform_skipped(dg, sfa_t):
    """True when DeepGEMM's own layout step would return sfa_t unchanged (no copy, no kernel in the call)."""
    try:
        return dg.get_mn_major_tma_aligned_tensor(sfa_t).data_ptr() == sfa_t.data_ptr()
    except Exception:
        return None


def warm_worker(spec):
    """Hidden --warm-deepgemm mode: one fp8_gemm_nt call per shape (zeros), which compiles its kernels into
    DeepGEMM's JIT cache (and the scale-layout kernel, since sfa is given row-major)."""
    import torch

    dg, err = import_deepgemm()
    if dg is None:
        print(f"warm: DeepGEMM not available: {err}", flush=True)
        return 1
    bad = 0
    for item in spec.split(";"):
        if not item:
            continue
        m, n, k = (int(x) for x in item.split(","))
        t0 = time.time()
        try:
            kb, nb = gb.cdiv(k, 128), gb.cdiv(n, 128)
            a = torch.zeros((m, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
            b = torch.zeros((n, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
            sfa = torch.ones((m, kb), dtype=torch.float32, device="cuda")
            sfb = torch.ones((nb, kb), dtype=torch.float32, device="cuda")
            d = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
            dg.fp8_gemm_nt((a, sfa), (b, sfb), d)
            torch.cuda.synchronize()
            print(f"warm {m}x{n}x{k}: {time.time() - t0:.1f} s", flush=True)
        except Exception as e:
            bad += 1
            print(f"warm {m}x{n}x{k}: FAILED after {time.time() - t0:.1f} s: {err_text(e)}", flush=True)
    return 1 if bad else 0


def warm_deepgemm(shapes, out_dir, timeout_s, log):
    """Fill DeepGEMM's JIT cache for `shapes` with parallel worker processes of this script; shapes that share
    N and K (likely the same kernel) go to the same worker, so the later ones hit the cache."""
    groups = {}
    for (m, n, k) in shapes:
        groups.setdefault((n, k), []).append((m, n, k))
    workers = max(1, min(14, os.cpu_count() or 1, len(groups)))

    def kernels(g):  # a rough count of the distinct kernels of a group: DeepGEMM picks its blocks by M too
        return len({0 if m <= 64 else 1 if m <= 128 else 2 for (m, _, _) in g})

    loads = [[] for _ in range(workers)]
    cost = [0] * workers
    for g in sorted(groups.values(), key=kernels, reverse=True):
        i = cost.index(min(cost))
        loads[i].extend(g)
        cost[i] += kernels(g)
    cache = os.path.join(os.environ.get("DG_JIT_CACHE_DIR") or os.path.expanduser("~/.deep_gemm"), "cache")

    def cached():
        try:
            return len(os.listdir(cache))
        except OSError:
            return 0

    before, t0 = cached(), time.time()
    procs = []
    for i, load in enumerate(loads):
        if not load:
            continue
        path = os.path.join(out_dir, f"deepgemm_warm_{i}.log")
        f = open(path, "w")
        spec = ";".join(f"{m},{n},{k}" for (m, n, k) in load)
        p = worker_pool.start([sys.executable, os.path.abspath(__file__), "--warm-deepgemm", spec], stdout=f,
                              stderr=subprocess.STDOUT, cwd=os.getcwd())
        procs.append((p, f, path))
    log(f"deepgemm JIT warm-up: {len(shapes)} shapes ({len(groups)} N x K groups) on {len(procs)} workers, "
        f"{before} kernels cached before; estimated kernels per worker {sorted(c for c in cost if c)}")
    killed = len(worker_pool.wait_until([p for p, _, _ in procs], t0 + timeout_s))
    rcs = []
    with open(os.path.join(out_dir, "deepgemm_warm.log"), "w") as merged:
        for p, f, path in procs:
            rcs.append(p.returncode)
            f.close()
            try:
                with open(path) as part:
                    merged.write(f"# worker pid {p.pid} rc {p.returncode}\n" + part.read())
                os.remove(path)
            except OSError:
                pass
    elapsed = time.time() - t0
    summary = dict(seconds=round(elapsed, 1), shapes=len(shapes), workers=len(procs), killed_at_timeout=killed,
                   worker_rcs=rcs, kernels_cached_before=before, kernels_cached_after=cached())
    log(f"deepgemm JIT warm-up done in {elapsed:.0f} s: {json.dumps(summary)}")
    return summary


# ----------------------------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------------------------
def measure(torch, fn, out, ref, timer, kernel_time=True):
    """{ok, event_us, kernel_us, error}: the output checked first (out=None: fn returns it), then timed."""
    r = dict(ok=None, event_us=None, kernel_us=None)
    try:
        if out is not None:
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            got = out
        else:
            got = fn()
            torch.cuda.synchronize()
        r["ok"] = gb.check(torch, got, ref)
        del got
    except Exception as e:  # refused the shape (RuntimeError) or anything else: recorded, not fatal
        r["error"] = err_text(e)
        return r
    if not r["ok"]:
        return r
    for key, timing in (("event_us", timer.events), ("kernel_us", timer.kernels if kernel_time else None)):
        if timing is None:
            continue
        try:
            r[key] = timing(fn)
        except Exception as e:
            r["error"] = err_text(e, f"{key}: ")
    return r


def measure_shape(torch, gemm, dg, timer, m, n, k, layout, gen, kernel_time_for):
    inp = gb.make_inputs(torch, m, n, k, layout, gen)
    ref = gb.reference(torch, inp)
    row = dict(m=m, n=n, k=k, impls={})
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")

    if gemm is not None:
        row["impls"]["ours"] = measure(torch, gb.ours(gemm, inp, out), out, ref, timer, "ours" in kernel_time_for)
        with gb.env_var("GEMM_CUDA_CONFIG", CUTLASS_CONFIG):
            row["impls"]["cutlass"] = measure(torch, gb.ours(gemm, inp, out), out, ref, timer,
                                              "cutlass" in kernel_time_for)

    if dg is not None:
        try:
            a, b = inp["a"].contiguous(), inp["b"].contiguous()
            sfa = inp["a_scale"].contiguous()
            sfb = inp["b_scale"].contiguous()
            sfa_t, how = deepgemm_sfa(torch, dg, sfa, m, k)
            torch.cuda.synchronize()
            row["deepgemm_sfa"] = how
            row["deepgemm_sfa_ready"] = in_call_transform_skipped(dg, sfa_t)
            d = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
            row["impls"]["deepgemm"] = measure(torch, lambda: dg.fp8_gemm_nt((a, sfa_t), (b, sfb), d), d, ref, timer,
                                               "deepgemm" in kernel_time_for)
            del a, b, sfa, sfb, sfa_t, d
        except Exception as e:
            row["impls"]["deepgemm"] = dict(ok=None, event_us=None, kernel_us=None,
                                            error=err_text(e))

    try:
        tinp = gb.torch_layout(torch, inp)
        row["impls"]["torch_blockwise"] = measure(torch, gb.torch_blockwise(torch, tinp), None, ref, timer,
                                                  "torch_blockwise" in kernel_time_for)
        del ref
        # Per-tensor with unit scales computes a @ b.T: checked against that product's own reference.
        unit = dict(a=inp["a"], b=inp["b"], a_scale=torch.ones_like(inp["a_scale"]),
                    b_scale=torch.ones_like(inp["b_scale"]))
        row["impls"]["torch_tensorwise"] = measure(torch, gb.torch_tensorwise(torch, tinp), None,
                                                   gb.reference(torch, unit), timer,
                                                   "torch_tensorwise" in kernel_time_for)
        del tinp, unit
    except Exception as e:
        row["impls"].setdefault("torch_blockwise", dict(ok=None, error=err_text(e)))
    del inp, out
    add_ratios(row)
    return row


def add_ratios(row):
    """Kernel-time ratios (>1: ours faster) and TFLOP/s."""
    im = row["impls"]

    def kus(name):
        r = im.get(name) or {}
        return r.get("kernel_us") if r.get("ok") else None

    ours = kus("ours")
    for name, key in (("deepgemm", "dg_over_ours"), ("torch_blockwise", "torch_over_ours"),
                      ("cutlass", "cutlass_over_ours")):
        other = kus(name)
        row[key] = other / ours if (ours and other) else None
    row["ours_tflops"] = gb.tflops(row["m"], row["n"], row["k"], ours) if ours else None
    dgk = kus("deepgemm")
    row["dg_tflops"] = gb.tflops(row["m"], row["n"], row["k"], dgk) if dgk else None


def summarize(rows):
    def ratios(key):
        return [r[key] for r in rows if r.get(key)]

    dg = [(r["dg_over_ours"], r) for r in rows if r.get("dg_over_ours")]
    behind = sorted(((x, r) for x, r in dg if x < 1.0), key=lambda xr: xr[0])
    return dict(
        shapes=len(rows), measured=sum(1 for r in rows if not r.get("skipped")),
        dg_compared=len(dg), behind_deepgemm=len(behind),
        behind_list=[f"{r['m']}x{r['n']}x{r['k']} ({x:.2f})" for x, r in behind],
        geomean_dg_over_ours=gb.geomean(ratios("dg_over_ours")),
        min_dg_over_ours=min(ratios("dg_over_ours")) if ratios("dg_over_ours") else None,
        geomean_torch_over_ours=gb.geomean(ratios("torch_over_ours")),
        min_torch_over_ours=min(ratios("torch_over_ours")) if ratios("torch_over_ours") else None,
        torch_compared=len(ratios("torch_over_ours")),
        geomean_cutlass_over_ours=gb.geomean(ratios("cutlass_over_ours")),
        cutlass_compared=len(ratios("cutlass_over_ours")),
        geomean_ours_tflops=gb.geomean(ratios("ours_tflops")),
        geomean_dg_tflops=gb.geomean(ratios("dg_tflops")),
        ours_failed=[f"{r['m']}x{r['n']}x{r['k']}" for r in rows if (r["impls"].get("ours") or {}).get("ok") is False],
    )


# ----------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------
def cell(row, name, key="kernel_us", spec=".1f"):
    """A time, ✗ (failed its check, not timed) or — (refused, not available); a kernel-time cell falls back
    to the event time, marked, where only that was taken."""
    r = (row.get("impls") or {}).get(name)
    if not r:
        return "—"
    if r.get("ok") is False:
        return "✗"
    if key == "kernel_us" and r.get(key) is None and r.get("event_us") is not None:
        return f"{gb.fmt(r['event_us'], spec)} (event)"
    return gb.fmt(r.get(key), spec)


def render_md(data):
    e = data["env"]
    dgi = data.get("deepgemm") or {}
    lines = [f"# Dense FP8 block-scaled GEMMs on the {e.get('gpu')}, same process, same inputs", "",
             f"Measured {e.get('date')} {e.get('time_utc', '')} UTC on the {e.get('gpu')} "
             f"(driver {e.get('driver')}, max SM clock "
             f"{e.get('max_sm_clock')}, power limit {e.get('power_limit')}), torch {e.get('torch')}, CUDA "
             f"{e.get('cuda')}; `{' '.join(['python3 benchmarks/deepgemm_bench.py'] + data.get('argv', []))}`, "
             f"one process.", ""]
    if dgi.get("error"):
        lines += [f"DeepGEMM not available: {dgi['error']}", ""]
    else:
        lines += [f"DeepGEMM {dgi.get('version')} (CUTLASS {dgi.get('cutlass', '?')}, commit {dgi.get('commit')}), "
                  f"`fp8_gemm_nt` with a bf16 output; its sfa prepared outside the timing by "
                  f"`{dgi.get('sfa_transform')}` (its call then does no transform: "
                  f"{dgi.get('sfa_ready_summary', '?')}). JIT warm-up: {json.dumps(data.get('warmup'))}.", ""]
    lines += [f"Inputs: `gemm_bench.make_inputs(..., {data.get('layout')!r})` (ours reads them in place; "
              f"torch gets copies in the layouts `_scaled_mm` takes). cutlass = ours with "
              f"`GEMM_CUDA_CONFIG={CUTLASS_CONFIG}` (CUTLASS 4.4's blockwise kernel). torch per-tensor "
              f"(unit scales, checked against the float64 a @ b.T) does less work: a ceiling, not a competitor.",
              "", f"Timing: {TIMING_TEXT} {data.get('reps_text', '')}", "",
              "Ratios are kernel-time ratios, > 1 when ours is faster: DG/ours = DeepGEMM µs / ours µs, "
              "torch/ours = torch blockwise µs / ours µs, cutlass/ours likewise.", ""]
    for name in data.get("suite_order", []):
        rows = data["suites"].get(name)
        if rows is None:
            continue
        lines += [f"## {SUITE_TITLES.get(name, name)}", "",
                  "| shape | ours kernel µs | DeepGEMM kernel µs | DG/ours | cutlass µs | torch blockwise µs | "
                  "torch/ours | ours event µs | DeepGEMM event µs | ours TFLOP/s | DG TFLOP/s | "
                  "torch per-tensor µs |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            shape = f"{r['m']}x{r['n']}x{r['k']}" + (f" (as in {r['same_as']})" if r.get("same_as") else "")
            if r.get("skipped"):
                lines.append(f"| {shape} | skipped: {r['skipped']} |" + " |" * 10)
                continue
            if r.get("error"):
                lines.append(f"| {shape} | error: {r['error'][:120].replace('|', '/')} |" + " |" * 10)
                continue
            dg_ratio = gb.fmt(r.get("dg_over_ours"), ".2f")
            if r.get("dg_over_ours") is not None and r["dg_over_ours"] < 1.0:
                dg_ratio = f"**{dg_ratio}**"
            lines.append(
                f"| {shape} | {cell(r, 'ours')} | {cell(r, 'deepgemm')} | {dg_ratio} | {cell(r, 'cutlass')} | "
                f"{cell(r, 'torch_blockwise')} | {gb.fmt(r.get('torch_over_ours'), '.2f')} | "
                f"{cell(r, 'ours', 'event_us')} | {cell(r, 'deepgemm', 'event_us')} | "
                f"{gb.fmt(r.get('ours_tflops'), '.0f')} | {gb.fmt(r.get('dg_tflops'), '.0f')} | "
                f"{cell(r, 'torch_tensorwise')} |")
        s = summarize(rows)
        lines += ["", f"- DG/ours geomean **{gb.fmt(s['geomean_dg_over_ours'], '.3f')}** over {s['dg_compared']} "
                      f"shapes (min {gb.fmt(s['min_dg_over_ours'], '.2f')}); ours behind DeepGEMM on "
                      f"**{s['behind_deepgemm']} of {s['dg_compared']}**"
                      + (f": {', '.join(s['behind_list'])}" if s["behind_list"] else ""),
                  f"- TFLOP/s geomean (kernel time): ours {gb.fmt(s['geomean_ours_tflops'], '.0f')}, DeepGEMM "
                  f"{gb.fmt(s['geomean_dg_tflops'], '.0f')}",
                  f"- torch blockwise / ours geomean {gb.fmt(s['geomean_torch_over_ours'], '.3f')} over "
                  f"{s['torch_compared']} shapes (min {gb.fmt(s['min_torch_over_ours'], '.2f')}); cutlass / ours "
                  f"geomean {gb.fmt(s['geomean_cutlass_over_ours'], '.3f')} over {s['cutlass_compared']}",
                  f"- shapes measured: {s['measured']} of {s['shapes']}"
                  + (f"; ours failed its check on {', '.join(s['ours_failed'])}" if s["ours_failed"] else ""), ""]
    errors = {}
    for rows in data.get("suites", {}).values():
        for r in rows:
            if r.get("same_as"):
                continue
            for name, imp in (r.get("impls") or {}).items():
                if imp.get("error"):
                    errors.setdefault((name, imp["error"][:110]), []).append(f"{r['m']}x{r['n']}x{r['k']}")
    if errors:
        lines += ["## Errors and refusals", ""]
        for (name, msg), shapes in sorted(errors.items()):
            lines.append(f"- {name} on {len(shapes)} shape{'s' if len(shapes) > 1 else ''} "
                         f"({', '.join(shapes[:4])}{', ...' if len(shapes) > 4 else ''}): {msg}")
        lines.append("")
    return "\n".join(lines)


def write_outputs(data, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tag = gpu_tag(data["env"].get("gpu"))
    try:
        data["summary"] = {name: summarize(rows) for name, rows in data.get("suites", {}).items()}
    except Exception as e:  # keep the raw rows whatever happens to the summary
        data["summary_error"] = f"{type(e).__name__}: {e}"
    with open(os.path.join(out_dir, f"deepgemm_{tag}.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    with open(os.path.join(out_dir, f"deepgemm_{tag}.md"), "w") as f:
        f.write(render_md(data) + "\n")
    return tag


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
def main():
    t_start = time.time()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suites", default=DEFAULT_SUITES, help=f"comma-separated, run in this order ({DEFAULT_SUITES})")
    ap.add_argument("--reps", type=int, default=20, help="calls per timing (events and kernel time)")
    ap.add_argument("--decode-reps", type=int, default=10, help="calls per timing in the decode suite")
    ap.add_argument("--max-shapes", type=int, default=0, help="only the first N shapes of each suite (smoke run)")
    ap.add_argument("--layout", default="kmajor", choices=("kmajor", "deepseek"),
                    help="gemm_bench.make_inputs layout of the shared inputs")
    ap.add_argument("--budget-s", type=float, default=520.0,
                    help="wall seconds from the start after which the remaining shapes are skipped (recorded)")
    ap.add_argument("--warm-timeout-s", type=float, default=240.0, help="limit of DeepGEMM's parallel JIT warm-up")
    ap.add_argument("--no-warm", action="store_true", help="skip DeepGEMM's parallel JIT warm-up")
    ap.add_argument("--out", default=None, help="output directory (default benchmarks/out/; with --render, the "
                                                 "json's directory)")
    ap.add_argument("--render", metavar="JSON", help="re-render the table from a results json (no GPU)")
    ap.add_argument("--warm-deepgemm", metavar="SHAPES", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.warm_deepgemm is not None:
        return warm_worker(args.warm_deepgemm)
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        out_dir = args.out or os.path.dirname(os.path.abspath(args.render))
        tag = gpu_tag(data["env"].get("gpu"))
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, f"deepgemm_{tag}.md"), "w") as f:
            f.write(render_md(data) + "\n")
        print(f"wrote {os.path.join(out_dir, f'deepgemm_{tag}.md')}")
        return 0

    args.out = args.out or os.path.join(HERE, "out")
    suites = [s for s in args.suites.split(",") if s]
    shapes = {name: suite_shapes(name) for name in suites}
    if args.max_shapes > 0:
        shapes = {name: s[:args.max_shapes] for name, s in shapes.items()}

    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "deepgemm_bench.log"), "w")

    def log(msg):
        line = f"[{time.time() - t_start:5.0f} s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    import torch

    try:
        import gemm
        gemm_error = None
    except Exception as e:
        gemm, gemm_error = None, err_text(e)
        log(f"gemm not importable: {gemm_error}")

    dg, dg_error = import_deepgemm()
    data = dict(env=gb.env_info(torch), argv=sys.argv[1:], layout=args.layout, reps=args.reps,
                decode_reps=args.decode_reps, suite_order=suites, suites={},
                timing=TIMING_TEXT, cutlass_config=CUTLASS_CONFIG, gemm_error=gemm_error,
                reps_text=f"{args.reps} calls per timing ({args.decode_reps} in the decode suite); in the decode "
                          f"suite cutlass and torch per-tensor get event times only, marked (event).")
    data["env"]["time_utc"] = time.strftime("%H:%M", time.gmtime())
    if gemm is not None:
        data["env"]["gemm_file"] = getattr(gemm, "__file__", None)
    data["deepgemm"] = deepgemm_info(dg) if dg is not None else dict(error=dg_error)
    tag = gpu_tag(data["env"].get("gpu"))
    log(json.dumps(data["env"]))
    log(f"deepgemm: {json.dumps(data['deepgemm'])}")

    if dg is not None and not args.no_warm:
        all_shapes = list(dict.fromkeys(s for name in suites for s in shapes[name]))
        try:
            data["warmup"] = warm_deepgemm(all_shapes, args.out, min(args.warm_timeout_s,
                                                                      max(30.0, args.budget_s * 0.5)), log)
        except Exception as e:
            data["warmup"] = dict(error=err_text(e))
            log(f"deepgemm warm-up failed: {e}")

    timer = gb.Timer(torch, args.reps)
    last_write = time.time()
    done = {}
    ready_counts = {}
    any_ours_failed = False
    for name in suites:
        rows = []
        data["suites"][name] = rows
        timer.reps = args.decode_reps if name == "decode" else args.reps
        kernel_time_for = ("ours", "deepgemm", "torch_blockwise") if name == "decode" else IMPLS
        gen = torch.Generator(device="cuda").manual_seed(36)
        t_suite = time.time()
        for (m, n, k) in shapes[name]:
            if (m, n, k) in done:
                row = dict(done[(m, n, k)][1])
                row["same_as"] = done[(m, n, k)][0]
                rows.append(row)
                continue
            if time.time() - t_start > args.budget_s:
                rows.append(dict(m=m, n=n, k=k, impls={}, skipped=f"time budget ({args.budget_s:.0f} s) spent"))
                continue
            try:
                row = measure_shape(torch, gemm, dg, timer, m, n, k, args.layout, gen, kernel_time_for)
            except Exception as e:
                row = dict(m=m, n=n, k=k, impls={}, error=err_text(e))
                log(traceback.format_exc()[-1500:])
            rows.append(row)
            done[(m, n, k)] = (name, row)
            if row.get("deepgemm_sfa"):
                data["deepgemm"].setdefault("sfa_transform", row["deepgemm_sfa"])
                ready_counts[row.get("deepgemm_sfa_ready")] = ready_counts.get(row.get("deepgemm_sfa_ready"), 0) + 1
            any_ours_failed |= (row["impls"].get("ours") or {}).get("ok") is False
            im = row["impls"]

            def brief(key):
                r = im.get(key) or {}
                if r.get("ok") is False:
                    return "✗"
                if r.get("error") and r.get("kernel_us") is None and r.get("event_us") is None:
                    return "err"
                return gb.fmt(r.get("kernel_us") if r.get("kernel_us") is not None else r.get("event_us"))

            log(f"{name} {m}x{n}x{k}: ours {brief('ours')} DG {brief('deepgemm')} cutlass {brief('cutlass')} "
                f"torch {brief('torch_blockwise')} per-tensor {brief('torch_tensorwise')} us; DG/ours "
                f"{gb.fmt(row.get('dg_over_ours'), '.3f')} torch/ours {gb.fmt(row.get('torch_over_ours'), '.3f')}")
            torch.cuda.empty_cache()
            if time.time() - last_write > 20:  # a run killed from outside keeps what it measured
                try:
                    write_outputs(data, args.out)
                except Exception:
                    log(traceback.format_exc()[-1500:])
                last_write = time.time()
        if dg is not None:
            data["deepgemm"]["sfa_ready_summary"] = ", ".join(
                f"{'yes' if key else ('no' if key is False else 'unknown')} on {v} shapes"
                for key, v in ready_counts.items()) or "?"
        try:
            write_outputs(data, args.out)
            last_write = time.time()
            s = data["summary"][name]
            log(f"suite {name} done in {time.time() - t_suite:.0f} s: DG/ours geomean "
                f"{gb.fmt(s['geomean_dg_over_ours'], '.3f')}, behind DeepGEMM on {s['behind_deepgemm']} of "
                f"{s['dg_compared']}; torch/ours {gb.fmt(s['geomean_torch_over_ours'], '.3f')}")
        except Exception:
            log(traceback.format_exc()[-1500:])
    try:
        write_outputs(data, args.out)
    except Exception:
        log(traceback.format_exc()[-1500:])
    log(f"wrote {args.out}/deepgemm_{tag}.{{json,md}} in {time.time() - t_start:.0f} s"
        + ("; ours FAILED a check" if any_ours_failed else ""))
    return 1 if any_ours_failed else 0


if __name__ == "__main__":
    sys.exit(main())
