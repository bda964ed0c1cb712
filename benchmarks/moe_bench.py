#!/usr/bin/env python3
"""MoE expert GEMMs on one GPU: gemm.matmul_grouped / matmul_batched against finegrained-fp8 v4's Triton
kernels, DeepGEMM's grouped GEMM and torch's bf16 grouped GEMM, on the expert shapes of DeepSeek-V3,
Qwen3-30B-A3B and Qwen3-235B-A22B.

Every timing starts from raw bf16 activations sorted by expert (the quantization inside the op, as
transformers calls it), uniform or skewed top-8 routing of T tokens (one routing per model and T, shared by
its two projections), L2 flushed before each call, median of CUDA-event times. Each implementation's output
is checked against a float64 reference on sampled rows before it is timed. The roofline of a shape is the
larger of (expert weights and scales hit + activations in + out) / the copy bandwidth and FLOPs / our dense
GEMM's throughput on a dense problem of the same size, both measured in the same run. For ours grouped the
profiler's kernel records also split the time into its stages: the activation quantization and the expert
GEMM kernel (what is left of the roofline when the GEMM runs alone).

finegrained-fp8 v4 runs from a copy of its torch-ext package (huggingface/kernels-community
`finegrained-fp8/torch-ext/finegrained_fp8`) given by --v4, kept outside git (e.g. `.cache/finegrained_fp8_v4`);
the `_ops` module kernel-builder would generate for it is stood in for here.

DeepGEMM (--deepgemm; `import deep_gemm` must work, as after run_h200.sh's `deepgemm` step) runs
`m_grouped_fp8_gemm_nt_contiguous` on its contiguous layout: each expert's rows padded to
`get_mk_alignment_for_contiguous_layout()` rows (128 on sm90), `grouped_layout` the expert of each padded row
(-1 on padding rows), per-row 128-group float32 activation scales, 128x128 weight scales. Two timings:
`deepgemm_gemm`, the GEMM alone on activations scattered and quantized beforehand; `deepgemm_charged`, the
whole job from the sorted bf16 rows: scatter into the padded buffer, quantization (gemm.fp8_act_quant: the
same codes and scales), the GEMM, gather of the real rows. The padded positions and `grouped_layout` are built
from the routing outside the timing. DeepGEMM compiles each kernel configuration (chosen from the padded row
count too) on first use; worker processes compile the ones the run needs in parallel before it measures.

    python3 benchmarks/moe_bench.py --v4 .cache/finegrained_fp8_v4 --deepgemm --out benchmarks/out
    python3 benchmarks/moe_bench.py --render benchmarks/results/moe_h100.json
"""
import argparse
import datetime
import importlib.util
import json
import math
import os
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemm_bench  # noqa: E402
import worker_pool  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = [  # name, experts, (N, K) of gate_up and down
    ("DeepSeek-V3", 256, [("gate_up", 4096, 7168), ("down", 7168, 2048)]),
    ("Qwen3-30B-A3B", 128, [("gate_up", 1536, 2048), ("down", 2048, 768)]),
    ("Qwen3-235B-A22B", 128, [("gate_up", 3072, 4096), ("down", 4096, 1536)]),
]
TOKENS = [1, 8, 64, 512, 4096]
TOP_K = 8


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def load_v4(path):
    if not path:
        return None
    import types

    import torch

    # kernel-builder generates the package's _ops.py; this package registers Triton ops only, so a stand-in
    # with the generated module's two names does.
    ops = types.ModuleType("finegrained_fp8_v4._ops")
    ops.ops = torch.ops._finegrained_fp8_bench
    ops.add_op_namespace_prefix = lambda name: f"_finegrained_fp8_bench::{name}"
    sys.modules[ops.__name__] = ops
    init = os.path.join(path, "__init__.py")
    spec = importlib.util.spec_from_file_location("finegrained_fp8_v4", init, submodule_search_locations=[path])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["finegrained_fp8_v4"] = mod
    spec.loader.exec_module(mod)
    # Four autotune configurations per kernel (num_warps 4 / 8 x num_stages 3 / 4), as in the runs.
    for sub in ("grouped", "batched"):
        m = sys.modules.get(f"finegrained_fp8_v4.{sub}")
        for name in dir(m):
            k = getattr(m, name)
            if hasattr(k, "configs") and name.startswith("w8a8_block_dynamic_fp8"):
                keep = [c for c in k.configs if c.num_warps in (4, 8) and c.num_stages in (3, 4)]
                k.configs = keep or k.configs[:4]
    return mod


def routing(torch, tokens, experts, skewed, gen):
    """top-8 expert ids per token (distinct per token): uniform, or skewed (Zipf-like weights)."""
    w = torch.ones(experts) if not skewed else 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** 1.2
    ids = torch.multinomial(w.float().expand(tokens, experts), TOP_K, replacement=False, generator=gen)
    return ids.flatten()


class Timer:
    def __init__(self, torch, reps):
        self.torch, self.reps = torch, reps
        self.flush_buf = torch.empty(512 << 20, dtype=torch.int8, device="cuda")

    def __call__(self, fn):
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.reps):
            self.flush_buf.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
        times.sort()
        return times[len(times) // 2]


# Kernel-name markers of the stages of our op, for its kernel-time breakdown.
STAGES = (("quant", ("act_quant",)), ("gemm", ("blockscaled_gemm_kernel", "decode_gemm_kernel", "expert_gemm_generic")))


def stage_times(torch, fn, flush, reps=5):
    """Mean µs per call of each stage's kernels (STAGES) in fn, from the profiler's kernel records, the L2
    flushed before each call. The routing kernel between them has no stage of its own. Kernels launched as
    programmatic dependents wait for the kernel before them inside their own records, so a stage's time can
    include part of the previous stage's."""
    fn()
    torch.cuda.synchronize()

    def body():
        for _ in range(reps):
            flush()
            fn()

    total = {name: 0.0 for name, _ in STAGES}
    for e in gemm_bench.kernel_records(torch, body):
        for name, markers in STAGES:
            if any(m in e.name for m in markers):
                total[name] += e.device_time
    return {name: t / reps for name, t in total.items()}


def copy_bandwidth(torch, timer):
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = timer(lambda: dst.copy_(src))
    return 2 * src.numel() / us / 1e6  # TB/s, read + write


def sampled_references(torch, a, b, bs, expert_of_row, rows, block=128):
    """(contract, raw): float64 A @ dequant(B[e]).T of the sampled rows (None for a row of no expert), each
    expert dequantized once per row for both.
    contract: A quantized per row and 128 group as fp8_act_quant's contract says (scale = max(amax / 448,
    1e-12), q = e4m3fn(x / scale), IEEE float32). The quantization runs on the CPU: on a GPU torch divides by a
    Python scalar through its reciprocal, which is one ulp off the quotient for some amax values.
    raw: from the unquantized activations, what any FP8 quantization of A approximates."""
    contract, raw = [], []
    k = a.shape[1]
    g = (k + block - 1) // block
    for r in rows.tolist():
        e = int(expert_of_row[r])
        if e < 0:
            contract.append(None)
            raw.append(None)
            continue
        x = a[r].float().cpu()
        xp = torch.nn.functional.pad(x, (0, g * block - k)).view(g, block)
        sc = torch.clamp(xp.abs().amax(-1) / 448.0, min=1e-12)
        q = ((xp / sc[:, None]).to(torch.float8_e4m3fn).double() * sc.double()[:, None]).to(b.device)
        w = b[e].double() * bs[e].double().repeat_interleave(block, 0)[: b.shape[1]].repeat_interleave(block, 1)[:, :k]
        contract.append(w @ q.flatten()[:k])
        raw.append(w @ a[r].double().to(b.device))
    return contract, raw


# Largest relative L2 error of a sampled row against the raw reference (sampled_references) that an FP8 (e4m3, per 128-group scale)
# quantization of the activations passes: its rounding error is about 2^-4 / sqrt(3) = 3.6 % of each term,
# so of the row; a wrong expert or row gives ~100 %.
QUANT_NOISE_L2 = 0.1


def rel_l2(torch, c, ref_rows, rows):
    """The largest ||got - ref|| / ||ref|| over the sampled rows (inf where a row of no expert is not zero)."""
    worst = 0.0
    for r, ref in zip(rows.tolist(), ref_rows):
        got = c[r].double()
        if ref is None:
            if not bool((got == 0).all()):
                return float("inf")
            continue
        worst = max(worst, float((got - ref).norm() / ref.norm().clamp_min(1e-300)))
    return worst


def agrees(torch, c, ref_rows, rows):
    for r, ref in zip(rows.tolist(), ref_rows):
        got = c[r].double()
        if ref is None:
            if not bool((got == 0).all()):
                return False
            continue
        tol = 2e-2 * ref.abs() + 1e-3 * ref.abs().max() + 1e-3
        if not bool(((got - ref).abs() <= tol).all()):
            return False
    return True


def seeded(torch, *key):
    """A CPU generator seeded from key, so a subset run (--models, --tokens) draws what the full run draws."""
    return torch.Generator().manual_seed(zlib.crc32("/".join(str(x) for x in key).encode()))


def padded_layout(torch, sorted_ids, counts, align):
    """DeepGEMM's contiguous layout of rows sorted by expert: each expert's segment padded to `align` rows.
    Returns (padded row count, the padded position of each sorted row (int64), grouped_layout (int32, the
    expert of each padded row, -1 on padding rows)). The padded size is read back to the host."""
    counts = counts.to(torch.int64)
    padded = (counts + align - 1) // align * align
    shift = (torch.cumsum(padded, 0) - padded) - (torch.cumsum(counts, 0) - counts)  # padded start - start
    pos = torch.arange(sorted_ids.numel(), device=sorted_ids.device) + shift[sorted_ids]
    m_pad = int(padded.sum())
    layout = torch.full((m_pad,), -1, dtype=torch.int32, device=sorted_ids.device)
    layout[pos] = sorted_ids.to(torch.int32)
    return m_pad, pos, layout


def warm_plan(shapes, workers, budget_bytes):
    """Splits {(E, N, K): [padded row counts]} into at most `workers` chunks, one process each. A process holds
    one weight tensor of its shape at a time, so the chunks of a shape are added only while the sum of every
    chunk's memory stays under budget_bytes; the shape with the most counts per chunk is split first."""
    def mem(shape):
        e, n, k = shape
        rows = max(shapes[shape])
        return e * n * k + e * (n // 128) * (k // 128) * 4 + rows * (2 * k + k + 2 * n + 4 * (k // 128) + 4) + (1 << 30)

    parts = {shape: 1 for shape in shapes}
    while sum(parts.values()) < workers:
        used = sum(parts[sh] * mem(sh) for sh in shapes)
        fits = [sh for sh in shapes if parts[sh] < len(shapes[sh]) and used + mem(sh) <= budget_bytes]
        if not fits:
            break
        parts[max(fits, key=lambda sh: (-(-len(shapes[sh]) // parts[sh]), mem(sh)))] += 1
    chunks = []
    for shape in sorted(shapes):
        ms = sorted(shapes[shape])
        for i in range(parts[shape]):
            part = ms[i * len(ms) // parts[shape]:(i + 1) * len(ms) // parts[shape]]
            if part:
                chunks.append(dict(shape=list(shape), ms=part))
    return chunks


def warm_worker(plan_path, index):
    """One warm-up process: calls DeepGEMM's grouped GEMM once per padded row count of its chunk, on zeros,
    so that the JIT compiles (into DG_JIT_CACHE_DIR) the kernels the measurements will call."""
    import torch

    import deep_gemm

    with open(plan_path) as f:
        plan = json.load(f)
    chunk, align = plan["chunks"][index], plan["align"]
    e, n, k = chunk["shape"]
    try:
        import gemm

        quant = gemm.fp8_act_quant
    except Exception:  # the same layout as gemm.fp8_act_quant's: scales M-contiguous, ld a multiple of 4
        def quant(x):
            m = x.shape[0]
            q = torch.zeros(m, k, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
            return q, torch.ones(k // 128, (m + 3) // 4 * 4, device="cuda").t()[:m]
    b = torch.zeros(e, n, k, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    bs = torch.ones(e, n // 128, k // 128, device="cuda")
    failed = 0
    for m in chunk["ms"]:
        t0 = time.time()
        try:
            q, qs = quant(torch.zeros(m, k, dtype=torch.bfloat16, device="cuda"))
            layout = (torch.arange(m, device="cuda") // align * e // (m // align)).to(torch.int32)
            d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            deep_gemm.m_grouped_fp8_gemm_nt_contiguous((q, qs), (b, bs), d, layout)
            torch.cuda.synchronize()
            print(f"[warm {index}] E {e} N {n} K {k} M {m}: {time.time() - t0:.1f} s", flush=True)
        except Exception as ex:
            failed += 1
            print(f"[warm {index}] E {e} N {n} K {k} M {m}: {type(ex).__name__}: {str(ex)[:200]}", flush=True)
    return 1 if failed else 0


def warm_deepgemm(torch, shapes, align, workers, timeout_s):
    """Compiles DeepGEMM's kernels for {(E, N, K): [padded row counts]} in `workers` processes of this
    script; returns what happened, for the run's env."""
    t0 = time.time()
    budget = int(0.65 * torch.cuda.get_device_properties(0).total_memory)
    chunks = warm_plan(shapes, workers, budget)
    plan_path = f"/tmp/moe_bench_deepgemm_warm_{os.getpid()}.json"
    with open(plan_path, "w") as f:
        json.dump(dict(align=align, chunks=chunks), f)
    calls = sum(len(c["ms"]) for c in chunks)
    print(f"[warm] {calls} DeepGEMM calls over {len(chunks)} processes (weights budget {budget / 2**30:.0f} GiB)",
          flush=True)
    procs = [worker_pool.start([sys.executable, os.path.abspath(__file__), "--warm-deepgemm", plan_path,
                                "--warm-index", str(i)]) for i in range(len(chunks))]
    # Past the deadline the rest compiles on first use in the measurements.
    pending = worker_pool.wait_until(
        procs, t0 + timeout_s,
        tick=lambda done, total: print(f"[warm] {done} of {total} done, {time.time() - t0:.0f} s", flush=True))
    info = dict(processes=len(procs), calls=calls, seconds=round(time.time() - t0, 1), timed_out=len(pending),
                failed=sum(1 for p in procs if p.returncode not in (0, None) and p not in pending))
    print(f"[warm] {info}", flush=True)
    return info


def deepgemm_impls(torch, gemm, dg, a, b, bs, sorted_ids, counts, align):
    """The two DeepGEMM callables for one row of the table, their inputs built outside the timing, and
    `post` (maps the GEMM-only output, in padded rows, to the sorted rows). Also reports whether DeepGEMM's
    own scale-layout helper had anything to do on fp8_act_quant's scales."""
    s, k = a.shape
    n = b.shape[1]
    m_pad, pos, layout = padded_layout(torch, sorted_ids, counts, align)
    a_pad = torch.zeros(m_pad, k, device=a.device, dtype=torch.bfloat16)
    a_pad.index_copy_(0, pos, a)
    q_pad, qs_pad = gemm.fp8_act_quant(a_pad)
    sf_layout = "not transformed (transform_sf_into_required_layout failed)"
    try:
        qs_dg = dg.transform_sf_into_required_layout(qs_pad, m_pad, k, (1, 128, 128), None, True)
        same = qs_dg.data_ptr() == qs_pad.data_ptr() and qs_dg.stride() == qs_pad.stride()
        sf_layout = "unchanged" if same else "transformed outside the timing"
    except Exception as ex:
        qs_dg = qs_pad
        sf_layout += f": {type(ex).__name__}: {str(ex)[:120]}"
    d_pad = torch.empty(m_pad, n, device=a.device, dtype=torch.bfloat16)
    # The charged job's padded buffer: allocated and zeroed once; each call overwrites the real rows only.
    # (With another routing its padding rows would hold stale rows: harmless, every output row depends on its
    # own activation row and scales only, and the padding rows are not gathered.)
    buf = torch.zeros(m_pad, k, device=a.device, dtype=torch.bfloat16)

    def gemm_only():
        dg.m_grouped_fp8_gemm_nt_contiguous((q_pad, qs_dg), (b, bs), d_pad, layout)
        return d_pad

    def charged():
        buf.index_copy_(0, pos, a)
        q, qs = gemm.fp8_act_quant(buf)
        d = torch.empty(m_pad, n, device=a.device, dtype=torch.bfloat16)
        dg.m_grouped_fp8_gemm_nt_contiguous((q, qs), (b, bs), d, layout)
        return d.index_select(0, pos)

    return m_pad, sf_layout, gemm_only, charged, lambda c: c.index_select(0, pos)


def selected_models(names):
    return [m for m in MODELS if names is None or m[0] in names]


def save(data, out_dir):
    """Writes moe_<gpu>.{json,md} (after every row, so that a run cut short keeps what it measured)."""
    os.makedirs(out_dir, exist_ok=True)
    tag = "h200" if "H200" in data["env"]["gpu"] else "h100"
    with open(os.path.join(out_dir, f"moe_{tag}.json"), "w") as f:
        json.dump(data, f, indent=1)
    md = render_md(data)
    with open(os.path.join(out_dir, f"moe_{tag}.md"), "w") as f:
        f.write(md)
    return md


def run(args):
    import torch

    import gemm

    models = selected_models(args.models)
    v4 = None
    v4_note = "not given (--v4)"
    if args.v4:
        try:
            v4 = load_v4(args.v4)
            v4_note = "loaded"
        except Exception as ex:
            v4_note = f"failed to load: {type(ex).__name__}: {str(ex)[:200]}"
            print(f"[v4] {v4_note}", flush=True)
    # Routings first (CPU): DeepGEMM's kernels depend on the padded row counts they give.
    routes = {}
    for model, experts, _ in models:
        for tokens in args.tokens:
            for skewed in args.routings:
                gen = seeded(torch, model, tokens, skewed)
                routes[model, tokens, skewed] = routing(torch, tokens, experts, skewed, gen)
    dg, dg_note, dg_warm, align, sf_layouts = None, "not run (no --deepgemm)", None, None, set()
    if args.deepgemm:
        try:
            import deep_gemm as dg

            align = int(dg.get_mk_alignment_for_contiguous_layout())
            dg_note = f"DeepGEMM {getattr(dg, '__version__', '?')}, contiguous layout aligned to {align} rows"
        except Exception as ex:
            dg = None
            dg_note = f"not run: import deep_gemm failed: {type(ex).__name__}: {str(ex)[:200]}"
        print(f"[deepgemm] {dg_note}", flush=True)
    if dg is not None and args.warm_workers > 0:
        try:
            shapes = {}
            for model, experts, projs in models:
                for proj, n, k in projs:
                    for tokens in args.tokens:
                        for skewed in args.routings:
                            counts = torch.bincount(routes[model, tokens, skewed], minlength=experts)
                            m_pad = int(((counts + align - 1) // align * align).sum())
                            shapes.setdefault((experts, n, k), set()).add(m_pad)
            dg_warm = warm_deepgemm(torch, {sh: sorted(ms) for sh, ms in shapes.items()}, align,
                                    args.warm_workers, args.warm_timeout)
        except Exception as ex:
            dg_warm = dict(error=f"{type(ex).__name__}: {str(ex)[:200]}")
            print(f"[warm] failed: {dg_warm['error']}", flush=True)
    timer = Timer(torch, args.reps)
    bw = copy_bandwidth(torch, timer)
    props = torch.cuda.get_device_properties(0)
    env = dict(gpu=props.name, torch=torch.__version__, cuda=torch.version.cuda,
               date=datetime.date.today().isoformat(), copy_tbps=bw, v4=bool(v4), v4_note=v4_note,
               deepgemm=dg_note, deepgemm_align=align, deepgemm_warm=dg_warm, deepgemm_sf_layout=[],
               models=[m[0] for m in models], tokens=args.tokens, reps=args.reps, complete=False,
               driver=os.popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader").read().strip())
    data = dict(env=env, rows=[])
    print(f"[run] copy bandwidth {bw:.2f} TB/s; {len(models)} models x 2 projections x {len(args.tokens)} T x "
          f"{len(args.routings)} routings", flush=True)
    t_start = time.time()
    rows_out = data["rows"]
    for model, experts, projs in models:
        for proj, n, k in projs:
            print(f"[run] {model} {proj} {n}x{k}, {time.time() - t_start:.0f} s", flush=True)
            # Weights as a block-quantized checkpoint holds them: codes spread over the fp8 range, one scale a block.
            wgen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{model}/{proj}".encode()))
            b = torch.empty(experts, n, k, device="cuda", dtype=torch.float8_e4m3fn)
            for e in range(experts):
                b[e] = torch.randn(n, k, device="cuda", generator=wgen) * 32
            bs = torch.rand(experts, n // 128, k // 128, device="cuda", generator=wgen) * 1e-3 + 1e-4
            b_bf16 = b_bf16_t = None  # dequantized weights for torch's bf16 grouped GEMM, made once per projection
            for tokens in args.tokens:
                for skewed in args.routings:
                    s = tokens * TOP_K
                    ids = routes[model, tokens, skewed].cuda()
                    sorted_ids, perm = ids.sort()
                    gen = seeded(torch, model, proj, tokens, skewed)
                    agen = torch.Generator(device="cuda").manual_seed(gen.initial_seed())
                    # The activations of the routed rows, already in expert order (as matmul_grouped takes them).
                    a = torch.randn(s, k, device="cuda", generator=agen).to(torch.bfloat16)
                    counts = torch.bincount(sorted_ids, minlength=experts)
                    offsets = torch.cumsum(counts, 0, dtype=torch.int32)
                    tpe = counts.to(torch.int32)
                    hit = int((counts > 0).sum())
                    byts = hit * n * k + hit * (n // 128) * (k // 128) * 4 + s * k * 2 + s * n * 2
                    flops = 2.0 * s * n * k
                    sample = torch.randperm(s, generator=gen)[: min(s, 24)]
                    ref, ref_raw = sampled_references(torch, a.float(), b, bs, sorted_ids, sample)
                    row = dict(model=model, proj=proj, experts=experts, n=n, k=k, tokens=tokens,
                               routing="skewed" if skewed else "uniform", rows=s, experts_hit=hit, bytes=byts)
                    impls = {
                        "ours_grouped": lambda: gemm.matmul_grouped(a, b, bs, offsets, tpe, [128, 128], torch.bfloat16),
                        "ours_batched": lambda: gemm.matmul_batched(a, b, bs, sorted_ids, [128, 128], torch.bfloat16),
                    }
                    post = {}
                    if v4 is not None:
                        impls["v4_grouped"] = lambda: v4.matmul_grouped(a, b, bs, offsets, tpe, [128, 128], torch.bfloat16)
                        impls["v4_batched"] = lambda: v4.matmul_batched(a, b, bs, sorted_ids, [128, 128], torch.bfloat16)
                    if dg is not None:
                        try:
                            (row["deepgemm_rows"], sf_layout, impls["deepgemm_gemm"], impls["deepgemm_charged"],
                             post["deepgemm_gemm"]) = deepgemm_impls(torch, gemm, dg, a, b, bs, sorted_ids, counts, align)
                            sf_layouts.add(sf_layout)
                        except Exception as ex:
                            for name in ("deepgemm_gemm", "deepgemm_charged"):
                                row[name + "_ok"], row[name + "_us"] = False, None
                                row[name + "_error"] = f"inputs: {type(ex).__name__}: {str(ex)[:160]}"
                    if hasattr(torch, "_grouped_mm") and s * n * 2 < (8 << 30):
                        try:
                            if b_bf16 is None:  # dequantized expert by expert (no fp32 copy of every expert at once)
                                b_bf16 = torch.empty(experts, n, k, device="cuda", dtype=torch.bfloat16)
                                for e in range(experts):
                                    b_bf16[e] = b[e].float() * bs[e].repeat_interleave(128, 0).repeat_interleave(128, 1)
                                b_bf16_t = b_bf16.transpose(1, 2)
                            impls["torch_bf16_grouped_mm"] = lambda: torch._grouped_mm(a, b_bf16_t, offs=offsets)
                        except Exception as ex:
                            row["torch_bf16_grouped_mm_us"] = None
                            row["torch_bf16_grouped_mm_error"] = f"{type(ex).__name__}: {str(ex)[:160]}"
                    for name, fn in impls.items():
                        try:
                            c = fn()
                            torch.cuda.synchronize()
                            if name in post:
                                c = post[name](c)
                            # torch's bf16 grouped GEMM on dequantized weights computes another quantity: only the
                            # relative L2 check against the unquantized reference applies to it.
                            row[name + "_l2"] = rel_l2(torch, c, ref_raw, sample)
                            row[name + "_ok"] = (agrees(torch, c, ref, sample) if not name.startswith("torch")
                                                 else row[name + "_l2"] <= QUANT_NOISE_L2)
                            del c
                            row[name + "_us"] = timer(fn)
                        except Exception as ex:  # a baseline that cannot run a shape is reported, not fatal
                            row[name + "_ok"] = False
                            row[name + "_us"] = None
                            row[name + "_error"] = f"{type(ex).__name__}: {str(ex)[:160]}"
                            print(f"[error] {model} {proj} T {tokens} {row['routing']} {name}: {row[name + '_error']}",
                                  flush=True)
                    try:
                        stages = stage_times(torch, impls["ours_grouped"], timer.flush_buf.zero_)
                        row["ours_quant_kernel_us"], row["ours_gemm_kernel_us"] = stages["quant"], stages["gemm"]
                    except Exception as ex:
                        row["ours_stages_error"] = f"{type(ex).__name__}: {str(ex)[:160]}"
                    # Dense reference throughput: our dense GEMM on (s, n, k) with one weight.
                    try:
                        wd, wds = b[0], bs[0]
                        qa, qs = gemm.fp8_act_quant(a)
                        outd = torch.empty(s, n, device="cuda", dtype=torch.bfloat16)
                        dense_us = timer(lambda: gemm.gemm(qa, wd, qs, wds, out=outd))
                        row["dense_tflops"] = flops / dense_us / 1e6
                        row["roofline_us"] = max(byts / bw / 1e6, flops / (row["dense_tflops"] * 1e6))
                        del qa, qs, outd
                    except Exception as ex:
                        row["dense_tflops"] = None
                        row["roofline_us"] = byts / bw / 1e6
                        row["dense_error"] = f"{type(ex).__name__}: {str(ex)[:160]}"
                    rows_out.append(row)
                    env["deepgemm_sf_layout"] = sorted(sf_layouts)
                    env["measure_seconds"] = round(time.time() - t_start, 1)
                    try:
                        save(data, args.out)
                    except Exception as ex:
                        print(f"[save] {type(ex).__name__}: {ex}", flush=True)
                    print(json.dumps({kk: v for kk, v in row.items() if not kk.endswith("_ok")}), flush=True)
                    del a, impls, post, ref, ref_raw
                    fn = None  # the last callable holds its inputs
            b = bs = b_bf16 = b_bf16_t = None
            torch.cuda.empty_cache()
    env["complete"] = True
    env["measure_seconds"] = round(time.time() - t_start, 1)
    return data


# The ones the sampled check judges.
IMPLS = ["ours_grouped", "ours_batched", "v4_grouped", "v4_batched", "deepgemm_gemm", "deepgemm_charged"]


def _in_noise(r, name):
    return r.get(name + "_l2") is not None and r[name + "_l2"] <= QUANT_NOISE_L2


def render_md(data):
    env = data["env"]
    stages = any("ours_gemm_kernel_us" in r for r in data["rows"])  # runs before the stage split have none
    dg_ran = any(kk.startswith("deepgemm_") and kk.endswith(("_us", "_error")) for r in data["rows"] for kk in r)
    if dg_ran:
        sf = env.get("deepgemm_sf_layout") or []
        dg_text = (f"{env.get('deepgemm', 'DeepGEMM')}: `m_grouped_fp8_gemm_nt_contiguous`, each expert's rows padded "
                   f"to a multiple of {env.get('deepgemm_align', 128)} rows, `grouped_layout` -1 on padding rows. "
                   "`DG gemm` = that GEMM alone, on "
                   "activations scattered into the padded layout and quantized by our `fp8_act_quant` beforehand "
                   "(not timed; its scales went through DeepGEMM's `transform_sf_into_required_layout` outside the "
                   f"timing: {', '.join(sf) or '–'}). `DG charged` = the whole job DeepGEMM needs from the same bf16 "
                   "rows sorted by expert: scatter into a preallocated zeroed padded buffer (`index_copy_`), "
                   "`fp8_act_quant`, the GEMM into a fresh padded output, gather of the real rows (`index_select`). "
                   "For both, the padded positions and `grouped_layout` are built from the routing outside the "
                   "timing (the padded size needs the expert counts on the host), as ours and v4 get their offsets. ")
    else:
        dg_text = f"DeepGEMM's grouped GEMM was not run ({env.get('deepgemm', 'not built')}). "
    out = [f"# MoE expert GEMMs, {env['gpu']}", "",
           f"Measured {env['date']}: {env['gpu']}, driver {env['driver']}, torch {env['torch']}, CUDA {env['cuda']}, "
           f"`benchmarks/moe_bench.py`. Copy bandwidth {env['copy_tbps']:.2f} TB/s (read + write). "
           "Times in µs (median, L2 flushed, CUDA events); ours, v4 and torch from raw bf16 activations sorted by "
           "expert (ours and v4 quantize inside the op; torch bf16 is `_grouped_mm` on dequantized weights). "
           + dg_text +
           "`roof` = max(bytes / copy bandwidth, FLOPs / our dense GEMM's throughput at the same size); "
           "`%roof` = roof / ours_grouped. `vs best` = the fastest of finegrained-fp8 v4 grouped, v4 batched and "
           "DG charged / ours_grouped; `vs DG gemm` = DG gemm / ours_grouped; `vs torch` = torch bf16 / ours_grouped. "
           "Checks, on 24 sampled rows before the timing: against float64 with the activations quantized by "
           "`fp8_act_quant`'s contract (rtol 2e-2 plus 1e-3 of the row's largest), and against float64 of the "
           f"unquantized activations (relative L2 error of each row <= {QUANT_NOISE_L2}: what any e4m3 quantization "
           "with one scale per 128 values passes, about 0.04; a wrong expert or row gives about 1). ≈: passes only "
           "the second (the implementation quantizes differently from the contract); ✗: fails both (rows of no "
           "expert must be zeros in both); torch bf16 gets only the second."
           + (" **The run stopped before its last row: the table holds the rows it measured.**"
              if env.get("complete") is False else ""), "",
           "| model | proj | T | routing | hit | ours grouped | ours batched | v4 grouped | v4 batched | DG gemm | "
           "DG charged | torch bf16 | roof | %roof | vs best | vs DG gemm | vs torch |"
           + (" ours quant | ours GEMM | GEMM %roof |" if stages else ""),
           "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
           + ("---:|---:|---:|" if stages else "")]
    ratios_best, ratios_dg, ratios_t, fracs, gemm_fracs, quant_shares = [], [], [], [], [], []

    def kernel_us(row, key):
        v = row.get(key)
        return f"{v:.1f}" if v is not None else "–"

    for r in data["rows"]:
        def f(name):
            v = r.get(name + "_us")
            l2 = r.get(name + "_l2")
            mark = ""
            if r.get(name + "_ok") is False:  # the sampled check of fp8_act_quant's contract failed
                mark = " ≈" if l2 is not None and l2 <= QUANT_NOISE_L2 else " ✗"
            return f"{v:.1f}{mark}" if v else ("error" if name + "_error" in r else "–")
        ours = r.get("ours_grouped_us")
        others = [r.get(x + "_us") for x in ("v4_grouped", "v4_batched", "deepgemm_charged") if r.get(x + "_us")]
        best = min(others) if others else None
        dgg = r.get("deepgemm_gemm_us")
        tb = r.get("torch_bf16_grouped_mm_us")
        vs = best / ours if ours and best else None
        vd = dgg / ours if ours and dgg else None
        vt = tb / ours if ours and tb else None
        frac = r["roofline_us"] / ours if ours else None
        gk = r.get("ours_gemm_kernel_us")
        gfrac = r["roofline_us"] / gk if gk else None
        if gfrac: gemm_fracs.append(gfrac)
        if gk and r.get("ours_quant_kernel_us") is not None and ours: quant_shares.append((r["tokens"], r["ours_quant_kernel_us"] / ours))
        if vs: ratios_best.append(vs)
        if vd: ratios_dg.append(vd)
        if vt: ratios_t.append(vt)
        if frac: fracs.append(frac)
        def ratio(x):
            return f"{x:.2f}x" if x else "–"
        out.append(f"| {r['model']} | {r['proj']} {r['n']}x{r['k']} | {r['tokens']} | {r['routing']} | {r['experts_hit']} | "
                   f"{f('ours_grouped')} | {f('ours_batched')} | {f('v4_grouped')} | {f('v4_batched')} | "
                   f"{f('deepgemm_gemm')} | {f('deepgemm_charged')} | "
                   f"{f('torch_bf16_grouped_mm')} | {r['roofline_us']:.1f} | "
                   f"{f'{100 * frac:.0f} %' if frac else '–'} | {ratio(vs)} | {ratio(vd)} | {ratio(vt)} |"
                   + (f" {kernel_us(r, 'ours_quant_kernel_us')} | {kernel_us(r, 'ours_gemm_kernel_us')} | "
                      f"{f'{100 * gfrac:.0f} %' if gfrac else '–'} |" if stages else ""))
    out += ["", f"Geomean over {len(ratios_best)} rows: best of v4 / DG charged over ours {geomean(ratios_best):.2f}x; "
            f"DG gemm / ours {geomean(ratios_dg):.2f}x; torch bf16 / ours {geomean(ratios_t):.2f}x; fraction of the "
            f"roofline {geomean(fracs):.2f}. Rows where ours is slower than the best of v4 / DG charged: "
            f"{sum(1 for x in ratios_best if x < 1)}; slower than DG gemm: {sum(1 for x in ratios_dg if x < 1)}; "
            f"slower than torch bf16: {sum(1 for x in ratios_t if x < 1)}; "
            f"below 80 % of the roofline: {sum(1 for x in fracs if x < 0.8)}. Failed checks: "
            + ", ".join(f"{name} {sum(1 for r in data['rows'] if r.get(name + '_ok') is False)} of {len(data['rows'])}"
                        for name in IMPLS) + "; of those, outside the quantization-noise bound as well: "
            + ", ".join(f"{name} {sum(1 for r in data['rows'] if r.get(name + '_ok') is False and not _in_noise(r, name))}"
                        for name in IMPLS + ["torch_bf16_grouped_mm"]) + ". Largest relative L2 error: "
            + ", ".join(f"{name} {max((r[name + '_l2'] for r in data['rows'] if r.get(name + '_l2') is not None), default=float('nan')):.3f}"
                        for name in IMPLS + ["torch_bf16_grouped_mm"]) + "."]
    if gemm_fracs:
        by_t = {}
        for t, share in quant_shares:
            by_t.setdefault(t, []).append(share)
        out += ["", "`ours quant` / `ours GEMM`: kernel time per call (µs, torch.profiler's records, 5 calls, L2 flushed "
                "before each) of our activation quantization and of the expert GEMM kernel (tile or decode) inside "
                "ours grouped; the routing kernel between them is left out. Each kernel after the first starts as "
                "a programmatic dependent of the one before and waits for it inside its own record, so a GEMM "
                "record can hold part of the quantization's time (quant + GEMM then exceed ours grouped) and "
                "`GEMM %roof` = roof / ours GEMM is a lower bound for the GEMM kernel alone. "
                f"GEMM kernel alone: fraction of the roofline {geomean(gemm_fracs):.2f} (geomean), below 80 % on "
                f"{sum(1 for x in gemm_fracs if x < 0.8)} of {len(gemm_fracs)} rows. Quantization kernel's share of "
                "ours grouped (median over the rows of one T): "
                + ", ".join(f"T {t} {100 * sorted(v)[len(v) // 2]:.0f} %" for t, v in sorted(by_t.items())) + "."]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--v4", help="path of finegrained-fp8 v4's torch-ext package (finegrained_fp8/)")
    ap.add_argument("--deepgemm", action="store_true", help="also time DeepGEMM's m_grouped_fp8_gemm_nt_contiguous")
    ap.add_argument("--warm-workers", type=int, default=min(14, os.cpu_count() or 1),
                    help="processes compiling DeepGEMM's kernels before the measurements (0: compile on first use)")
    ap.add_argument("--warm-timeout", type=float, default=300.0, help="seconds to wait for them")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--models", type=lambda v: v.split(","), default=None,
                    help="comma list of " + ", ".join(m[0] for m in MODELS) + " (default: all)")
    ap.add_argument("--tokens", type=lambda v: [int(x) for x in v.split(",")], default=TOKENS)
    ap.add_argument("--routings", type=lambda v: [x == "skewed" for x in v.split(",")], default=[False, True],
                    help="uniform,skewed")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--render", metavar="JSON")
    ap.add_argument("--warm-deepgemm", metavar="PLAN", help=argparse.SUPPRESS)
    ap.add_argument("--warm-index", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.warm_deepgemm:
        sys.exit(warm_worker(args.warm_deepgemm, args.warm_index))
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        sys.stdout.write(render_md(data))
        return
    unknown = sorted(set(args.models or []) - {m[0] for m in MODELS})
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)}; expected names from {', '.join(m[0] for m in MODELS)}")
    t0 = time.time()
    data = run(args)
    data["env"]["total_seconds"] = round(time.time() - t0, 1)
    print(save(data, args.out))


if __name__ == "__main__":
    main()
