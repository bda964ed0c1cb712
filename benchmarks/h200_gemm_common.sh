# Sourced by the gemm device-call scripts (run_h200_ext_gemm.sh, run_h200_compare.sh, run_h200_hand.sh,
# run_h200_ncu.sh): the steps they share. h200_start and build_gemm_ext expect the repository root as working directory.

# h200_start OUT_DIR: output directory, unbuffered Python, CUTLASS headers from .carry/cutlass, and the
# `since` clock the scripts print their steps with.
h200_start() {
  out="${1:?OUT_DIR}"
  mkdir -p "$out"
  export PYTHONUNBUFFERED=1 CUTLASS_INCLUDE_DIR=$PWD/.carry/cutlass
  t0=$SECONDS
}
since() { echo "[$((SECONDS - t0)) s] $*"; }

# gpu_state: the GPU, driver, current / max SM clock, power limit and temperature, one CSV line.
gpu_state() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
}

# build_gemm_ext: pip build of the gemm extension from the repository (16 jobs) into $out/build.log.
build_gemm_ext() {
  MAX_JOBS=16 timeout 240 python3 -m pip install -q --no-build-isolation --no-deps -e gemm > "$out/build.log" 2>&1
  since "gemm build rc=$?"
  tail -3 "$out/build.log" | cut -c1-300
}

# sass_hand_kernels SASS_FILE: "QGMMA-count local-memory-instruction-count function" per hand-written kernel
# of a cuobjdump --dump-sass listing, sorted by name.
sass_hand_kernels() {
  awk '/Function :/{f=$3} /QGMMA/{q[f]++} /LDL|STL/{l[f]++} END{for (k in q) if (k ~ /hand/) print q[k], l[k]+0, k}' \
    "$1" | sort -k3
}
