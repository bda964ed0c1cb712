#!/usr/bin/env bash
# CI (no GPU): compile every CUDA translation unit of gemm's [kernel.gemm_cuda] section to an object (`-c`:
# nvcc's device pass and its host pass with the host compiler, g++ here) exactly as kernel-builder compiles
# it: from the staged Nix source set of gemm/ (only the files build.toml lists), with the section's include
# roots, defines, nvcc flags, C++ standard and -gencode list for this toolkit (tools/kbuild flags
# --cuda-version), CUTLASS as a system include of the release build.toml depends on (the kbuild cache that
# ci/setup.sh fills, or $CUTLASS_INCLUDE_DIR). Any unit that fails either pass fails the check.
# From the same compile (nvcc --keep, -Xptxas -v): each CUTLASS kernel variant must really issue warpgroup
# MMA (wgmma.mma_async) fed by TMA -- nothing silently fell back to mma.sync/FFMA -- and ptxas must neither
# serialise the hand-written kernels' wgmmas (warning C7514: a loop shape it cannot analyse makes it wait for
# each wgmma before the next) nor spill them, the launcher's own kernels (gemm_cuda.cu: the preparation pass)
# or the activation quantization (act_quant_cuda.cu).
# nvcc: $NVCC, else CUDA 13.0's nvcc from PyPI that ci/setup.sh installs (tools/kbuild install-nvcc),
# else nvcc on PATH / in /usr/local/cuda. $JOBS compiles run at once (default: the number of cores).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
kbuild=("$py" "$root/tools/kbuild")
nvcc="${NVCC:-$("$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); from kbuild.toolchain import find_nvcc; print(find_nvcc() or "")' "$root/tools")}"
if [[ -z "$nvcc" || ! -x "$nvcc" ]]; then
  echo "check_cuda: nvcc not found: run ci/setup.sh (installs CUDA 13.0's nvcc from PyPI) or set NVCC" >&2
  exit 1
fi
cuda_version="$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')"
[[ -n "$cuda_version" ]] || { echo "check_cuda: cannot read the CUDA version of $nvcc" >&2; exit 1; }
jobs="${JOBS:-$(nproc)}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
stage="$("${kbuild[@]}" stage "$root/gemm" --out "$out/stage")"
mapfile -t flags < <("${kbuild[@]}" flags "$root/gemm" gemm_cuda --stage "$stage" --lang cuda --cuda-version "$cuda_version")
[[ ${#flags[@]} -gt 0 ]] || { echo "check_cuda: no flags from tools/kbuild" >&2; exit 1; }
gencode=$(printf '%s\n' "${flags[@]}" | grep -c '^-gencode=' || true)
[[ "$gencode" -eq 1 ]] || { echo "check_cuda: expected one -gencode (sm_90a) from tools/kbuild, got $gencode" >&2; exit 1; }
flags+=(-c -Xptxas -v)
mapfile -t units < <("${kbuild[@]}" sources "$root/gemm" gemm_cuda)
srcs=()
for u in "${units[@]}"; do srcs+=("$stage/$u"); done
echo "check_cuda: $("$nvcc" --version | tail -1), host compiler $(c++ --version | head -1); ${#srcs[@]} units, $jobs jobs"
echo "check_cuda: flags: ${flags[*]}"
start=$SECONDS
# Every unit is compiled (a failing one does not stop the others), the largest (CUTLASS) units first;
# failures are reported below. --keep leaves the unit's PTX in its own folder.
printf '%s\n' "${srcs[@]}" | awk '{ print (/sm90_cutlass/ ? 0 : 1) "\t" $0 }' | sort -s -k1,1 | cut -f2- |
  xargs -P "$jobs" -I{} sh -c \
  'f="{}"; b=$(basename "$f" .cu); mkdir -p "'"$out"'/$b"; t0=$(date +%s); "$0" "$@" "$f" -o "'"$out"'/$b.o" --keep --keep-dir "'"$out"'/$b" > "'"$out"'/$b.log" 2>&1 || rm -f "'"$out"'/$b.o"; echo "  compiled $b in $(( $(date +%s) - t0 )) s"' \
  "$nvcc" "${flags[@]}" || true
echo "check_cuda: compiled in $((SECONDS - start)) s"
status=0
for f in "${srcs[@]}"; do
  b=$(basename "$f" .cu)
  ptx="$out/$b/$b.ptx"
  if [[ ! -s "$out/$b.o" ]]; then
    echo "FAIL $b: does not compile to an object (device or host pass):"
    { grep -E 'error|fatal' "$out/$b.log" || tail -5 "$out/$b.log"; } | head -5
    status=1
    continue
  fi
  if [[ ! -s "$ptx" ]]; then
    echo "FAIL $b: compiled, but nvcc --keep left no $b.ptx"
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
      echo "ok   $b: object; $n_wgmma wgmma.mma_async ($n_want $want), $n_tma cp.async.bulk.tensor"
    fi
  else
    echo "ok   $b: object (launcher / preparation kernels)"
  fi
done
hand=()
for f in "${srcs[@]}"; do
  case "$(basename "$f")" in sm90_tile*.cu|sm90_expert_tiles.cu|sm90_decode.cu|gemm_cuda.cu|expert_gemm_cuda.cu|act_quant_cuda.cu) [[ -s "$out/$(basename "$f" .cu).o" ]] && hand+=("$f") ;; esac
done
for f in "${hand[@]}"; do
  b=$(basename "$f" .cu)
  log="$out/$b.log"
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
