#!/usr/bin/env bash
# One device call for the hand-written sm90 kernels, with a prebuilt torch-free library (built on the
# CPU machine by benchmarks/build_gemm_cuda_capi.sh, carried in .carry/capi):
#   1. SASS of the library (QGMMA / UTMALDG / UTMASTG counts),
#   2. every hand-written kernel forced on odd shapes, all layouts, poisoned outputs (--hand-check),
#   3. sweep of the launcher's current choice vs every hand-written kernel on the 18 benchmark shapes,
#      then the benchmark (ours = the sweep's best, vs torch blockwise / per-tensor / bf16),
#   4. compute-sanitizer memcheck on a few hand-written cases.
# Each step has its own timeout so a hung kernel costs one step, not the session.
# Usage on the GPU machine: benchmarks/run_h200_hand.sh OUT_DIR [LIB]
set -uo pipefail
source "$(dirname "$0")/h200_gemm_common.sh"
export PYTHONUNBUFFERED=1
out="${1:?OUT_DIR}"
lib="${2:-.carry/capi/libgemm_cuda_capi.so}"
mkdir -p "$out/res"
t0=$SECONDS
gpu_state
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
cuobjdump --dump-sass "$lib" > /tmp/sass.txt 2>&1
for s in QGMMA HGMMA UTMALDG UTMASTG; do echo "$s $(grep -c "\b$s\b" /tmp/sass.txt)"; done | tee "$out/sass_counts.txt"
# Hand kernels: per-function QGMMA count and local-memory use.
sass_hand_kernels /tmp/sass.txt | tee "$out/sass_hand.txt"
timeout ${HAND_CHECK_S:-150} python3 benchmarks/gemm_h200.py --backend capi --lib "$lib" --hand-check \
  --out-dir "$out/check" > "$out/check.log" 2>&1
echo "hand-check rc=$? at $((SECONDS - t0)) s"
grep "^hand \|HANDFAIL" "$out/check.log" | head -40 | cut -c1-300
tail -3 "$out/check.log" | cut -c1-300
timeout $((${SWEEP_END_S:-480} - SECONDS)) python3 benchmarks/gemm_h200.py --backend capi --lib "$lib" --sweep \
  --hand-sweep --use-sweep --skip-correctness --out-dir "$out/res" > "$out/sweep.log" 2>&1
echo "sweep rc=$? at $((SECONDS - t0)) s"
grep "^sweep" "$out/sweep.log" | cut -c1-600
grep -v "^sweep" "$out/sweep.log" | tail -22 | cut -c1-330
left=$((560 - SECONDS)); [ $left -gt 20 ] || { echo "no time for compute-sanitizer"; exit 0; }
timeout $left compute-sanitizer --tool memcheck --leak-check no python3 benchmarks/gemm_h200.py --backend capi \
  --lib "$lib" --hand-check --quick --skip-correctness --out-dir /tmp/san > "$out/sanitizer.log" 2>&1
echo "sanitizer rc=$?"; grep -c "^hand" "$out/sanitizer.log"; tail -4 "$out/sanitizer.log" | cut -c1-300
