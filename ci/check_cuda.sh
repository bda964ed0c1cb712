#!/usr/bin/env bash
# CI (no GPU): compile every CUDA source of the sm90 GEMM backend to PTX for sm_90a with the same
# flags kernel-builder uses, and check that each CUTLASS kernel variant really issues
# warpgroup MMA (wgmma.mma_async) -- i.e. that nothing silently fell back to mma.sync/FFMA. The
# hand-written kernels' PTX (tile and decode kernels) also goes through ptxas (sm_90a): it must not serialise the wgmmas
# (warning C7514: a loop shape it cannot analyse makes it wait for each wgmma before the next) and
# must not spill; so must the launcher's own kernels (gemm_cuda.cu: the preparation pass, whose
# register caps come from its __launch_bounds__) and the activation quantization (act_quant_cuda.cu).
# The sources are compiled as kernel-builder compiles them: from the staged Nix source set of gemm/
# (only the files build.toml lists), with the [kernel.gemm_cuda] section's include roots, defines,
# nvcc flags and C++ standard (tools/kbuild flags), against the CUTLASS release build.toml depends on
# (the kbuild cache that ci/setup.sh fills, or $CUTLASS_INCLUDE_DIR).
# nvcc: $NVCC, else CUDA 13.0's nvcc from PyPI that ci/setup.sh installs (tools/kbuild install-nvcc),
# else nvcc on PATH / in /usr/local/cuda.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
kbuild=("$py" "$root/tools/kbuild")
nvcc="${NVCC:-$("$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); from kbuild.toolchain import find_nvcc; print(find_nvcc() or "")' "$root/tools")}"
if [[ -z "$nvcc" || ! -x "$nvcc" ]]; then
  echo "check_cuda: nvcc not found: run ci/setup.sh (installs CUDA 13.0's nvcc from PyPI) or set NVCC" >&2
  exit 1
fi
jobs="${JOBS:-$(nproc)}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
stage="$("${kbuild[@]}" stage "$root/gemm" --out "$out/stage")"
mapfile -t flags < <("${kbuild[@]}" flags "$root/gemm" gemm_cuda --stage "$stage" --lang cuda)
[[ ${#flags[@]} -gt 0 ]] || { echo "check_cuda: no flags from tools/kbuild" >&2; exit 1; }
flags+=(-gencode=arch=compute_90a,code=sm_90a -ptx)
mapfile -t units < <("${kbuild[@]}" sources "$root/gemm" gemm_cuda)
srcs=()
for u in "${units[@]}"; do srcs+=("$stage/$u"); done
echo "check_cuda: $("$nvcc" --version | tail -1); ${#srcs[@]} sources, $jobs jobs"
start=$SECONDS
# Every unit is compiled (a failing one does not stop the others); failures are reported below.
printf '%s\n' "${srcs[@]}" | xargs -P "$jobs" -I{} sh -c \
  'f="{}"; b=$(basename "$f" .cu); "$0" "$@" "$f" -o "'"$out"'/$b.ptx" 2> "'"$out"'/$b.err" || rm -f "'"$out"'/$b.ptx"' \
  "$nvcc" "${flags[@]}" || true
echo "check_cuda: compiled in $((SECONDS - start)) s"
status=0
for f in "${srcs[@]}"; do
  b=$(basename "$f" .cu)
  ptx="$out/$b.ptx"
  if [[ ! -s "$ptx" ]]; then
    echo "FAIL $b: does not compile:"
    grep -E 'error' "$out/$b.err" | head -5
    status=1
    continue
  fi
  n_wgmma=$(grep -c 'wgmma.mma_async' "$ptx" || true)
  n_e4m3=$(grep -c 'wgmma.mma_async.*e4m3.e4m3' "$ptx" || true)
  if [[ "$b" == sm90_* ]]; then
    # Every kernel TU must contain warpgroup MMAs of its operand type -- fp8 (e4m3 x e4m3), or fp16 for
    # the exact-accumulation kernel (sm90_*_f16) -- and TMA loads.
    n_tma=$(grep -c 'cp.async.bulk.tensor' "$ptx" || true)
    want=e4m3xe4m3; n_want=$n_e4m3
    if [[ "$b" == sm90_*_f16 ]]; then
      want=f16xf16; n_want=$(grep -c 'wgmma.mma_async.*\.f16\.f16' "$ptx" || true)
    fi
    if [[ "$n_want" -eq 0 || "$n_tma" -eq 0 ]]; then
      echo "FAIL $b: wgmma.mma_async $want = $n_want, cp.async.bulk.tensor = $n_tma"
      status=1
    else
      echo "ok   $b: $n_wgmma wgmma.mma_async ($n_want $want), $n_tma cp.async.bulk.tensor"
    fi
  else
    echo "ok   $b: compiled (launcher / preparation kernels)"
  fi
done
ptxas="$(dirname "$nvcc")/ptxas"
hand=()
for f in "${srcs[@]}"; do
  case "$(basename "$f")" in sm90_tile*.cu|sm90_expert_tiles.cu|sm90_decode.cu|gemm_cuda.cu|expert_gemm_cuda.cu|act_quant_cuda.cu) [[ -s "$out/$(basename "$f" .cu).ptx" ]] && hand+=("$f") ;; esac
done
printf '%s\n' "${hand[@]}" | xargs -P "$jobs" -I{} sh -c \
  'b=$(basename "{}" .cu); "$0" -arch=sm_90a -v "'"$out"'/$b.ptx" -o "'"$out"'/$b.cubin" > "'"$out"'/$b.ptxas" 2>&1 || { echo "FAILED: ptxas $b"; cat "'"$out"'/$b.ptxas"; exit 255; }' \
  "$ptxas"
for f in "${hand[@]}"; do
  b=$(basename "$f" .cu)
  log="$out/$b.ptxas"
  n_serial=$(grep -c 'C7514' "$log" || true)
  n_spill=$(grep -E 'bytes spill (stores|loads)' "$log" | grep -vc ' 0 bytes spill stores, 0 bytes spill loads' || true)
  n_fn=$(grep -c 'Compiling entry function' "$log" || true)
  if [[ "$n_serial" -ne 0 || "$n_spill" -ne 0 || "$n_fn" -eq 0 ]]; then
    echo "FAIL $b (ptxas): $n_serial wgmma-serialisation warnings (C7514), $n_spill kernels spilling, $n_fn kernels"
    grep -E 'C7514|bytes spill' "$log" | grep -v ' 0 bytes spill stores, 0 bytes spill loads' | head -5
    status=1
  else
    echo "ok   $b (ptxas): $n_fn kernels, no wgmma serialisation (C7514), no spills"
  fi
done
echo "check_cuda: done in $((SECONDS - start)) s"
exit $status
