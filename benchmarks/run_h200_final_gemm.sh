#!/usr/bin/env bash
# One device call producing benchmarks/results/gemm_h200.*: the torch-free launcher (prebuilt on the CPU
# machine by benchmarks/build_gemm_cuda_capi.sh into .carry/capi; same sources as the extension) --
# every hand-written kernel forced on odd shapes, the hand sweep, the benchmark of the launcher's own
# choice (tuned table) against torch, the full correctness suite, compute-sanitizer on small cases.
# Usage on the GPU machine: benchmarks/run_h200_final_gemm.sh OUT_DIR [LIB]
set -uo pipefail
export PYTHONUNBUFFERED=1
out="${1:?OUT_DIR}"
lib="${2:-.carry/capi/libgemm_cuda_capi.so}"
mkdir -p "$out"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
timeout 420 python3 benchmarks/gemm_h200.py --backend capi --lib "$lib" --hand-check --sweep --hand-sweep \
  --out-dir "$out" --ptxas-log .carry/capi/*.ptxas.log > "$out/run.log" 2>&1
echo "main rc=$? at $((SECONDS - t0)) s"
grep -v "^sweep\|^hand \|^FAIL\|^HANDFAIL" "$out/run.log" | cut -c1-330 | tail -24
grep "^hand " "$out/run.log" | tr '\n' ' '; echo
grep -c "^FAIL\|^HANDFAIL" "$out/run.log"; grep "^FAIL\|^HANDFAIL" "$out/run.log" | head -5 | cut -c1-300
left=$((540 - SECONDS)); [ $left -gt 20 ] || { echo "no time for compute-sanitizer"; exit 0; }
timeout $left compute-sanitizer --tool memcheck --leak-check no python3 benchmarks/gemm_h200.py --backend capi \
  --lib "$lib" --small-only > "$out/sanitizer_dispatch.log" 2>&1; echo "sanitizer (dispatch) rc=$?"
tail -2 "$out/sanitizer_dispatch.log"
left=$((580 - SECONDS)); [ $left -gt 15 ] || exit 0
timeout $left compute-sanitizer --tool memcheck --leak-check no python3 benchmarks/gemm_h200.py --backend capi \
  --lib "$lib" --hand-check --quick --out-dir /tmp/san > "$out/sanitizer_hand.log" 2>&1; echo "sanitizer (hand) rc=$?"
tail -2 "$out/sanitizer_hand.log"
