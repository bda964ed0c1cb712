#!/usr/bin/env bash
# One H200 call that verifies what the CPU machines cannot: both kernels built for CUDA from the repo
# (pip path), their GPU test suites, and img2gray's publishing path (CUDA variant, offline loading,
# kernels benchmark, wheel). Carry .carry/cutlass and .carry/publish_wheels. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/final_h200}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUTLASS_INCLUDE_DIR=$PWD/.carry/cutlass
T0=$SECONDS
since() { echo "[$((SECONDS - T0)) s] $*"; }

python3 -m pip install -q --no-index --no-deps --find-links .carry/publish_wheels .carry/publish_wheels/*.whl \
  > "$OUT/publish_deps.log" 2>&1 || since "publish deps install failed (see publish_deps.log)"

# Both editable builds at once (gemm's CUTLASS units dominate).
(MAX_JOBS=4 timeout 200 python3 -m pip install -q --no-build-isolation --no-deps -e img2gray > "$OUT/build_img2gray.log" 2>&1; echo "img2gray build rc=$?" >> "$OUT/build_img2gray.log") &
MAX_JOBS=12 timeout 260 python3 -m pip install -q --no-build-isolation --no-deps -e gemm > "$OUT/build_gemm.log" 2>&1
since "gemm build rc=$?"
wait
tail -1 "$OUT/build_img2gray.log"

timeout 90 python3 -m pytest img2gray/tests -q -p no:cacheprovider > "$OUT/pytest_img2gray.log" 2>&1
since "img2gray GPU tests rc=$?: $(tail -1 "$OUT/pytest_img2gray.log")"

timeout 170 python3 -m pytest gemm/tests/test_gemm_cuda.py gemm/tests/test_gemm_errors.py -q -p no:cacheprovider \
  > "$OUT/pytest_gemm_cuda.log" 2>&1
since "gemm CUDA tests rc=$?: $(tail -1 "$OUT/pytest_gemm_cuda.log")"
grep -E "^FAILED" "$OUT/pytest_gemm_cuda.log" | head -8 | cut -c1-250

left=$((560 - (SECONDS - T0)))
if [ $left -gt 60 ]; then
  OUT=$OUT/publish timeout $left bash benchmarks/run_publish_h200.sh img2gray > "$OUT/publish_img2gray.log" 2>&1
  since "publish img2gray rc=$?"
  grep -E "^(PASS|FAIL|=== summary)" "$OUT/publish_img2gray.log" | head -20
else
  since "no time left for the publishing run"
fi
