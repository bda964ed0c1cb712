#!/usr/bin/env bash
# One device call for the gemm torch extension on the H200: pip build from the repo (16 jobs), the GPU
# test suites (test_gemm_cuda.py incl. every hand-written kernel forced through GEMM_CUDA_CONFIG, and
# test_gemm_errors.py), then benchmarks/gemm_h200.py through the extension (benchmark of the dispatch
# table + correctness suite) into OUT_DIR/res, then compute-sanitizer memcheck on the hand-written kernels'
# split paths and on the preparation pass if time is left. Carry .carry/cutlass (CUTLASS 4.2 headers).
# Usage on the GPU machine: benchmarks/run_h200_ext_gemm.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/h200_gemm_common.sh
h200_start "${1:-}"
build_gemm_ext
timeout 250 python3 -m pytest gemm/tests/test_gemm_cuda.py gemm/tests/test_gemm_errors.py -q -p no:cacheprovider \
  > "$out/pytest_gemm_cuda.log" 2>&1
since "gemm GPU tests rc=$?: $(tail -1 "$out/pytest_gemm_cuda.log")"
grep -E "^FAILED|^ERROR" "$out/pytest_gemm_cuda.log" | head -8 | cut -c1-250
left=$((540 - SECONDS))
[ $left -gt 40 ] || { since "no time left for the benchmark"; exit 0; }
timeout $left python3 benchmarks/gemm_h200.py --backend ext --rounds 5 --out-dir "$out/res" > "$out/bench.log" 2>&1
since "benchmark rc=$?"
grep -E "^ *[0-9]+x|summary|correctness|sass" "$out/bench.log" | cut -c1-200
# compute-sanitizer memcheck on the hand-written kernels' split paths (stream-K incl. the partial-wave-only
# plan, split-K) on the one test shape with more tiles than SMs, if time is left.
left=$((585 - SECONDS))
[ $left -gt 60 ] || { since "no time left for compute-sanitizer"; exit 0; }
timeout $left compute-sanitizer --tool memcheck --leak-check no python3 -m pytest gemm/tests/test_gemm_cuda.py -q \
  -p no:cacheprovider -k "test_hand_written_kernels and 6144x576x1536 and (streamk or splitk2)" > "$out/sanitizer.log" 2>&1
since "compute-sanitizer rc=$?: $(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitizer.log") clean summaries, $(grep -c 'ERROR SUMMARY: [1-9]' "$out/sanitizer.log") with errors; $(tail -1 "$out/sanitizer.log" | cut -c1-120)"
# The same on the preparation pass (prepare_kernels.cuh: every transpose / copy path, edge tiles, padded
# leading dimensions; the two large shapes, which only change the rows per CTA, left out for time), then
# racecheck on its shared-memory tiles.
left=$((585 - SECONDS))
[ $left -gt 60 ] || { since "no time left for compute-sanitizer on the preparation pass"; exit 0; }
timeout $left compute-sanitizer --tool memcheck --leak-check no python3 -m pytest gemm/tests/test_gemm_cuda.py -q \
  -p no:cacheprovider -k "test_preparation_pass_is_exact and not 2000x2048 and not 4000x4096" > "$out/sanitizer_prepare.log" 2>&1
since "compute-sanitizer (preparation pass) rc=$?: $(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitizer_prepare.log") clean summaries, $(grep -c 'ERROR SUMMARY: [1-9]' "$out/sanitizer_prepare.log") with errors; $(tail -1 "$out/sanitizer_prepare.log" | cut -c1-120)"
left=$((585 - SECONDS))
[ $left -gt 30 ] || { since "no time left for racecheck"; exit 0; }
timeout $left compute-sanitizer --tool racecheck python3 -m pytest gemm/tests/test_gemm_cuda.py -q -p no:cacheprovider \
  -k "test_preparation_pass_is_exact and 257x1000 and fp8" > "$out/racecheck_prepare.log" 2>&1
since "racecheck (preparation pass) rc=$?: $(grep -c 'RACECHECK SUMMARY: 0 hazards' "$out/racecheck_prepare.log") clean summaries, $(grep -c 'RACECHECK SUMMARY: [1-9]' "$out/racecheck_prepare.log") with hazards; $(tail -1 "$out/racecheck_prepare.log" | cut -c1-120)"
