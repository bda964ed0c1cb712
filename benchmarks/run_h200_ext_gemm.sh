#!/usr/bin/env bash
# One device call for the gemm torch extension on the H200: pip build from the repo (16 jobs), the GPU
# test suites (test_gemm_cuda.py incl. every hand-written kernel forced through GEMM_CUDA_CONFIG, and
# test_gemm_errors.py), then benchmarks/gemm_h200.py through the extension (benchmark of the dispatch
# table + correctness suite) into OUT_DIR/res. Carry .carry/cutlass (CUTLASS 4.2 headers).
# Usage on the GPU machine: benchmarks/run_h200_ext_gemm.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?OUT_DIR}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 CUTLASS_INCLUDE_DIR=$PWD/.carry/cutlass
t0=$SECONDS
since() { echo "[$((SECONDS - t0)) s] $*"; }
MAX_JOBS=16 timeout 240 python3 -m pip install -q --no-build-isolation --no-deps -e gemm > "$out/build.log" 2>&1
since "gemm build rc=$?"; tail -3 "$out/build.log" | cut -c1-300
timeout 250 python3 -m pytest gemm/tests/test_gemm_cuda.py gemm/tests/test_gemm_errors.py -q -p no:cacheprovider \
  > "$out/pytest_gemm_cuda.log" 2>&1
since "gemm GPU tests rc=$?: $(tail -1 "$out/pytest_gemm_cuda.log")"
grep -E "^FAILED|^ERROR" "$out/pytest_gemm_cuda.log" | head -8 | cut -c1-250
left=$((540 - SECONDS))
[ $left -gt 40 ] || { since "no time left for the benchmark"; exit 0; }
timeout $left python3 benchmarks/gemm_h200.py --backend ext --out-dir "$out/res" > "$out/bench.log" 2>&1
since "benchmark rc=$?"
grep -E "^ *[0-9]+x|summary|correctness|sass" "$out/bench.log" | cut -c1-200
