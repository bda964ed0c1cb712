#!/usr/bin/env bash
# One device call for the sm90 gemm backend through the real extension: pip build (CUDA + CPU
# sections), benchmark + correctness suite (benchmarks/gemm_h200.py --backend ext), SASS check,
# then the GPU pytest file as far as the time allows. Falls back to the torch-free C ABI shim when
# the extension does not build. Usage on the GPU machine (device tool):
#   CUTLASS_INCLUDE_DIR=$PWD/.carry/cutlass bash benchmarks/run_h200_gemm.sh $OUT [SECONDS_BUDGET]
set -uo pipefail
out="${1:?OUT_DIR}"
budget="${2:-330}"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
mkdir -p "$out/res"
t0=$SECONDS
backend=ext
if ! timeout 200 python3 -m pip install -q --no-build-isolation --no-deps -e gemm > "$out/build.log" 2>&1; then
  echo "extension build FAILED after $((SECONDS - t0)) s:"; grep -m8 -iE "error|fatal" "$out/build.log" | cut -c1-300
  benchmarks/build_gemm_cuda_capi.sh /tmp/capi 16 --stub-failed >> "$out/build.log" 2>&1 || exit 1
  backend=capi
fi
echo "build ($backend): $((SECONDS - t0)) s"
lib=/tmp/capi/libgemm_cuda_capi.so
timeout $((budget - 90 - SECONDS)) python3 benchmarks/gemm_h200.py --backend $backend --lib $lib \
  --out-dir "$out/res" > "$out/run.log" 2>&1
echo "benchmark+correctness rc=$? at $((SECONDS - t0)) s"
grep -v "^FAIL" "$out/run.log" | cut -c1-300
grep -c "^FAIL" "$out/run.log"; grep "^FAIL" "$out/run.log" | head -5 | cut -c1-300
left=$((budget - SECONDS))
if [ "$backend" = ext ] && [ $left -gt 30 ]; then
  timeout $left python3 -m pytest -q -p no:cacheprovider gemm/tests/test_gemm_cuda.py \
    -k "bad_input or stream or mixed or special or fp8_path or reference or strided or odd or deepgemm" \
    > "$out/pytest.log" 2>&1
  echo "pytest rc=$? at $((SECONDS - t0)) s"; tail -4 "$out/pytest.log"
fi
