#!/usr/bin/env bash
# One device call: pip build of the gemm extension, then Nsight Compute (clocks left alone) on
# benchmarks/ncu_gemm_h200.py: speed-of-light, pipe utilisation, memory, warp-state and per-SASS-line
# stall sections of every GEMM kernel (ours, torch blockwise, torch per-tensor). Writes the report, its
# details / raw pages as CSV and the per-instruction source page of our kernels.
# Env: NCU_SHAPES=MxNxK,... (default 6144x4608x7168), NCU_CFGS="dispatch 12,0,1,8" (ours' configurations),
# NCU_NO_TORCH=1 (ours only).
# Carry .carry/cutlass. Usage on the GPU machine: benchmarks/run_h200_ncu.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/h200_gemm_common.sh
h200_start "${1:-}"
gpu_state
build_gemm_ext
ncu --version | tail -1
# shellcheck disable=SC2086
timeout 400 ncu --clock-control none --kernel-name regex:"fp8_blockscaled|nvjet|sm90|xmma|cutlass|gemm" \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
  --section SourceCounters --import-source no -f -o "$out/prof" \
  python3 benchmarks/ncu_gemm_h200.py "${NCU_SHAPES:-6144x4608x7168}" ${NCU_CFGS:-dispatch} > "$out/ncu.log" 2>&1
since "ncu rc=$?"
tail -5 "$out/ncu.log" | cut -c1-300
ncu -i "$out/prof.ncu-rep" --page details --csv > "$out/details.csv" 2> /dev/null
ncu -i "$out/prof.ncu-rep" --page raw --csv > "$out/raw.csv" 2> /dev/null
ncu -i "$out/prof.ncu-rep" --page source --print-source sass --csv \
  --kernel-name regex:fp8_blockscaled > "$out/source_ours.csv" 2> "$out/source_err.log"
since "pages: $(wc -l < "$out/details.csv") details lines, $(wc -l < "$out/source_ours.csv") source lines"
python3 benchmarks/ncu_summary.py "$out/details.csv"
