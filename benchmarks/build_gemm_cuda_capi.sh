#!/usr/bin/env bash
# Builds the torch-free sm90 backend + C ABI shim into a shared library for gemm_h200.py's
# ctypes fallback:  benchmarks/build_gemm_cuda_capi.sh OUT_DIR [JOBS] [--stub-failed]
# CUTLASS headers: $CUTLASS_INCLUDE_DIR (default: the pip package nvidia-cutlass's include dir).
# --stub-failed: a kernel-variant TU that fails to compile is replaced by a stub whose run()
# returns cudaErrorNotSupported (so one broken variant does not cost a whole GPU session).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="${1:?usage: build_gemm_cuda_capi.sh OUT_DIR [JOBS] [--stub-failed]}"
jobs="${2:-$(nproc)}"
stub="${3:-}"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
cutlass="${CUTLASS_INCLUDE_DIR:-$(python3 -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))')}"
mkdir -p "$out"
flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -DNDEBUG
       -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
       -D__CUDA_NO_HALF2_OPERATORS__
       -Xcompiler -fPIC -Xptxas -v -I"$cutlass" -I"$root/gemm/gemm_cuda" -I"$root/gemm/include")
srcs=("$root"/gemm/gemm_cuda/*.cu "$here/gemm_cuda_capi.cu")
export out
printf '%s\n' "${srcs[@]}" | xargs -P "$jobs" -I{} sh -c \
  'f="{}"; b=$(basename "$f" .cu); "$0" "$@" -c "$f" -o "$out/$b.o" > "$out/$b.ptxas.log" 2>&1 || { echo "COMPILE FAILED: $b"; grep -m5 -i error "$out/$b.ptxas.log"; touch "$out/$b.failed"; }' \
  "$nvcc" "${flags[@]}"
for f in "$out"/*.failed; do
  [[ -e "$f" ]] || continue
  b=$(basename "$f" .failed)
  name=${b#sm90_}
  if [[ "$stub" != "--stub-failed" || "$b" != sm90_* ]]; then echo "build failed: $b"; exit 1; fi
  cat > "$out/$b.stub.cu" <<STUB
#include "sm90_kernel_args.h"
namespace fp8gemm::cuda::sm90 {
size_t ${name}_workspace_bytes(const KernelArgs&) { return 0; }
bool ${name}_can_implement(const KernelArgs&) { return false; }
cudaError_t ${name}_run(const KernelArgs&, void*, size_t, cudaStream_t) { return cudaErrorNotSupported; }
}
STUB
  "$nvcc" "${flags[@]}" -c "$out/$b.stub.cu" -o "$out/$b.o"
  echo "STUBBED: $b"
done
"$nvcc" -shared -o "$out/libgemm_cuda_capi.so" "$out"/*.o -lcudart_static
echo "built $out/libgemm_cuda_capi.so"
