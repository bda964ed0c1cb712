#!/usr/bin/env bash
# Compile every HIP translation unit of the gemm kernel for gfx942 (MI300X) with clang-19 and keep
# the device assembly (with its AMDGPU metadata: VGPR/AGPR/SGPR counts, LDS, scratch, spills).
#
#   ci/check_hip.sh [OUT_DIR]      (default: a fresh temp dir, printed at the end; HIP_STD=c++20 overrides the
#                                   standard kernel-builder would use with the installed torch; HIP_UNITS names a
#                                   subset of the units, HIP_ASM_ONLY=1 skips the object pass, JOBS the parallelism)
#
# The units are the .hip sources of build.toml's [kernel.gemm_rocm], compiled from the staged Nix
# source set (tools/kbuild stage: only the files build.toml lists) with that section's include roots
# and C++ standard under kernel-builder's rules (tools/kbuild flags).
# For each unit it writes OUT_DIR/<name>.gfx942.s (device-only -S) and also runs a full host+device
# `-c` compile, so the host pass against the HIP headers (and clang-offload-bundler) is checked as well.
# Needs (Debian 12): clang-19 clang-tools-19 lld-19 llvm-19 libamdhip64-dev rocm-device-libs
#
# Debian's device libraries are ROCm 5.2 and lack oclc_isa_version_942.bc; we write one into a
# temp dir from the gfx940 file with the ISA version constant 9400 -> 9402. Nothing is written
# into the repository.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
kernel_dir="$repo/gemm"
out_dir="${1:-}"
if [[ -z "$out_dir" ]]; then out_dir="$(mktemp -d -t gemm-hip-XXXXXX)"; fi
mkdir -p "$out_dir"

CLANG="${CLANG:-clang++-19}"
LLVM_DIS="${LLVM_DIS:-llvm-dis-19}"
LLVM_AS="${LLVM_AS:-llvm-as-19}"
for tool in "$CLANG" "$LLVM_DIS" "$LLVM_AS"; do
  command -v "$tool" >/dev/null || { echo "check_hip.sh: $tool not found (apt-get install clang-19 lld-19 llvm-19)" >&2; exit 2; }
done
[[ -f /usr/include/hip/hip_runtime.h ]] || { echo "check_hip.sh: HIP headers missing (apt-get install libamdhip64-dev)" >&2; exit 2; }

src_lib=""
for d in "${ROCM_DEVICE_LIB_PATH:-}" /usr/lib/x86_64-linux-gnu/amdgcn/bitcode /usr/lib/amdgcn/bitcode /opt/rocm/amdgcn/bitcode; do
  if [[ -n "$d" && -f "$d/ockl.bc" ]]; then src_lib="$d"; break; fi
done
[[ -n "$src_lib" ]] || { echo "check_hip.sh: ROCm device libraries not found (apt-get install rocm-device-libs)" >&2; exit 2; }

work="$(mktemp -d -t gemm-hip-devlib-XXXXXX)"
trap 'rm -rf "$work"' EXIT
devlib="$src_lib"
if [[ ! -f "$src_lib/oclc_isa_version_942.bc" ]]; then
  devlib="$work/bitcode"
  mkdir -p "$devlib"
  cp "$src_lib"/*.bc "$devlib/"
  "$LLVM_DIS" "$src_lib/oclc_isa_version_940.bc" -o "$work/isa940.ll"
  grep -q 'i32 9400' "$work/isa940.ll" || { echo "check_hip.sh: unexpected oclc_isa_version_940.bc contents" >&2; exit 2; }
  sed 's/i32 9400/i32 9402/' "$work/isa940.ll" > "$work/isa942.ll"
  "$LLVM_AS" "$work/isa942.ll" -o "$devlib/oclc_isa_version_942.bc"
fi

py="${PYTHON:-python3}"
stage="$("$py" "$repo/tools/kbuild" stage "$kernel_dir" --out "$work/stage")"
rules=()  # -std and the include roots of [kernel.gemm_rocm], inside the staged tree; HIP_STD overrides -std
while IFS= read -r f; do
  case "$f" in
    -std=*) rules+=("-std=${HIP_STD:-${f#-std=}}") ;;
    -I*) rules+=("$f") ;;
  esac
done < <("$py" "$repo/tools/kbuild" flags "$kernel_dir" gemm_rocm --stage "$stage" --lang hip)
flags=(-x hip --offload-arch=gfx942 -O3 -Wall -Wextra -Werror --rocm-device-lib-path="$devlib" "${rules[@]}")

units=()
while IFS= read -r u; do [[ "$u" == *.hip ]] && units+=("$stage/$u"); done < <("$py" "$repo/tools/kbuild" sources "$kernel_dir" gemm_rocm)
[[ ${#units[@]} -gt 0 ]] || { echo "check_hip.sh: [kernel.gemm_rocm] lists no .hip source" >&2; exit 1; }
if [[ -n "${HIP_UNITS:-}" ]]; then  # a subset by name (e.g. HIP_UNITS=gemm_launcher), for checks that need only that
  picked=()
  for unit in "${units[@]}"; do [[ " $HIP_UNITS " == *" $(basename "$unit" .hip) "* ]] && picked+=("$unit"); done
  [[ ${#picked[@]} -gt 0 ]] || { echo "check_hip.sh: HIP_UNITS=$HIP_UNITS names no .hip source of [kernel.gemm_rocm]" >&2; exit 1; }
  units=("${picked[@]}")
fi
# One job per unit and pass (the device assembly; the host + device object unless HIP_ASM_ONLY=1), $JOBS at once
# (default: the number of cores); each job's compiler output is printed after all have run, in unit order.
tasks=()
for unit in "${units[@]}"; do
  tasks+=("asm $unit")
  [[ "${HIP_ASM_ONLY:-0}" == 1 ]] || tasks+=("obj $unit")
done
compile_one() {  # <asm|obj> <unit>: writes $work/<name>.<kind>.log and, on failure, $work/<name>.<kind>.failed
  local kind=$1 unit=$2 name
  name="$(basename "$unit" .hip)"
  if [[ "$kind" == asm ]]; then
    "$CLANG" "${flags[@]}" --cuda-device-only -S "$unit" -o "$out_dir/$name.gfx942.s" > "$work/$name.asm.log" 2>&1 ||
      touch "$work/$name.asm.failed"
  else
    "$CLANG" "${flags[@]}" -fPIC -c "$unit" -o "$work/$name.o" > "$work/$name.obj.log" 2>&1 || touch "$work/$name.obj.failed"
  fi
}
jobs="${JOBS:-$(nproc)}" running=0
for task in "${tasks[@]}"; do
  compile_one $task &
  running=$((running + 1))
  if [[ $running -ge $jobs ]]; then wait -n || true; running=$((running - 1)); fi
done
wait
status=0
for task in "${tasks[@]}"; do
  read -r kind unit <<< "$task"
  name="$(basename "$unit" .hip)"
  if [[ "$kind" == asm ]]; then echo "== $name.hip: device assembly (gfx942)"; else echo "== $name.hip: host + device object"; fi
  cat "$work/$name.$kind.log"
  if [[ -e "$work/$name.$kind.failed" ]]; then echo "== $name.hip: FAILED"; status=1; fi
done
echo "assembly in: $out_dir"
exit $status
