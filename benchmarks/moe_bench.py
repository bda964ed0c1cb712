#!/usr/bin/env python3
"""MoE expert GEMMs on one GPU: gemm.matmul_grouped / matmul_batched against finegrained-fp8 v4's Triton
kernels and torch's bf16 grouped GEMM, on the expert shapes of DeepSeek-V3, Qwen3-30B-A3B and Qwen3-235B-A22B.

Every timing starts from raw bf16 activations (the quantization inside the op, as transformers calls it),
uniform or skewed top-8 routing of T tokens, L2 flushed before each call, median of CUDA-event times.
Each implementation's output is checked against a float64 reference on sampled rows before it is timed.
The roofline of a shape is the larger of (expert weights and scales hit + activations in + out) / the
copy bandwidth and FLOPs / our dense GEMM's throughput on a dense problem of the same size, both
measured in the same run.

finegrained-fp8 v4 runs from a copy of its torch-ext package (huggingface/kernels-community
`finegrained-fp8/torch-ext/finegrained_fp8`) given by --v4, kept outside git (e.g. `.cache/finegrained_fp8_v4`);
the `_ops` module kernel-builder would generate for it is stood in for here. DeepGEMM's grouped GEMM is not built
here: the table says so.

    python3 benchmarks/moe_bench.py --v4 .cache/finegrained_fp8_v4 --out benchmarks/out
    python3 benchmarks/moe_bench.py --render benchmarks/results/moe_h200.json
"""
import argparse
import datetime
import importlib.util
import json
import math
import os
import sys

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


def copy_bandwidth(torch, timer):
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = timer(lambda: dst.copy_(src))
    return 2 * src.numel() / us / 1e6  # TB/s, read + write


def sampled_reference(torch, a, b, bs, expert_of_row, rows, block=128):
    """float64 A @ dequant(B[e]).T of the sampled rows, A quantized per row and 128 group as fp8_act_quant's
    contract says (scale = max(amax / 448, 1e-12), q = e4m3fn(x / scale), IEEE float32). The quantization runs
    on the CPU: on a GPU torch divides by a Python scalar through its reciprocal, which is one ulp off the
    quotient for some amax values."""
    out = []
    k = a.shape[1]
    for r in rows.tolist():
        e = int(expert_of_row[r])
        if e < 0:
            out.append(None)
            continue
        x = a[r].float().cpu()
        g = (k + block - 1) // block
        xp = torch.nn.functional.pad(x, (0, g * block - k)).view(g, block)
        sc = torch.clamp(xp.abs().amax(-1) / 448.0, min=1e-12)
        q = ((xp / sc[:, None]).to(torch.float8_e4m3fn).double() * sc.double()[:, None]).to(b.device)
        w = b[e].double() * bs[e].double().repeat_interleave(block, 0)[: b.shape[1]].repeat_interleave(block, 1)[:, :k]
        out.append(w @ q.flatten()[:k])
    return out


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


def run(args):
    import torch

    import gemm

    v4 = load_v4(args.v4)
    timer = Timer(torch, args.reps)
    gen = torch.Generator().manual_seed(0)
    bw = copy_bandwidth(torch, timer)
    rows_out = []
    for model, experts, projs in MODELS:
        for proj, n, k in projs:
            # Weights as a block-quantized checkpoint holds them: codes spread over the fp8 range, one scale a block.
            b = torch.empty(experts, n, k, device="cuda", dtype=torch.float8_e4m3fn)
            for e in range(experts):
                b[e] = torch.randn(n, k, device="cuda") * 32
            bs = torch.rand(experts, n // 128, k // 128, device="cuda") * 1e-3 + 1e-4
            b_bf16 = None  # dequantized weights for torch's bf16 grouped GEMM, made once per projection
            for tokens in args.tokens:
                for skewed in args.routings:
                    s = tokens * TOP_K
                    ids = routing(torch, tokens, experts, skewed, gen).cuda()
                    sorted_ids, perm = ids.sort()
                    a = torch.randn(s, k, device="cuda", dtype=torch.bfloat16)
                    counts = torch.bincount(sorted_ids, minlength=experts)
                    offsets = torch.cumsum(counts, 0, dtype=torch.int32)
                    tpe = counts.to(torch.int32)
                    hit = int((counts > 0).sum())
                    byts = hit * n * k + hit * (n // 128) * (k // 128) * 4 + s * k * 2 + s * n * 2
                    flops = 2.0 * s * n * k
                    sample = torch.randperm(s, generator=gen)[: min(s, 24)]
                    ref = sampled_reference(torch, a.float(), b, bs, sorted_ids, sample)
                    row = dict(model=model, proj=proj, experts=experts, n=n, k=k, tokens=tokens,
                               routing="skewed" if skewed else "uniform", rows=s, experts_hit=hit, bytes=byts)
                    impls = {
                        "ours_grouped": lambda: gemm.matmul_grouped(a, b, bs, offsets, tpe, [128, 128], torch.bfloat16),
                        "ours_batched": lambda: gemm.matmul_batched(a, b, bs, sorted_ids, [128, 128], torch.bfloat16),
                    }
                    if v4 is not None:
                        impls["v4_grouped"] = lambda: v4.matmul_grouped(a, b, bs, offsets, tpe, [128, 128], torch.bfloat16)
                        impls["v4_batched"] = lambda: v4.matmul_batched(a, b, bs, sorted_ids, [128, 128], torch.bfloat16)
                    if hasattr(torch, "_grouped_mm") and s * n * 2 < (8 << 30):
                        if b_bf16 is None:  # dequantized expert by expert (no fp32 copy of every expert at once)
                            b_bf16 = torch.empty(experts, n, k, device="cuda", dtype=torch.bfloat16)
                            for e in range(experts):
                                b_bf16[e] = b[e].float() * bs[e].repeat_interleave(128, 0).repeat_interleave(128, 1)
                            b_bf16_t = b_bf16.transpose(1, 2)
                        impls["torch_bf16_grouped_mm"] = lambda: torch._grouped_mm(a, b_bf16_t, offs=offsets)
                    for name, fn in impls.items():
                        try:
                            c = fn()
                            torch.cuda.synchronize()
                            # torch's bf16 grouped GEMM on dequantized weights computes another quantity.
                            row[name + "_ok"] = agrees(torch, c, ref, sample) if not name.startswith("torch") else True
                            row[name + "_us"] = timer(fn)
                        except Exception as ex:  # a baseline that cannot run a shape is reported, not fatal
                            row[name + "_ok"] = False
                            row[name + "_us"] = None
                            row[name + "_error"] = f"{type(ex).__name__}: {str(ex)[:160]}"
                    # Dense reference throughput: our dense GEMM on (s, n, k) with one weight.
                    wd, wds = b[0], bs[0]
                    qa, qs = gemm.fp8_act_quant(a)
                    outd = torch.empty(s, n, device="cuda", dtype=torch.bfloat16)
                    dense_us = timer(lambda: gemm.gemm(qa, wd, qs, wds, out=outd))
                    row["dense_tflops"] = flops / dense_us / 1e6
                    row["roofline_us"] = max(byts / bw / 1e6, flops / (row["dense_tflops"] * 1e6))
                    rows_out.append(row)
                    print(json.dumps({kk: v for kk, v in row.items() if not kk.endswith("_ok")}), flush=True)
                    del a
            del b, bs, b_bf16
            torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(0)
    env = dict(gpu=props.name, torch=torch.__version__, cuda=torch.version.cuda,
               date=datetime.date.today().isoformat(), copy_tbps=bw, v4=bool(v4),
               driver=os.popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader").read().strip())
    return dict(env=env, rows=rows_out)


IMPLS = ["ours_grouped", "ours_batched", "v4_grouped", "v4_batched"]  # the ones the sampled check judges


def render_md(data):
    env = data["env"]
    out = [f"# MoE expert GEMMs, {env['gpu']}", "",
           f"Measured {env['date']}: {env['gpu']}, driver {env['driver']}, torch {env['torch']}, CUDA {env['cuda']}, "
           f"`benchmarks/moe_bench.py`. Copy bandwidth {env['copy_tbps']:.2f} TB/s (read + write). "
           "Times in µs (median, L2 flushed, CUDA events), from raw bf16 activations (quantization included). "
           "`roof` = max(bytes / copy bandwidth, FLOPs / our dense GEMM's throughput at the same size); "
           "`%roof` = roof / ours_grouped. `vs best` = the faster of finegrained-fp8 v4's grouped and batched / ours_grouped. "
           "✗: that output failed the sampled float64 check (24 rows, rtol 2e-2 plus 1e-3 of the row's largest). "
           "DeepGEMM's grouped GEMM was not built in this run.", "",
           "| model | proj | T | routing | hit | ours grouped | ours batched | v4 grouped | v4 batched | torch bf16 | roof | %roof | vs best v4 | vs torch |",
           "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ratios_v4, ratios_t, fracs = [], [], []
    for r in data["rows"]:
        def f(name):
            v = r.get(name + "_us")
            mark = " ✗" if r.get(name + "_ok") is False else ""  # the sampled check failed
            return f"{v:.1f}{mark}" if v else ("error" if name + "_error" in r else "–")
        ours = r.get("ours_grouped_us")
        v4s = [r.get(x + "_us") for x in ("v4_grouped", "v4_batched") if r.get(x + "_us")]
        best = min(v4s) if v4s else None
        tb = r.get("torch_bf16_grouped_mm_us")
        vs = best / ours if ours and best else None
        vt = tb / ours if ours and tb else None
        frac = r["roofline_us"] / ours if ours else None
        if vs: ratios_v4.append(vs)
        if vt: ratios_t.append(vt)
        if frac: fracs.append(frac)
        def ratio(x):
            return f"{x:.2f}x" if x else "–"
        out.append(f"| {r['model']} | {r['proj']} {r['n']}x{r['k']} | {r['tokens']} | {r['routing']} | {r['experts_hit']} | "
                   f"{f('ours_grouped')} | {f('ours_batched')} | {f('v4_grouped')} | {f('v4_batched')} | "
                   f"{f('torch_bf16_grouped_mm')} | {r['roofline_us']:.1f} | "
                   f"{f'{100 * frac:.0f} %' if frac else '–'} | {ratio(vs)} | {ratio(vt)} |")
    out += ["", f"Geomean over {len(ratios_v4)} rows: best v4 / ours {geomean(ratios_v4):.2f}x; torch bf16 / ours "
            f"{geomean(ratios_t):.2f}x; fraction of the roofline {geomean(fracs):.2f}. Rows where ours is slower than "
            f"the best v4: {sum(1 for x in ratios_v4 if x < 1)}; slower than torch bf16: {sum(1 for x in ratios_t if x < 1)}; "
            f"below 80 % of the roofline: {sum(1 for x in fracs if x < 0.8)}. Failed checks: "
            + ", ".join(f"{name} {sum(1 for r in data['rows'] if r.get(name + '_ok') is False)} of {len(data['rows'])}"
                        for name in IMPLS) + "."]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--v4", help="path of finegrained-fp8 v4's torch-ext package (finegrained_fp8/)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--tokens", type=lambda v: [int(x) for x in v.split(",")], default=TOKENS)
    ap.add_argument("--routings", type=lambda v: [x == "skewed" for x in v.split(",")], default=[False, True],
                    help="uniform,skewed")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--render", metavar="JSON")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        sys.stdout.write(render_md(data))
        return
    data = run(args)
    data["env"]["tokens"], data["env"]["reps"] = args.tokens, args.reps
    os.makedirs(args.out, exist_ok=True)
    tag = "h200" if "H200" in data["env"]["gpu"] else "h100"
    with open(os.path.join(args.out, f"moe_{tag}.json"), "w") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(args.out, f"moe_{tag}.md"), "w") as f:
        f.write(render_md(data))
    print(render_md(data))


if __name__ == "__main__":
    main()
