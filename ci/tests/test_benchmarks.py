"""The benchmark scripts outside the kernels: gemm_bench.py renders the committed results (tables and the
decode criteria's summary), its decode summary counts what it should, and stream_read.cu (the read ceiling
the decode suite builds on the GPU machine) compiles for sm_90a. In CI (CI_REQUIRE_NVCC=1) a missing nvcc
fails."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(ROOT / "tools"))


def load_gemm_bench():
    spec = importlib.util.spec_from_file_location("gemm_bench", BENCH / "gemm_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gemm_bench_renders_the_committed_results(tmp_path):
    result = subprocess.run([sys.executable, str(BENCH / "gemm_bench.py"), "--render",
                             str(BENCH / "results" / "gemm_h200.json"), "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    md = (tmp_path / "gemm_h200.md").read_text()
    committed = (BENCH / "results" / "gemm_h200.md").read_text()
    assert md == committed, "benchmarks/results/gemm_h200.md is not what gemm_bench.py renders from the json"
    data = json.loads((BENCH / "results" / "gemm_h200.json").read_text())
    section = md.split("## Decode-sized M")[1].split("\n## ")[0]
    decode_rows = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(decode_rows) == len(data["decode"])
    assert all(line.split(" | ")[4] != "—" for line in decode_rows), "a decode row without its read ceiling"
    assert all("ceiling_us" in r for r in data["decode"])
    assert "- M <= 16, weight >= 8 MB: kernel time at >= 80 % of the copy bandwidth on " in md


def _row(m, share, ceiling=None, ours=10.0, torch=None, bf16=20.0):
    r = dict(m=m, n=4096, k=7168, weight_mb=29.4, ours_kernel_bw_share=share, ours_flushed_us=ours,
             torch_flushed_us=torch, bf16_flushed_us=bf16)
    if ceiling is not None:
        r["ceiling_bw_share"] = ceiling
    return r


def test_decode_summary_counts_misses_unreachable_ones_and_slower_calls():
    bench = load_gemm_bench()
    rows = [_row(1, 0.85, 0.9), _row(2, 0.70, 0.9, torch=9.0), _row(4, 0.75, 0.78), _row(32, 0.60, 0.62, bf16=9.5),
            _row(64, 0.66), dict(_row(8, 0.10, 0.2), weight_mb=4.1)]
    lines = bench.decode_summary(rows)
    assert lines[0].startswith("- M <= 16, weight >= 8 MB: kernel time at >= 80 % of the copy bandwidth on 1 of 3; ")
    assert "2x4096x7168 (70 %, ceiling 90 %)" in lines[0] and "4x4096x7168 (75 %, ceiling 78 %)" in lines[0]
    assert lines[1] == "  - of these, the bare streaming read of the same bytes is itself below 80 % on 1"
    assert lines[2].startswith("- M = 32, 64, weight >= 8 MB: kernel time at >= 65 % of the copy bandwidth on 1 of 2; ")
    assert lines[3] == "  - of these, the bare streaming read of the same bytes is itself below 65 % on 1"
    assert lines[4] == ("- faster than torch blockwise on 0 of the 1 shapes it runs; "
                        "not on 2x4096x7168 (10.0 vs 9.0 µs)")
    assert lines[5] == "- faster than torch bf16 mm on 5 of the 6 shapes it runs; not on 32x4096x7168 (10.0 vs 9.5 µs)"


def test_stream_read_compiles_for_sm90a(tmp_path, nvcc):
    out = tmp_path / "stream_read.cubin"
    result = subprocess.run([nvcc, "-std=c++17", "-O3", "-arch=sm_90a", "-cubin", str(BENCH / "stream_read.cu"),
                             "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert out.stat().st_size > 0


def test_moe_bench_renders_the_committed_results():
    result = subprocess.run([sys.executable, str(BENCH / "moe_bench.py"), "--render",
                             str(BENCH / "results" / "moe_h100.json")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    committed = (BENCH / "results" / "moe_h100.md").read_text()
    assert result.stdout == committed, "benchmarks/results/moe_h100.md is not what moe_bench.py renders from the json"
    data = json.loads((BENCH / "results" / "moe_h100.json").read_text())
    rows = [line for line in committed.splitlines() if line.startswith("| ") and line.split(" | ")[2].isdigit()]
    assert len(rows) == len(data["rows"]) > 0
    # Every row says how each implementation fared: a time, a failed check (✗), an error or not run (–); a run
    # that recorded stage times adds three columns to every row (ours quant, ours GEMM, GEMM %roof; – where a
    # row has none), as render_md decides.
    staged = any("ours_gemm_kernel_us" in r for r in data["rows"])
    assert all(len(line.split(" | ")) == (20 if staged else 17) for line in rows)


def test_deepgemm_bench_renders_the_committed_results(tmp_path):
    result = subprocess.run([sys.executable, str(BENCH / "deepgemm_bench.py"), "--render",
                             str(BENCH / "results" / "deepgemm_h100.json"), "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    committed = (BENCH / "results" / "deepgemm_h100.md").read_text()
    assert (tmp_path / "deepgemm_h100.md").read_text() == committed, (
        "benchmarks/results/deepgemm_h100.md is not what deepgemm_bench.py renders from the json")
    data = json.loads((BENCH / "results" / "deepgemm_h100.json").read_text())
    # Every measured shape of ours passed its float64 check before it was timed.
    rows = [r for suite in data["suites"].values() for r in suite]
    assert rows and all(r["impls"]["ours"]["ok"] for r in rows)


def test_moe_bench_quantization_noise_check_separates_noise_from_a_wrong_expert():
    import torch

    mb = load_moe_bench()
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(6, 256, generator=gen)
    b = (torch.randn(3, 128, 256, generator=gen) * 8).to(torch.float8_e4m3fn)
    bs = torch.rand(3, 1, 2, generator=gen) + 0.5
    experts = torch.tensor([0, 1, 2, 0, -1, 1])
    rows = torch.arange(6)
    _, ref = mb.sampled_references(torch, a, b, bs, experts, rows)
    # Each activation through e4m3 with one scale per 128 values, as any FP8 quantization does.
    q = torch.zeros_like(a)
    for g in range(2):
        blk = a[:, g * 128:(g + 1) * 128]
        sc = blk.abs().amax(1, keepdim=True) / 448
        q[:, g * 128:(g + 1) * 128] = (blk / sc).to(torch.float8_e4m3fn).float() * sc
    out = torch.zeros(6, 128, dtype=torch.float64)
    for r in range(6):
        if experts[r] >= 0:
            e = int(experts[r])
            w = b[e].double() * bs[e].double().repeat_interleave(128, 1)
            out[r] = w @ q[r].double()
    assert mb.rel_l2(torch, out, ref, rows) <= mb.QUANT_NOISE_L2
    wrong = out.clone()
    wrong[0] = out[1]  # a row computed against another expert's weights
    assert mb.rel_l2(torch, wrong, ref, rows) > mb.QUANT_NOISE_L2
    stray = out.clone()
    stray[4] = 1.0  # a row of no expert must stay zero
    assert mb.rel_l2(torch, stray, ref, rows) == float("inf")


def test_worker_pool_ends_late_workers_with_the_processes_they_started(tmp_path):
    import time

    sys.path.insert(0, str(BENCH))
    import worker_pool

    pid_file = tmp_path / "child.pid"
    quick = worker_pool.start([sys.executable, "-c", "pass"])
    # A late worker with a child of its own, as a warm-up worker with its nvcc.
    late = worker_pool.start([sys.executable, "-c",
                              "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
                              "'import time; time.sleep(60)']); open(sys.argv[1], 'w').write(str(c.pid)); time.sleep(60)",
                              str(pid_file)])
    while not pid_file.exists() or not pid_file.read_text():
        time.sleep(0.1)
    child = int(pid_file.read_text())
    ticks = []
    killed = worker_pool.wait_until([quick, late], time.time() + 2.5, tick=lambda d, t: ticks.append((d, t)), tick_s=1.0)
    assert killed == [late] and quick.returncode == 0 and late.returncode is not None
    assert ticks and ticks[-1] == (1, 2)
    def running(pid):  # a killed child that nobody has reaped yet is a zombie: not running
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    for _ in range(50):  # the child went with its worker's process group
        if not running(child):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the late worker's child is still running")


def load_moe_bench():
    spec = importlib.util.spec_from_file_location("moe_bench", BENCH / "moe_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Float64GroupedGemm:
    """Stands in for deep_gemm: the contiguous-layout grouped GEMM in float64, checking its inputs' layout."""

    def transform_sf_into_required_layout(self, sf, mn, k, recipe, num_groups, is_sfa):
        return sf

    def m_grouped_fp8_gemm_nt_contiguous(self, a, b, d, layout):
        import torch

        (q, qs), (w, ws) = a, b
        assert layout.dtype == torch.int32 and layout.shape == (q.shape[0],) and d.shape == (q.shape[0], w.shape[1])
        x = q.double() * qs.double().repeat_interleave(128, 1)[:, : q.shape[1]]
        d.fill_(float("nan"))
        for e in layout.unique().tolist():
            rows = (layout == e).nonzero().flatten()
            if e < 0:
                assert bool((q[rows].float() == 0).all()), "a padding row is not zero"
                continue
            wd = w[e].double() * ws[e].double().repeat_interleave(128, 0).repeat_interleave(128, 1)
            d[rows] = (x[rows] @ wd.T).to(d.dtype)


def test_moe_bench_deepgemm_layout_maps_every_row_back():
    import torch

    import gemm

    bench = load_moe_bench()
    for experts, n, k, tokens, skewed in [(16, 256, 384, 5, False), (16, 256, 256, 40, True), (8, 128, 640, 30, True)]:
        gen = bench.seeded(torch, "test", tokens, skewed)
        sorted_ids = bench.routing(torch, tokens, experts, skewed, gen).sort()[0]
        counts = torch.bincount(sorted_ids, minlength=experts)
        m_pad, pos, layout = bench.padded_layout(torch, sorted_ids, counts, 128)
        assert m_pad == sum((c + 127) // 128 * 128 for c in counts.tolist())
        assert torch.equal(layout[pos].long(), sorted_ids) and int((layout >= 0).sum()) == sorted_ids.numel()
        starts = (torch.cumsum(counts, 0) - counts)[sorted_ids]
        assert bool(((pos - (torch.arange(sorted_ids.numel()) - starts)) % 128 == 0).all())  # segments 128-aligned
        b = (torch.randn(experts, n, k, generator=gen) * 32).to(torch.float8_e4m3fn)
        bs = torch.rand(experts, n // 128, k // 128, generator=gen) * 1e-3 + 1e-4
        a = torch.randn(sorted_ids.numel(), k, generator=gen).to(torch.bfloat16)
        sample = torch.randperm(a.shape[0], generator=gen)[:24]
        ref, _ = bench.sampled_references(torch, a.float(), b, bs, sorted_ids, sample)
        rows, sf_layout, gemm_only, charged, post = bench.deepgemm_impls(
            torch, gemm, _Float64GroupedGemm(), a, b, bs, sorted_ids, counts, 128)
        assert rows == m_pad and sf_layout == "unchanged"
        assert bench.agrees(torch, post(gemm_only()), ref, sample)
        assert bench.agrees(torch, charged(), ref, sample)
        assert not bench.agrees(torch, charged().roll(1, 0), ref, sample)  # rows out of place are caught


def test_moe_bench_warm_plan_covers_every_call_within_the_memory_budget():
    bench = load_moe_bench()
    shapes = {(256, 4096, 7168): [1024, 4608, 7040, 15488, 28544, 32640, 32768, 49152, 55296],
              (128, 1536, 2048): [1024, 4096, 7040, 12288, 16000], (128, 2048, 768): [1024, 40960]}
    budget = 40 << 30
    for workers in (1, 3, 14):
        chunks = bench.warm_plan(shapes, workers, budget)
        assert len(chunks) <= max(workers, len(shapes))
        assert sorted(m for c in chunks for m in c["ms"]) == sorted(m for ms in shapes.values() for m in ms)
        big = sum(1 for c in chunks if c["shape"] == [256, 4096, 7168])
        assert big * 256 * 4096 * 7168 < budget
    assert len(bench.warm_plan(shapes, 14, budget)) > len(shapes)  # split where the budget allows
