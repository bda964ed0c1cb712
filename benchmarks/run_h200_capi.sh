#!/usr/bin/env bash
# One device call: build the torch-free launcher + shim (16 cores), SASS check, small smoke cases,
# sweep + benchmark + correctness through the ctypes shim, then compute-sanitizer memcheck.
# Usage on the GPU machine: CUTLASS_INCLUDE_DIR=... benchmarks/run_h200_capi.sh OUT_DIR
set -uo pipefail
export PYTHONUNBUFFERED=1
out="${1:?OUT_DIR}"
build=/tmp/capi
lib=$build/libgemm_cuda_capi.so
mkdir -p "$out/res"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
t0=$SECONDS
benchmarks/build_gemm_cuda_capi.sh "$build" 16 --stub-failed 2>&1 | tail -12 || exit 1
echo "build: $((SECONDS - t0)) s"
cat "$build"/*.ptxas.log > "$out/ptxas.txt"
grep -h "registers\|spill" "$build"/sm90_*.ptxas.log | sort | uniq -c | head -12
{ for s in QGMMA HGMMA HMMA UTMALDG; do echo "$s $(cuobjdump --dump-sass "$lib" | grep -c "\b$s\b")"; done; } \
  > "$out/sass_counts.txt" 2>&1; cat "$out/sass_counts.txt"
timeout 90 python3 benchmarks/gemm_h200.py --backend capi --lib "$lib" --small-only > "$out/smoke.log" 2>&1
echo "smoke rc=$? at $((SECONDS - t0)) s"; grep -c "^ok" "$out/smoke.log"; grep -v "^ok" "$out/smoke.log" | tail -12 | cut -c1-250
timeout $((370 - SECONDS)) python3 benchmarks/gemm_h200.py --backend capi --lib "$lib" --sweep --use-sweep \
  --out-dir "$out/res" --ptxas-log "$build"/*.ptxas.log > "$out/run.log" 2>&1
echo "main rc=$? at $((SECONDS - t0)) s"
grep -v "^sweep" "$out/run.log" | grep -v "^FAIL" | cut -c1-330
grep -c "^FAIL" "$out/run.log"; grep "^FAIL" "$out/run.log" | head -8 | cut -c1-300
grep "^sweep" "$out/run.log" | cut -c1-420
left=$((440 - SECONDS)); [ $left -gt 20 ] || { echo "no time for compute-sanitizer"; exit 0; }
timeout $left compute-sanitizer --tool memcheck --leak-check no python3 benchmarks/gemm_h200.py --backend capi \
  --lib "$lib" --small-only > "$out/sanitizer.log" 2>&1; echo "sanitizer rc=$?"; tail -4 "$out/sanitizer.log"
