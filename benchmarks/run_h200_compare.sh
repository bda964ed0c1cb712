#!/usr/bin/env bash
# One device call to choose between kernel configurations: pip build of the gemm extension (16 jobs), the
# forced hand-written-kernel tests of the variants named in $VARIANT_TESTS (pytest -k expression), the SASS
# of the hand-written kernels (QGMMA and local-memory instructions per function), with HAND_CHECK=1
# `gemm_h200.py --hand-check` (every hand-written kernel and split on 29 odd / mid-size shapes), with
# CLOCK_SHAPES=MxNxK,... `gemm_h200.py --clocks` (SM clock and power under load), then
# `gemm_h200.py --compare` (every candidate checked once, then all timed with torch blockwise in a
# rotating order, $ROUNDS rounds) on $SHAPES (default: the 18 benchmark shapes).
# Carry .carry/cutlass. Usage on the GPU machine: benchmarks/run_h200_compare.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/h200_gemm_common.sh
h200_start "${1:-}"
gpu_state
build_gemm_ext
so=$(python3 -c "import glob; print(' '.join(glob.glob('gemm/**/_gemm*.so', recursive=True)))")
if command -v cuobjdump > /dev/null && [ -n "$so" ]; then
  cuobjdump --dump-sass $so > /tmp/sass.txt 2>&1
  sass_hand_kernels /tmp/sass.txt > "$out/sass_hand.txt"
  since "SASS: $(wc -l < "$out/sass_hand.txt") hand-written kernels; QGMMA / local-memory instructions per kernel:"
  cut -c1-160 "$out/sass_hand.txt"
fi
if [ -n "${VARIANT_TESTS:-}" ]; then
  timeout 200 python3 -m pytest gemm/tests/test_gemm_cuda.py -q -p no:cacheprovider \
    -k "test_hand_written_kernels and ($VARIANT_TESTS)" > "$out/pytest_variants.log" 2>&1
  since "variant tests rc=$?: $(tail -1 "$out/pytest_variants.log")"
  grep -E "^FAILED|^ERROR" "$out/pytest_variants.log" | head -8 | cut -c1-250
fi
if [ "${HAND_CHECK:-0}" = 1 ]; then
  timeout 150 python3 benchmarks/gemm_h200.py --backend ext --hand-check --out-dir "$out/check" > "$out/hand_check.log" 2>&1
  since "hand check rc=$?"
  grep "^hand hand" "$out/hand_check.log" | awk '{split($3, r, "/"); if (r[1] != r[2]) bad++; n++} END {print n " configurations, " bad+0 " with failures"}'
  grep -E "HANDFAIL|Traceback" "$out/hand_check.log" | head -5 | cut -c1-250
fi
if [ -n "${CLOCK_SHAPES:-}" ]; then
  timeout 120 python3 benchmarks/gemm_h200.py --backend ext --clocks --shapes "$CLOCK_SHAPES" --out-dir "$out/clocks" \
    > "$out/clocks.log" 2>&1
  since "clocks rc=$?"
  grep "^clocks" "$out/clocks.log" | cut -c1-250
fi
left=$((570 - SECONDS))
timeout $left python3 benchmarks/gemm_h200.py --backend ext --compare --rounds "${ROUNDS:-3}" --shapes "${SHAPES:-}" \
  --out-dir "$out/res" > "$out/compare.log" 2>&1
since "compare rc=$?"
grep "^compare" "$out/compare.log" | cut -c1-600
tail -2 "$out/compare.log" | cut -c1-300
