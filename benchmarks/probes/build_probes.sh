#!/usr/bin/env bash
# Builds the sm90 hand-kernel probes (standalone CUDA programs, no torch) into OUT_DIR (default
# .carry/probes, git-ignored): patched kernel copies from patch_kernel.py, then one binary per probe.
# Run them on the H200 through the device tool with carry [".carry/probes"]:
#   .carry/probes/probe_ceiling; .carry/probes/probe_streamk_plan; .carry/probes/probe_trace DIR;
#   .carry/probes/probe_ab; .carry/probes/probe_prepare
# CUTLASS headers (CuTe's wgmma atoms): $CUTLASS_INCLUDE_DIR (default .carry/cutlass).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/.carry/probes}"
cutlass="${CUTLASS_INCLUDE_DIR:-$root/.carry/cutlass}"
mkdir -p "$out"
python3 "$here/patch_kernel.py" "$out"
# probe_ab: the kernel as of $AB_BASE_REV (default: 494d0dd, the commit before the loop-carried-address
# change of session 6; session 5's A/B used fc50d9b, before the uniform-warpgroup-index change),
# namespace hand -> hand_old, the variant macro at its end dropped (both copies go into one program), and
# the current sm90_kernel_args.h (not $out's patched copy) shared by both.
git -C "$root" show "${AB_BASE_REV:-494d0dd}:gemm/gemm_cuda/sm90_hand_kernel.cuh" |
  sed -e 's/namespace fp8gemm::cuda::sm90::hand {/namespace fp8gemm::cuda::sm90::hand_old {/' \
      -e 's|}  // namespace fp8gemm::cuda::sm90::hand$|}  // namespace fp8gemm::cuda::sm90::hand_old|' \
      -e '/^#define FP8GEMM_SM90_HAND_VARIANT/,$d' \
      -e "s|#include \"sm90_kernel_args.h\"|#include \"$root/gemm/gemm_cuda/sm90_kernel_args.h\"|" > "$out/ab_old_kernel.cuh"
# probe_prepare: the preparation kernels as of $PREP_BASE_REV (default 97396d7, the end of session 6:
# one byte-transpose launch per operand plus a scale-copy launch), in namespace old_prep.
{
  echo '#pragma once'
  echo '#include "prepare_kernels.cuh"'
  echo 'namespace old_prep {'
  echo 'using fp8gemm::cuda::prep::decode_fp8;'
  git -C "$root" show "${PREP_BASE_REV:-97396d7}:gemm/gemm_cuda/gemm_cuda.cu" |
    sed -n '/^constexpr int kTR = 128/,/^\/\/ out\[m \* s_m/p' |
    sed -e '/^__device__ __forceinline__ float decode_fp8(uint8_t b, bool fnuz);$/d' -e '$d'
  echo '}  // namespace old_prep'
} > "$out/prep_old_kernels.cuh"
flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -DNDEBUG -Xptxas -v
       -I"$out" -I"$here" -I"$cutlass" -I"$root/gemm/gemm_cuda")
for p in probe_ceiling probe_streamk_plan probe_trace probe_ab probe_prepare; do
  nvcc "${flags[@]}" "$here/$p.cu" -o "$out/$p" > "$out/$p.ptxas.log" 2>&1 || { cat "$out/$p.ptxas.log"; exit 1; }
  echo "built $out/$p ($(grep -c 'C7514' "$out/$p.ptxas.log") wgmma-serialisation warnings)"
done
